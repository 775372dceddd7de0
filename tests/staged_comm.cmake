# tests/staged_comm.cmake — the staged communicator (core/comm_staged.c) forced by `--comm staged` over
# the CPU backends (tests/staged_comm.sh):
#   staged_comm_cpu_meshes  tp 2, dp 2, tp 2 x dp 2 on cpu and cpu-bf16: losses, the step-3 checkpoint and
#                           the comm figures bitwise those of the plain MPI communicator; the memory plan
#                           counts the staging buffers (memplan_32m's peak within it)
add_test(NAME staged_comm_cpu_meshes
         COMMAND ${CMAKE_SOURCE_DIR}/tests/staged_comm.sh $<TARGET_FILE:meshpoint> ${CMAKE_BINARY_DIR}/resume_data/t_train.bin
                 ${CMAKE_SOURCE_DIR}/tests/configs/cli_tiny.json ${CMAKE_BINARY_DIR}/staged_comm)
set_tests_properties(staged_comm_cpu_meshes PROPERTIES FIXTURES_REQUIRED resume_data TIMEOUT 300 LABELS mpi
                     ENVIRONMENT "OPENBLAS_NUM_THREADS=1;OMPI_MCA_mpi_yield_when_idle=1")
#   gpu_e2e_dry_cpu_bf16    tests/gpu_e2e.sh's logic on cpu-bf16 pretending one GPU: the meshes of processes
#                           on it staged (1x2, 2x1, 2x2), bitwise resume per mesh, the mesh vs 1x1 and vs
#                           the CPU mesh within the bf16 tolerance, checkpoints across devices
add_test(NAME gpu_e2e_dry_cpu_bf16
         COMMAND ${CMAKE_SOURCE_DIR}/tests/gpu_e2e.sh $<TARGET_FILE:meshpoint> ${CMAKE_BINARY_DIR}/resume_data/t_train.bin
                 ${CMAKE_SOURCE_DIR}/tests/configs/cli_tiny.json ${CMAKE_BINARY_DIR}/gpu_e2e_dry)
set_tests_properties(gpu_e2e_dry_cpu_bf16 PROPERTIES FIXTURES_REQUIRED resume_data TIMEOUT 600 LABELS mpi
                     ENVIRONMENT "MP_GPU_E2E_DEVICE=cpu-bf16;MP_GPU_E2E_GPUS=1;MP_PYTHON=/usr/bin/python3;OPENBLAS_NUM_THREADS=1;OMPI_MCA_mpi_yield_when_idle=1")
