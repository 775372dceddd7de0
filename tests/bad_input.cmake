# tests/bad_input.cmake — input that used to crash or pass (tests/bad_input.sh): process
# memory limits (ulimit -v / -d) met by the memory plan or by a clean out-of-memory exit 1, never an
# abort; --stop-at -1; --config through a pipe or naming a directory; empty path flags; an unknown MP_FAULT. Uses the
# resume_data fixture of tests/resume.cmake. The ulimit cases are left out of the ASan pass (ASan
# reserves terabytes of address space and cannot start under ulimit -v).
foreach(case ulimit_plan ulimit_data ulimit_seq ulimit_alloc ulimit_alloc_mpi stop_at config_stream config_dir run_dir_empty fault_unknown device_some_ranks)
  add_test(NAME bad_input_${case}
           COMMAND ${CMAKE_SOURCE_DIR}/tests/bad_input.sh $<TARGET_FILE:meshpoint> ${CMAKE_BINARY_DIR}/resume_data/t_train.bin
                   ${CMAKE_SOURCE_DIR}/tests/configs/cli_tiny.json ${CMAKE_BINARY_DIR}/bad_input_${case} ${CMAKE_SOURCE_DIR} ${case})
  set_tests_properties(bad_input_${case} PROPERTIES FIXTURES_REQUIRED resume_data TIMEOUT 120
                       ENVIRONMENT "OPENBLAS_NUM_THREADS=1;OMPI_MCA_mpi_yield_when_idle=1")
  if(case MATCHES "_mpi$|_ranks$")
    set_tests_properties(bad_input_${case} PROPERTIES LABELS mpi)
  endif()
endforeach()
