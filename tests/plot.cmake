# tests/plot.cmake — `meshpoint plot` writes a real PNG of a run's curves (tests/plot.sh). Uses the
# resume_data fixture of tests/resume.cmake.
add_test(NAME plot_png COMMAND ${CMAKE_SOURCE_DIR}/tests/plot.sh $<TARGET_FILE:meshpoint>
         ${CMAKE_BINARY_DIR}/resume_data/t_train.bin ${CMAKE_BINARY_DIR}/resume_data/t_val.bin
         ${CMAKE_SOURCE_DIR}/tests/configs/cli_tiny.json ${CMAKE_BINARY_DIR}/plot)
set_tests_properties(plot_png PROPERTIES FIXTURES_REQUIRED resume_data TIMEOUT 300
                     ENVIRONMENT "OPENBLAS_NUM_THREADS=1")
