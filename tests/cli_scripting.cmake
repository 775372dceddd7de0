# tests/cli_scripting.cmake — the CLI for people and scripts (tests/cli_scripting.sh):
# --version, --help defaults, the error prefix, --json of eval/verify/diff, the progress bar, ETA in the
# step lines. Single process; uses the resume_data fixture of tests/resume.cmake.
foreach(case version help errors json progress eta)
  add_test(NAME cli_scripting_${case}
           COMMAND ${CMAKE_SOURCE_DIR}/tests/cli_scripting.sh $<TARGET_FILE:meshpoint> ${CMAKE_BINARY_DIR}/resume_data/t_train.bin
                   ${CMAKE_SOURCE_DIR}/tests/configs/cli_tiny.json ${CMAKE_BINARY_DIR}/cli_scripting_${case} ${case})
  set_tests_properties(cli_scripting_${case} PROPERTIES FIXTURES_REQUIRED resume_data TIMEOUT 120
                       ENVIRONMENT "OPENBLAS_NUM_THREADS=1")
endforeach()
