# tests/device.cmake — `--device cuda` on a host or build that cannot run it (tests/device_cuda.sh):
# exit 2 with the reason, nothing created; skipped (77) where `meshpoint --version` lists GPUs.
add_test(NAME device_cuda_refused COMMAND ${CMAKE_SOURCE_DIR}/tests/device_cuda.sh $<TARGET_FILE:meshpoint>
         ${CMAKE_BINARY_DIR}/resume_data/t_train.bin ${CMAKE_SOURCE_DIR}/tests/configs/cli_tiny.json
         ${CMAKE_BINARY_DIR}/device_cuda)
set_tests_properties(device_cuda_refused PROPERTIES FIXTURES_REQUIRED resume_data SKIP_RETURN_CODE 77 TIMEOUT 120
                     LABELS unit ENVIRONMENT "OPENBLAS_NUM_THREADS=1")
# tests/gpu_e2e.sh — `--device cuda` end to end on the GPUs present: exact resume (1x1, and tp x dp under
# mpiexec with 2+ GPUs), a GPU checkpoint verified, evaluated and resumed on the CPU, a CPU checkpoint
# resumed on the GPU. Skipped (77) without a usable GPU or in a build without CUDA; scripts/gpu-check.sh
# runs it on a lent GPU machine.
add_test(NAME gpu_e2e COMMAND ${CMAKE_SOURCE_DIR}/tests/gpu_e2e.sh $<TARGET_FILE:meshpoint>
         ${CMAKE_BINARY_DIR}/resume_data/t_train.bin ${CMAKE_SOURCE_DIR}/tests/configs/cli_tiny.json
         ${CMAKE_BINARY_DIR}/gpu_e2e)
set_tests_properties(gpu_e2e PROPERTIES FIXTURES_REQUIRED resume_data SKIP_RETURN_CODE 77 TIMEOUT 300
                     LABELS gpu ENVIRONMENT "OPENBLAS_NUM_THREADS=1;OMPI_MCA_mpi_yield_when_idle=1")
