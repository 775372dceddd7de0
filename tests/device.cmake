# tests/device.cmake — `--device cuda` on a host or build that cannot run it (tests/device_cuda.sh):
# exit 2 with the reason, nothing created; skipped (77) where `meshpoint --version` lists GPUs.
add_test(NAME device_cuda_refused COMMAND ${CMAKE_SOURCE_DIR}/tests/device_cuda.sh $<TARGET_FILE:meshpoint>
         ${CMAKE_BINARY_DIR}/resume_data/t_train.bin ${CMAKE_SOURCE_DIR}/tests/configs/cli_tiny.json
         ${CMAKE_BINARY_DIR}/device_cuda)
set_tests_properties(device_cuda_refused PROPERTIES FIXTURES_REQUIRED resume_data SKIP_RETURN_CODE 77 TIMEOUT 120
                     LABELS unit ENVIRONMENT "OPENBLAS_NUM_THREADS=1")
