# tests/rope.cmake — RoPE scaling (linear, llama3) against a float64 reference of transformers' formulas
# (tests/python/rope_reference.py driving tests/tool_rope), a llama3-scaled model through checkpoints
# (tests/rope_ckpt.sh: stored, resumed, refused against another scaling), and training to the same
# losses on one process and on tp 2 x dp 2 (tests/cli_mesh_equal.sh; data from cli_mpi.cmake's fixture).
add_test(NAME rope_reference COMMAND ${MP_PYTHON} ${CMAKE_SOURCE_DIR}/tests/python/rope_reference.py
         $<TARGET_FILE:tool_rope> ${CMAKE_BINARY_DIR}/rope_reference)
set_tests_properties(rope_reference PROPERTIES TIMEOUT 120 LABELS unit)
add_test(NAME rope_llama3_same_loss_1x1_vs_tp2_dp2 COMMAND ${CMAKE_SOURCE_DIR}/tests/cli_mesh_equal.sh
         ${MPIEXEC_EXECUTABLE} ${MPIEXEC_ARGS} -- $<TARGET_FILE:meshpoint> ${CMAKE_BINARY_DIR}/cli_mpi_data/t_train.bin
         ${CMAKE_SOURCE_DIR}/tests/configs/rope_llama3_tiny.json ${CMAKE_BINARY_DIR}/cli_mpi_data/eq_rope_llama3)
set_tests_properties(rope_llama3_same_loss_1x1_vs_tp2_dp2 PROPERTIES FIXTURES_REQUIRED cli_mpi_data TIMEOUT 300
                     LABELS mpi ENVIRONMENT "OPENBLAS_NUM_THREADS=1;OMPI_MCA_mpi_yield_when_idle=1")
add_test(NAME rope_llama3_checkpoints COMMAND ${CMAKE_SOURCE_DIR}/tests/rope_ckpt.sh $<TARGET_FILE:meshpoint>
         ${CMAKE_BINARY_DIR}/cli_mpi_data/t_train.bin ${CMAKE_SOURCE_DIR}/tests/configs/rope_llama3_tiny.json
         ${CMAKE_BINARY_DIR}/rope_ckpt)
set_tests_properties(rope_llama3_checkpoints PROPERTIES FIXTURES_REQUIRED cli_mpi_data TIMEOUT 120 LABELS unit
                     ENVIRONMENT "OPENBLAS_NUM_THREADS=1")
# a Llama 3.2 config.json, shrunk, on a Llama 3 token file (uint32 ids): 1 process vs tp 2 x dp 2
add_test(NAME rope_llama3_2_e2e COMMAND ${CMAKE_SOURCE_DIR}/tests/llama3_e2e.sh ${MPIEXEC_EXECUTABLE} ${MPIEXEC_ARGS} --
         $<TARGET_FILE:meshpoint> ${CMAKE_BINARY_DIR}/rope_llama3_2_e2e)
set_tests_properties(rope_llama3_2_e2e PROPERTIES TIMEOUT 300 LABELS mpi
                     ENVIRONMENT "OPENBLAS_NUM_THREADS=1;OMPI_MCA_mpi_yield_when_idle=1")
