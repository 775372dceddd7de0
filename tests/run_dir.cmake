# tests/run_dir.cmake — the run directory through the CLI (tests/run_dir.sh): a fresh run into a used
# directory, --overwrite, rewinding, resuming past a damaged checkpoint, the job lock, usage errors, and
# metrics.jsonl that cannot grow, an interrupted retention finished, the last save failing under --on-save-error continue, and rank 0 deciding
# for every rank (mpiexec -np 2). Uses the resume_data fixture of tests/resume.cmake.
foreach(case fresh_refused overwrite rewind fallback lock usage metrics_full save_continue ranks_data ranks_resume
             retention_leftover)
  add_test(NAME run_dir_${case}
           COMMAND ${CMAKE_SOURCE_DIR}/tests/run_dir.sh $<TARGET_FILE:meshpoint> ${CMAKE_BINARY_DIR}/resume_data/t_train.bin
                   ${CMAKE_SOURCE_DIR}/tests/configs/cli_tiny.json ${CMAKE_BINARY_DIR}/run_dir_${case} ${case})
  set_tests_properties(run_dir_${case} PROPERTIES FIXTURES_REQUIRED resume_data TIMEOUT 300
                       ENVIRONMENT "OPENBLAS_NUM_THREADS=1;OMPI_MCA_mpi_yield_when_idle=1")
  if(case MATCHES "^ranks_")
    set_tests_properties(run_dir_${case} PROPERTIES LABELS mpi)
  endif()
endforeach()
