# tests/format_v3.cmake — checkpoint format v3 (tests/format_v3.sh): the v2 fixture of tests/data/ckpt_v2
# still verifies and equals a v3 save bitwise; a damaged or foreign rank file /boxes table and a missing
# view.h5 are caught; the index does not grow with the world.
if(TARGET tool_ckpt_equal)
  foreach(case v2_fixture boxes_flip swapped no_view index_flat)
    add_test(NAME ckpt_format_v3_${case}
             COMMAND ${CMAKE_SOURCE_DIR}/tests/format_v3.sh $<TARGET_FILE:meshpoint> $<TARGET_FILE:tool_ckpt_equal>
                     ${CMAKE_SOURCE_DIR}/tests/configs/cli_tiny.json ${CMAKE_BINARY_DIR}/format_v3_${case} ${case})
    set_tests_properties(ckpt_format_v3_${case} PROPERTIES TIMEOUT 300)
  endforeach()
endif()
