# tests/sanitize.cmake — the sanitizer build (-DMP_SANITIZE=ON: ASan + UBSan) runs every ctest entry,
# the multi-rank ones under mpiexec included, with the same sanitizer options, so that a bare `ctest`
# in that build checks what scripts/test.sh checks. The options reach mpiexec-launched ranks through
# the environment (Open MPI starts local ranks with mpiexec's environment; tests/mpi_comm.c-style
# entries and the shell/Python drivers inherit it the same way):
#   ASAN_OPTIONS   leak checking on at exit of every process, every rank included; stacks of
#                  allocations unwound the slow way (Debian's Open MPI has no frame pointers, so the
#                  fast unwinder stops inside it and tests/lsan.supp could not name the library)
#   LSAN_OPTIONS   tests/lsan.supp: Open MPI's, HDF5's and Criterion's own allocations kept until exit
#   UBSAN_OPTIONS  any undefined behaviour stops the process with a stack
#   MP_SANITIZED   =1: the tests of resident-memory bounds (memory_plan_bound, save_memory_no_staging) run
#                  every command and check everything but the bound, which is the Release build's
#                  property: ASan's quarantine of freed blocks, redzones and shadow pages add tens of MiB
#                  to the resident high-water mark (22-31 MiB over the 16 MiB allowance, measured)
# Every sanitizer report exits 86 (not the default 1): a test expecting a failed check (exit 1) cannot
# mistake a memory error or a leak for the failure it wanted.
# Every entry also gets the label `sanitize`; train_signal_* a longer SIGTERM grace (below). Runs after
# all tests/*.cmake are read (deferred call), so the order of the includes does not matter. Which entries
# scripts/test.sh runs in this build, and why not all, is said there. (The h5zstd plugin is built
# uninstrumented: h5py and h5dump load it and have no ASan runtime; see CMakeLists.txt.)
if(MP_SANITIZE)
  set(MP_SANITIZE_ENV
      "ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:fast_unwind_on_malloc=0:exitcode=86"
      "LSAN_OPTIONS=suppressions=${CMAKE_SOURCE_DIR}/tests/lsan.supp:print_suppressions=0:exitcode=86"
      "UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1:exitcode=86"
      "MP_SANITIZED=1")
  function(mp_sanitize_all_tests)
    get_property(tests DIRECTORY ${CMAKE_SOURCE_DIR} PROPERTY TESTS)
    foreach(t ${tests})
      set_property(TEST ${t} APPEND PROPERTY ENVIRONMENT ${MP_SANITIZE_ENV})
      set_property(TEST ${t} APPEND PROPERTY LABELS sanitize)
      if(t MATCHES "^train_signal_")
        # mpiexec forwards SIGTERM, then SIGKILLs ranks still alive after odls_base_sigkill_timeout
        # (1 s; it then waits that long whatever happens); an instrumented rank's end-of-step save can
        # take longer than 1 s on a loaded machine.
        set_property(TEST ${t} APPEND PROPERTY ENVIRONMENT OMPI_MCA_odls_base_sigkill_timeout=5)
      endif()
    endforeach()
  endfunction()
  cmake_language(DEFER DIRECTORY ${CMAKE_SOURCE_DIR} CALL mp_sanitize_all_tests)
endif()
