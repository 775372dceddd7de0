# tests/nodefiles.cmake — rank files of several ranks (ckpt_save_opts.ranks_per_file, ckpt/group.c;
# docs/BENCH_SCALE.md "Files on a parallel file system"):
#   ckpt_nodefiles_np{2,4,8}  tests/nodefiles.sh: tool_ckpt_mpi save --files 2|4|node: the leaders' files
#                             only, read back on NP and 3 processes, the collective open; simulated nodes
#                             (the fault ckpt_ranks_per_node); boxes moved in many bands read by h5py through
#                             view.h5 bitwise equal to the per-rank save; a member failing mid-transfer, the
#                             leader failing while writing, a member killed: the earlier checkpoint kept
#   nodefiles_train           tests/nodefiles_train.sh: meshpoint train --ckpt-files rank|2|node on tp 2 x
#                             dp 2: tensors bitwise equal, ckpt verify, resume on 3 meshes, reshard and
#                             export equal to the per-rank checkpoint's; refusals
# Under ASan (scripts/test.sh) np8 takes ~470 s on 2 loaded cores (30 s in a Release build): TIMEOUT 900.
if(TARGET tool_ckpt_mpi)
  foreach(np 2 4 8)
    add_test(NAME ckpt_nodefiles_np${np}
             COMMAND ${CMAKE_SOURCE_DIR}/tests/nodefiles.sh $<TARGET_FILE:tool_ckpt_mpi> $<TARGET_FILE:meshpoint>
                     ${MPIEXEC_EXECUTABLE} ${np} ${CMAKE_BINARY_DIR}/Testing/nodefiles_np${np})
    set_tests_properties(ckpt_nodefiles_np${np} PROPERTIES TIMEOUT 900 LABELS mpi
                         ENVIRONMENT "OPENBLAS_NUM_THREADS=1;OMPI_MCA_mpi_yield_when_idle=1")
  endforeach()
  add_test(NAME nodefiles_train
           COMMAND ${CMAKE_SOURCE_DIR}/tests/nodefiles_train.sh $<TARGET_FILE:meshpoint> $<TARGET_FILE:tool_ckpt_equal>
                   ${CMAKE_BINARY_DIR}/resume_data/t_train.bin ${CMAKE_SOURCE_DIR}/tests/configs/cli_tiny.json
                   ${CMAKE_BINARY_DIR}/Testing/nodefiles_train)
  set_tests_properties(nodefiles_train PROPERTIES FIXTURES_REQUIRED resume_data TIMEOUT 600 LABELS mpi
                       ENVIRONMENT "OPENBLAS_NUM_THREADS=1;OMPI_MCA_mpi_yield_when_idle=1")
endif()
