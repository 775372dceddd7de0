# tests/train_nonfinite.cmake — a non-finite gradient norm (stop, --on-nonfinite skip), a non-finite
# parameter refused by the save, and resume
# bookkeeping (nothing to do past --steps, a changed batch, time_s continuing) through the CLI
# (tests/train_nonfinite.sh). Uses the resume_data fixture of tests/resume.cmake.
foreach(case stop skip param resume_done resume_batch time_s)
  add_test(NAME train_nonfinite_${case}
           COMMAND ${CMAKE_SOURCE_DIR}/tests/train_nonfinite.sh $<TARGET_FILE:meshpoint>
                   ${CMAKE_BINARY_DIR}/resume_data/t_train.bin ${CMAKE_SOURCE_DIR}/tests/configs/cli_tiny.json
                   ${CMAKE_BINARY_DIR}/train_nonfinite_${case} ${case})
  set_tests_properties(train_nonfinite_${case} PROPERTIES FIXTURES_REQUIRED resume_data TIMEOUT 300
                       ENVIRONMENT "OPENBLAS_NUM_THREADS=1;OMPI_MCA_mpi_yield_when_idle=1")
endforeach()
