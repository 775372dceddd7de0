# tests/torch.cmake — PyTorch reference checks (Debian's python3-torch under /usr/bin/python3):
#   torch_selfcheck          the reference model itself (RoPE, GQA, RMSNorm, tying, fp32 vs fp64, gradcheck)
#   torch_compare_<config>   meshpoint's logits, loss and every parameter gradient against the float64
#                            reference, to 1e-4 (max|a-b|/max|b| per tensor), via tests/tool_llama_dump
#   torch_compare_<family>   the same with q/k/v biases, q/k norms and head_dim != hidden/heads
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
  # The families' math (layers/llama.c), set on the loaded config by the dump tool, biases and norm weights
  # perturbed away from 0 and 1: Qwen2's q/k/v biases (tied); Qwen3's q/k norms with head_dim 24 != 64/4
  # (q is wider than hidden); both, on MQA with head_dim 20 != 96/6.
  set(fam_qwen2_bias gqa_tied --qkv-bias)
  set(fam_qwen3_hd gqa_untied --qk-norm --head-dim 24)
  set(fam_bias_norm_mqa mqa_wide --qkv-bias --qk-norm --head-dim 20)
  foreach(fam qwen2_bias qwen3_hd bias_norm_mqa)
    list(POP_FRONT fam_${fam} cfg)
    add_test(NAME torch_compare_${fam}
             COMMAND ${MP_PYTHON} ${CMAKE_SOURCE_DIR}/tests/python/compare_torch.py
                     --tool $<TARGET_FILE:tool_llama_dump>
                     --config ${CMAKE_SOURCE_DIR}/tests/configs/torch_${cfg}.json --perturb-norms ${fam_${fam}})
    set_tests_properties(torch_compare_${fam} PROPERTIES ENVIRONMENT "OPENBLAS_NUM_THREADS=1;OMP_NUM_THREADS=1")
  endforeach()
endif()
