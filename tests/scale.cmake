# tests/scale.cmake — checkpoints at cluster scale (docs/BENCH_SCALE.md):
#   ckpt_same_index_np{2,4,8}  tests/same_index.sh: a 2-, 4- and 8-process save (tools_ckpt_mpi) gives the
#                              index_checksum the writer gave before its layout exchange became a gather
#                              to rank 0 (same tables, box and tile checksums of the data, metadata)
#   ckpt_scale_exchange        tests/scale_exchange.sh: bench_scale's simulated 64-rank Llama-2-7B save: no
#                              rank but 0 receives a box list, rank 0 receives every other rank's; the
#                              index it builds loads and plans every rank's boxes
#   ckpt_scale_load            tests/scale_load.sh: bench_scale's simulated 64-rank collective load open:
#                              only rank 0 reads index.h5, others receive <= 2x their share of it
if(TARGET tool_ckpt_mpi)
  # index_checksum of tool_ckpt_mpi "save ROOT 7" at 2, 4 and 8 processes, written by commit 6c1c6c4
  set(MP_SAME_INDEX_2 66ea6c7efaca5263)
  set(MP_SAME_INDEX_4 4a4deeadcd372610)
  set(MP_SAME_INDEX_8 2185ad74da26e0f2)
  foreach(np 2 4 8)
    add_test(NAME ckpt_same_index_np${np}
             COMMAND ${CMAKE_SOURCE_DIR}/tests/same_index.sh $<TARGET_FILE:tool_ckpt_mpi> ${MPIEXEC_EXECUTABLE} ${np}
                     ${CMAKE_BINARY_DIR}/Testing/same_index_np${np} ${MP_SAME_INDEX_${np}})
    set_tests_properties(ckpt_same_index_np${np} PROPERTIES ENVIRONMENT "OPENBLAS_NUM_THREADS=1" TIMEOUT 300)
  endforeach()
endif()
if(TARGET mp_ckpt)   # bench_scale is defined below the tests, under the same condition
  add_test(NAME ckpt_scale_exchange
           COMMAND ${CMAKE_SOURCE_DIR}/tests/scale_exchange.sh $<TARGET_FILE:bench_scale>
                   ${CMAKE_BINARY_DIR}/Testing/scale_exchange)
  set_tests_properties(ckpt_scale_exchange PROPERTIES TIMEOUT 300)
  add_test(NAME ckpt_scale_load
           COMMAND ${CMAKE_SOURCE_DIR}/tests/scale_load.sh $<TARGET_FILE:bench_scale>
                   ${CMAKE_BINARY_DIR}/Testing/scale_load)
  set_tests_properties(ckpt_scale_load PROPERTIES TIMEOUT 300)
endif()
