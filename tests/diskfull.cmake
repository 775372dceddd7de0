# tests/diskfull.cmake — failed saves and loads name their cause and a file, through the
# CLI (tests/diskfull_sweep.sh): free space swept across a whole save on a small tmpfs (1 process, async,
# zstd, tp 2 on 2 ranks), permission-denied and read-only saves, unreadable / truncated rank files on
# load. The sweeps mount a tmpfs (root) or fall back to RLIMIT_FSIZE; the permission cases run as
# nobody (setpriv) and are skipped (77) where no unprivileged user is available. Uses the resume_data
# fixture of tests/resume.cmake.
foreach(case sweep sweep_async sweep_zstd sweep_np2 perm_write perm_read)
  add_test(NAME diskfull_${case}
           COMMAND ${CMAKE_SOURCE_DIR}/tests/diskfull_sweep.sh $<TARGET_FILE:meshpoint>
                   ${CMAKE_BINARY_DIR}/resume_data/t_train.bin ${CMAKE_SOURCE_DIR}/tests/configs/cli_tiny.json
                   ${CMAKE_BINARY_DIR}/diskfull_${case} ${case})
  set_tests_properties(diskfull_${case} PROPERTIES FIXTURES_REQUIRED resume_data TIMEOUT 300 SKIP_RETURN_CODE 77
                       ENVIRONMENT "OPENBLAS_NUM_THREADS=1;OMPI_MCA_mpi_yield_when_idle=1")
  if(case STREQUAL "sweep_np2")
    set_tests_properties(diskfull_${case} PROPERTIES LABELS mpi)
  endif()
endforeach()
