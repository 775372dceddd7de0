# tests/crafted.cmake — crafted and hostile input through the CLI (tests/crafted.sh):
# non-finite config values, a crafted metadata step, num_hidden_layers and tensor shapes in an index
# whose checksum was recomputed (tests/ckpt/tool_ckpt_craft), retention with a symlinked step directory, and
# `ckpt ls` with a directory name that disagrees with its index. Uses the resume_data fixture of
# tests/resume.cmake; each case trains its own tiny checkpoint.
foreach(case config_inf step layers shape retention ls)
  add_test(NAME crafted_${case}
           COMMAND ${CMAKE_SOURCE_DIR}/tests/crafted.sh $<TARGET_FILE:meshpoint> $<TARGET_FILE:tool_ckpt_craft>
                   ${CMAKE_BINARY_DIR}/resume_data/t_train.bin ${CMAKE_SOURCE_DIR}/tests/configs/cli_tiny.json
                   ${CMAKE_BINARY_DIR}/crafted_${case} ${case})
  set_tests_properties(crafted_${case} PROPERTIES FIXTURES_REQUIRED resume_data TIMEOUT 300
                       ENVIRONMENT "OPENBLAS_NUM_THREADS=1;OMPI_MCA_mpi_yield_when_idle=1")
endforeach()
