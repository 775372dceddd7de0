# tests/config_keys.cmake — HF config.json files as published (tests/config_keys.sh): unknown top-level keys
# warned about once (a near typo of a key the file lacks refused, "did you mean"), bookkeeping keys silent,
# the "train" object strict, unrepresentable keys refused; a
# published config read and planned. The published files themselves: test_core's config tests.
add_test(NAME config_keys COMMAND ${CMAKE_SOURCE_DIR}/tests/config_keys.sh $<TARGET_FILE:meshpoint>
         ${CMAKE_BINARY_DIR}/resume_data/t_train.bin ${CMAKE_BINARY_DIR}/config_keys)
set_tests_properties(config_keys PROPERTIES FIXTURES_REQUIRED resume_data TIMEOUT 300 LABELS mpi
                     ENVIRONMENT "OPENBLAS_NUM_THREADS=1;OMPI_MCA_mpi_yield_when_idle=1")
