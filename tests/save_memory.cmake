# tests/save_memory.cmake — sync saves on the CPU keep no staging copy (tests/save_memory.sh). Uses the
# resume_data fixture of tests/resume.cmake.
add_test(NAME save_memory_no_staging COMMAND ${CMAKE_SOURCE_DIR}/tests/save_memory.sh $<TARGET_FILE:meshpoint>
         ${CMAKE_BINARY_DIR}/resume_data/t_train.bin ${CMAKE_SOURCE_DIR}/tests/configs/cli_tiny.json
         ${CMAKE_BINARY_DIR}/save_memory)
set_tests_properties(save_memory_no_staging PROPERTIES FIXTURES_REQUIRED resume_data TIMEOUT 300
                     ENVIRONMENT "OPENBLAS_NUM_THREADS=1")
