# tests/recompute.cmake — `train --recompute full` is bitwise `--recompute none` through the CLI
# (tests/recompute_mesh.sh): losses and final checkpoints on 1x1, tp 2 with and without SP, dp 2 and
# tp 2 x dp 2 (cpu), 1x1 and tp 2 x dp 2 (cpu-bf16), for Llama, Qwen2 with a sliding window and Qwen3;
# and a resume that switches the mode. Uses the resume_data fixture of tests/resume.cmake.
add_test(NAME recompute_mesh_bitwise
         COMMAND ${CMAKE_SOURCE_DIR}/tests/recompute_mesh.sh ${MPIEXEC_EXECUTABLE} ${MPIEXEC_ARGS} --
                 $<TARGET_FILE:meshpoint> ${CMAKE_BINARY_DIR}/resume_data/t_train.bin
                 ${CMAKE_SOURCE_DIR}/tests/configs/cli_tiny.json ${CMAKE_BINARY_DIR}/Testing/recompute_mesh)
set_tests_properties(recompute_mesh_bitwise PROPERTIES FIXTURES_REQUIRED resume_data TIMEOUT 600 LABELS mpi
                     ENVIRONMENT "OPENBLAS_NUM_THREADS=1;OMPI_MCA_mpi_yield_when_idle=1")
