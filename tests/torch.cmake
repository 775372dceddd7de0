# tests/torch.cmake — PyTorch reference checks (Debian's python3-torch under /usr/bin/python3):
#   torch_selfcheck          the reference model itself (RoPE, GQA, RMSNorm, tying, fp32 vs fp64, gradcheck)
#   torch_compare_<config>   meshpoint's logits, loss and every parameter gradient against the float64
#                            reference, to 1e-4 (max|a-b|/max|b| per tensor), via tests/tool_llama_dump
# scripts/setup.sh installs python3-torch; without it these tests fail (they are never silently skipped).
if(TRUE)
  add_test(NAME torch_selfcheck COMMAND ${MP_PYTHON} ${CMAKE_SOURCE_DIR}/tests/python/llama_torch.py)
  # untied with the weights exactly as llama_init_weights makes them; tied and MQA with norm weights != 1.
  foreach(cfg gqa_untied gqa_tied mqa_wide)
    set(extra "")
    if(NOT cfg STREQUAL "gqa_untied")
      set(extra --perturb-norms)
    endif()
    add_test(NAME torch_compare_${cfg}
             COMMAND ${MP_PYTHON} ${CMAKE_SOURCE_DIR}/tests/python/compare_torch.py
                     --tool $<TARGET_FILE:tool_llama_dump>
                     --config ${CMAKE_SOURCE_DIR}/tests/configs/torch_${cfg}.json ${extra})
    set_tests_properties(torch_compare_${cfg} PROPERTIES ENVIRONMENT "OPENBLAS_NUM_THREADS=1;OMP_NUM_THREADS=1")
  endforeach()
endif()
