# tests/init_from.cmake — `meshpoint train --init-from` (tests/init_from.sh): the same losses on 1 process and
# on tp 2 x dp 2, full and model-only sources, step 1 = eval of the source, the source in the metadata.
add_test(NAME init_from_cli COMMAND ${CMAKE_SOURCE_DIR}/tests/init_from.sh ${MPIEXEC_EXECUTABLE} ${MPIEXEC_ARGS} --
         $<TARGET_FILE:meshpoint> ${CMAKE_BINARY_DIR}/cli_mpi_data/t_train.bin ${CMAKE_SOURCE_DIR}/tests/configs/cli_tiny.json
         ${CMAKE_BINARY_DIR}/init_from)
set_tests_properties(init_from_cli PROPERTIES FIXTURES_REQUIRED cli_mpi_data TIMEOUT 300 LABELS mpi
                     ENVIRONMENT "OPENBLAS_NUM_THREADS=1;OMPI_MCA_mpi_yield_when_idle=1")
