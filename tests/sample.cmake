# tests/sample.cmake — `meshpoint sample` (tests/sample.sh): deterministic for a seed and identical across
# meshes (1 process, tp 2, dp 2, tp 2 x dp 2 under mpiexec), the KV cache's tokens those of the whole-sequence
# path (--no-kv-cache), greedy at temperature 0, stops at eos_token_id, and its refusals. Uses the resume_data
# fixture of tests/resume.cmake.
add_test(NAME sample_text COMMAND ${CMAKE_SOURCE_DIR}/tests/sample.sh $<TARGET_FILE:meshpoint>
         ${CMAKE_BINARY_DIR}/resume_data/t_train.bin ${CMAKE_SOURCE_DIR}/tests/configs/cli_tiny.json ${CMAKE_BINARY_DIR}/sample)
set_tests_properties(sample_text PROPERTIES FIXTURES_REQUIRED resume_data TIMEOUT 900 LABELS mpi
                     ENVIRONMENT "OPENBLAS_NUM_THREADS=1;OMPI_MCA_mpi_yield_when_idle=1")

# eval_sample_cpu_bf16: tests/eval_sample_device.sh on cpu-bf16 (scripts/gpu-check.sh runs it on cuda as the
# eval_sample part): eval within 2e-3 of fp32, greedy ids with and without the KV cache equal to fp32's
add_test(NAME eval_sample_cpu_bf16 COMMAND ${CMAKE_SOURCE_DIR}/tests/eval_sample_device.sh $<TARGET_FILE:meshpoint>
         ${CMAKE_BINARY_DIR}/resume_data/t_train.bin ${CMAKE_SOURCE_DIR}/tests/configs/cli_tiny.json
         ${CMAKE_BINARY_DIR}/eval_sample_cpu_bf16 cpu-bf16)
set_tests_properties(eval_sample_cpu_bf16 PROPERTIES FIXTURES_REQUIRED resume_data TIMEOUT 300 LABELS unit
                     ENVIRONMENT "OPENBLAS_NUM_THREADS=1")
