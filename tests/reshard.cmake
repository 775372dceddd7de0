# tests/reshard.cmake — offline resharding and init through the CLI (tests/reshard.sh, one entry per
# case so they run in parallel) and its refusals, corruption and kill tests (tests/reshard_refusals.sh).
foreach(case roundtrip continue workers init corners plan modelonly)
  add_test(NAME reshard_${case}
           COMMAND ${CMAKE_SOURCE_DIR}/tests/reshard.sh $<TARGET_FILE:meshpoint> $<TARGET_FILE:tool_ckpt_equal>
                   ${CMAKE_BINARY_DIR}/resume_data/t_train.bin ${CMAKE_BINARY_DIR}/reshard_${case} ${case})
  set_tests_properties(reshard_${case} PROPERTIES FIXTURES_REQUIRED resume_data TIMEOUT 600 LABELS mpi
                       ENVIRONMENT "OPENBLAS_NUM_THREADS=1;OMPI_MCA_mpi_yield_when_idle=1")
endforeach()
add_test(NAME reshard_refusals
         COMMAND ${CMAKE_SOURCE_DIR}/tests/reshard_refusals.sh $<TARGET_FILE:meshpoint> $<TARGET_FILE:tool_ckpt_equal>
                 ${CMAKE_BINARY_DIR}/resume_data/t_train.bin ${CMAKE_BINARY_DIR}/reshard_refusals)
set_tests_properties(reshard_refusals PROPERTIES FIXTURES_REQUIRED resume_data TIMEOUT 600 LABELS mpi
                     ENVIRONMENT "OPENBLAS_NUM_THREADS=1;OMPI_MCA_mpi_yield_when_idle=1")
