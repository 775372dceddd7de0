# tests/gpu_bundle.cmake — the self-contained GPU bundle (scripts/gpu_bundle.sh), in CUDA builds:
#   gpu_bundle_selftest  builds the bundle (its own build folder), unpacks it, hides the project's packages
#                        in a mount namespace and runs the bundle's CPU self-test there; gpu-check without
#                        a GPU must exit 2 naming "no GPU". Skipped (77) where unshare --mount is refused.
if(MP_HAVE_CUDA)
  add_test(NAME gpu_bundle_selftest
           COMMAND ${CMAKE_SOURCE_DIR}/tests/gpu_bundle.sh ${CMAKE_SOURCE_DIR} ${CMAKE_BINARY_DIR}/gpu_bundle
                   $<TARGET_FILE:meshpoint>)
  set_tests_properties(gpu_bundle_selftest PROPERTIES LABELS gpu SKIP_RETURN_CODE 77 TIMEOUT 1500
                       ENVIRONMENT "OPENBLAS_NUM_THREADS=1")
endif()
# gpu_check_verdicts  scripts/gpu-check.sh's verdicts (scripts/gpu_verdict.sh) on plain commands: budget cuts
#                     are NOT RUN, not FAIL; NOT RUN of a required part fails; own-limit timeouts are FAIL
add_test(NAME gpu_check_verdicts COMMAND ${CMAKE_SOURCE_DIR}/tests/gpu_check_verdicts.sh ${CMAKE_SOURCE_DIR}
         ${CMAKE_BINARY_DIR}/gpu_check_verdicts)
set_tests_properties(gpu_check_verdicts PROPERTIES LABELS unit TIMEOUT 120)
# bench_gpu_floor     bench/bench_gpu.sh's MFU floor and roofline table on a CPU dry run
add_test(NAME bench_gpu_floor COMMAND ${CMAKE_SOURCE_DIR}/tests/bench_gpu_floor.sh $<TARGET_FILE:meshpoint>
         ${CMAKE_SOURCE_DIR}/tests/configs/cli_tiny.json ${CMAKE_BINARY_DIR}/bench_gpu_floor)
set_tests_properties(bench_gpu_floor PROPERTIES LABELS unit TIMEOUT 120 ENVIRONMENT "OPENBLAS_NUM_THREADS=1")
# gpu_roofline_profile  bench/gpu_roofline.py's measured column and bench_gpu.sh's op count for MP_CUDA_PROFILE_SKIP
#                     on a real per-op file of the H200 (tests/data/h200/)
add_test(NAME gpu_roofline_profile COMMAND ${CMAKE_SOURCE_DIR}/tests/gpu_roofline_profile.sh ${CMAKE_SOURCE_DIR}
         ${CMAKE_BINARY_DIR}/gpu_roofline_profile)
set_tests_properties(gpu_roofline_profile PROPERTIES LABELS unit TIMEOUT 60)
