# tests/ckpt.cmake — multi-rank and interop tests of the checkpoint library (ckpt/):
#   ckpt_mpi_np{1,3,4}   tests/tool_ckpt_mpi roundtrip: sharded/replicated boxes, sync and async+zstd
#                        saves, cross-rank reads, failures agreed on by every rank
#   ckpt_planned_load    tests/ckpt_planned.sh: the collective load open on 1, 2, 4, 8 ranks, index.h5
#                        read by rank 0 only; a damaged index fails every rank with rank 0's error
#   ckpt_planned_same    tests/ckpt_planned_same.sh: the collective open plans and reads as ckpt_open
#                        (v3 saves and init, the v2 and v1 fixtures; 1, 2, 3, 5, 8 ranks)
#   ckpt_crash_mpi       tests/python/ckpt_crash_mpi.py: SIGKILL at every commit step of a 4-rank
#                        save; the newest complete checkpoint is picked and loads on 4 and 3 ranks
#   ckpt_h5py            tests/python/test_ckpt_h5py.py: h5py reads the tables, rank files and views
#                        (plain and zstd via HDF5_PLUGIN_PATH=<build>/plugins); h5dump -d
if(TARGET tool_ckpt_mpi)
  set(MP_CKPT_TEST_DIR ${CMAKE_BINARY_DIR}/Testing/ckpt)
  foreach(np 1 3 4)
    add_test(NAME ckpt_mpi_np${np}
             COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_ARGS} -np ${np} $<TARGET_FILE:tool_ckpt_mpi>
                     roundtrip ${MP_CKPT_TEST_DIR}/mpi_np${np})
    set_tests_properties(ckpt_mpi_np${np} PROPERTIES ENVIRONMENT "OPENBLAS_NUM_THREADS=1" TIMEOUT 300)
  endforeach()
  add_test(NAME ckpt_planned_load
           COMMAND ${CMAKE_SOURCE_DIR}/tests/ckpt_planned.sh $<TARGET_FILE:tool_ckpt_mpi> ${MPIEXEC_EXECUTABLE}
                   ${MP_CKPT_TEST_DIR}/planned)
  set_tests_properties(ckpt_planned_load PROPERTIES ENVIRONMENT "OPENBLAS_NUM_THREADS=1" TIMEOUT 300 LABELS mpi)
  add_test(NAME ckpt_planned_same
           COMMAND ${CMAKE_SOURCE_DIR}/tests/ckpt_planned_same.sh $<TARGET_FILE:tool_ckpt_mpi> ${MPIEXEC_EXECUTABLE}
                   $<TARGET_FILE:meshpoint> ${CMAKE_SOURCE_DIR}/tests/configs/cli_tiny.json ${MP_CKPT_TEST_DIR}/planned_same)
  set_tests_properties(ckpt_planned_same PROPERTIES ENVIRONMENT "OPENBLAS_NUM_THREADS=1" TIMEOUT 600 LABELS mpi)
  add_test(NAME ckpt_crash_mpi
           COMMAND ${MP_PYTHON} ${CMAKE_SOURCE_DIR}/tests/python/ckpt_crash_mpi.py
                   --tool $<TARGET_FILE:tool_ckpt_mpi> --mpiexec ${MPIEXEC_EXECUTABLE}
                   --workdir ${MP_CKPT_TEST_DIR}/crash --np 4)
  set_tests_properties(ckpt_crash_mpi PROPERTIES TIMEOUT 600)
  # scripts/setup.sh installs python3-h5py; without it this test fails rather than being skipped.
  if(TARGET h5zstd)
    add_test(NAME ckpt_h5py
             COMMAND ${MP_PYTHON} ${CMAKE_SOURCE_DIR}/tests/python/test_ckpt_h5py.py
                     --tool $<TARGET_FILE:tool_ckpt_mpi> --mpiexec ${MPIEXEC_EXECUTABLE}
                     --plugins $<TARGET_FILE_DIR:h5zstd> --workdir ${MP_CKPT_TEST_DIR}/h5py --np 3)
    set_tests_properties(ckpt_h5py PROPERTIES TIMEOUT 300)
    # the tool and the plugin must be built before the test runs
  endif()
endif()
