# tests/schedule.cmake — the longest ctest entries start first. ctest -j starts
# entries by their COST, highest first, taking costs from BUILD/Testing/Temporary/CTestCostData.txt once a
# run has written it; a fresh clone (CI, a new user's scripts/test.sh) has none, so ctest started them in
# definition order and one of the time-bounded campaigns could start last and run alone on one core
# while the other idled (corruption_campaign did: its last minute). The costs below are seconds of a
# Release run on 2 cores (2026-12-07, other jobs running); only their order matters. Deferred to the
# end of the top directory, like tests/sanitize.cmake, and applied only to entries that exist in this
# build (gpu_bundle_selftest is a CUDA build's).
set(MP_TEST_COSTS
    gpu_bundle_selftest 350 kill_campaign 75 corruption_campaign 60 diskfull_sweep_np2 51
    ckpt_planned_same 48 ckpt_nodefiles_np8 45 ckpt_crash_mpi 41 diskfull_sweep 39 ckpt_nodefiles_np2 27
    gpu_check_verdicts 27 ckpt_nodefiles_np4 26 nodefiles_train 21 convert_overlap 19 diskfull_sweep_zstd 18)
function(mp_schedule_tests)
  get_property(tests DIRECTORY ${CMAKE_SOURCE_DIR} PROPERTY TESTS)
  set(costs ${MP_TEST_COSTS})
  while(costs)
    list(POP_FRONT costs name secs)
    if(name IN_LIST tests)
      set_tests_properties(${name} PROPERTIES COST ${secs})
    endif()
  endwhile()
endfunction()
cmake_language(DEFER DIRECTORY ${CMAKE_SOURCE_DIR} CALL mp_schedule_tests)
