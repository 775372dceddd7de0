# tests/convert_overlap.cmake — the overlapped band pipelines of init / reshard / import / export against
# the serial path (MP_FAULT=ckpt_serial_fill), bitwise, and a read error mid-box (tests/convert_overlap.sh).
add_test(NAME convert_overlap
         COMMAND ${CMAKE_SOURCE_DIR}/tests/convert_overlap.sh $<TARGET_FILE:meshpoint> $<TARGET_FILE:tool_ckpt_equal>
                 ${CMAKE_BINARY_DIR}/convert_overlap)
set_tests_properties(convert_overlap PROPERTIES TIMEOUT 600 ENVIRONMENT "OPENBLAS_NUM_THREADS=1")
