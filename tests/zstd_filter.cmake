# tests/zstd_filter.cmake — the zstd filter (ckpt/zstd_filter.c) against damaged and crafted chunks in a
# real checkpoint (tests/zstd_damaged.py): a tiny zstd training checkpoint whose one chunk is replaced by a
# short, long, lying, bomb, garbage, truncated, two-frame or empty frame must fail `meshpoint ckpt verify`
# (exit 1, naming file, tensor and cause) and `meshpoint eval`, and h5py through <build>/plugins must raise.
# The filter's unit test is tests/test_zstd_filter.c. Uses the resume_data fixture of tests/resume.cmake.
if(TARGET h5zstd)
  add_test(NAME zstd_damaged_chunks
           COMMAND ${MP_PYTHON} ${CMAKE_SOURCE_DIR}/tests/zstd_damaged.py --meshpoint $<TARGET_FILE:meshpoint>
                   --plugins $<TARGET_FILE_DIR:h5zstd> --config ${CMAKE_SOURCE_DIR}/tests/configs/cli_tiny.json
                   --data ${CMAKE_BINARY_DIR}/resume_data/t_train.bin --workdir ${CMAKE_BINARY_DIR}/zstd_damaged)
  set_tests_properties(zstd_damaged_chunks PROPERTIES FIXTURES_REQUIRED resume_data TIMEOUT 300
                       ENVIRONMENT "OPENBLAS_NUM_THREADS=1")
endif()
