# tests/ckpt_naming.cmake — one way to name a checkpoint through the CLI (tests/ckpt_naming.sh): train
# --resume-from and eval --checkpoint take a run directory, a checkpoint root or a step directory; eval
# without --config, eval refusing a disagreeing --config, eval --batches beyond the file, and (mpiexec
# -np 2) rank 0 resolving for every rank; names that only look like steps ignored by every command that
# lists steps (odd_names). Uses the resume_data fixture of tests/resume.cmake.
foreach(case resume eval_config eval_refuse eval_batches odd_names ranks)
  add_test(NAME ckpt_naming_${case}
           COMMAND ${CMAKE_SOURCE_DIR}/tests/ckpt_naming.sh $<TARGET_FILE:meshpoint> ${CMAKE_BINARY_DIR}/resume_data/t_train.bin
                   ${CMAKE_SOURCE_DIR}/tests/configs/cli_tiny.json ${CMAKE_BINARY_DIR}/ckpt_naming_${case} ${case})
  set_tests_properties(ckpt_naming_${case} PROPERTIES FIXTURES_REQUIRED resume_data TIMEOUT 300
                       ENVIRONMENT "OPENBLAS_NUM_THREADS=1;OMPI_MCA_mpi_yield_when_idle=1")
  if(case STREQUAL "ranks")
    set_tests_properties(ckpt_naming_${case} PROPERTIES LABELS mpi)
  endif()
endforeach()
