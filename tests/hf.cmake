# tests/hf.cmake — Hugging Face export and import through the CLI:
#   hf_<case>          tests/hf_roundtrip.sh: export -> import -> export byte-identical (GQA untied from a
#                      tp 2 run, MQA tied from a dp 2 run), sharded output, import on tp2 x dp2 (one process
#                      and mpirun) = reshard --model-only of the original, eval of it = eval of the original,
#                      and the refusals (bad configs, tensors, destinations).
#   hf_logits_<config> tests/python/test_hf_logits.py: the exported safetensors, parsed in Python, in the
#                      PyTorch HF-convention Llama give meshpoint's logits within 1e-4; bf16 = RNE of fp32.
foreach(case roundtrip tied uneven sharded rope refusals)
  add_test(NAME hf_${case}
           COMMAND ${CMAKE_SOURCE_DIR}/tests/hf_roundtrip.sh $<TARGET_FILE:meshpoint> $<TARGET_FILE:tool_ckpt_equal>
                   ${CMAKE_BINARY_DIR}/resume_data/t_train.bin ${CMAKE_BINARY_DIR}/hf_${case} ${case})
  set_tests_properties(hf_${case} PROPERTIES FIXTURES_REQUIRED resume_data TIMEOUT 600 LABELS mpi
                       ENVIRONMENT "OPENBLAS_NUM_THREADS=1;OMPI_MCA_mpi_yield_when_idle=1")
endforeach()
# trained on byte data where the vocabulary holds it; seeded init otherwise (vocab 96/101)
foreach(cfg cli_tiny reshard_mqa_tied torch_gqa_tied torch_mqa_wide)
  set(extra "")
  if(cfg STREQUAL "cli_tiny" OR cfg STREQUAL "reshard_mqa_tied")
    set(extra --data ${CMAKE_BINARY_DIR}/resume_data/t_train.bin)
  endif()
  add_test(NAME hf_logits_${cfg}
           COMMAND ${MP_PYTHON} ${CMAKE_SOURCE_DIR}/tests/python/test_hf_logits.py --bin $<TARGET_FILE:meshpoint>
                   --tool $<TARGET_FILE:tool_hf_logits> --config ${CMAKE_SOURCE_DIR}/tests/configs/${cfg}.json
                   --work ${CMAKE_BINARY_DIR}/hf_logits_${cfg} ${extra})
  set_tests_properties(hf_logits_${cfg} PROPERTIES FIXTURES_REQUIRED resume_data TIMEOUT 300
                       ENVIRONMENT "OPENBLAS_NUM_THREADS=1;OMP_NUM_THREADS=1")
endforeach()
# hf_fused_phi3: tests/hf_fused.sh — Phi-3's fused qkv_proj / gate_up_proj: a random Phi3ForCausalLM saved
# by transformers -> import (tp 2, 1x1; meshpoint's logits = transformers' float64) -> export (whole,
# sharded) -> Phi3ForCausalLM.from_pretrained: no missing/unexpected keys, every tensor and the logits
# bitwise (scripts/bench_venv.sh's venv).
add_test(NAME hf_fused_phi3
         COMMAND ${CMAKE_SOURCE_DIR}/tests/hf_fused.sh $<TARGET_FILE:meshpoint> $<TARGET_FILE:tool_hf_logits>
                 ${CMAKE_SOURCE_DIR} ${CMAKE_BINARY_DIR}/hf_fused_phi3)
set_tests_properties(hf_fused_phi3 PROPERTIES TIMEOUT 900 RESOURCE_LOCK bench_venv
                     ENVIRONMENT "OPENBLAS_NUM_THREADS=1;OMP_NUM_THREADS=1")
