# tests/resume.cmake — exact resume through the CLI on tp 2 x dp 2 (tests/resume_exact.sh): plain,
# with --async-save, with zstd compression, and with one file per node (--ckpt-files node).
set(MP_RESUME_DATA ${CMAKE_BINARY_DIR}/resume_data)
add_test(NAME resume_data_setup COMMAND $<TARGET_FILE:meshpoint> data --out ${MP_RESUME_DATA} --name t
         ${CMAKE_SOURCE_DIR}/docs/CLI.md ${CMAKE_SOURCE_DIR}/core/config.c ${CMAKE_SOURCE_DIR}/layers/llama.c)
set_tests_properties(resume_data_setup PROPERTIES FIXTURES_SETUP resume_data)
foreach(variant plain async zstd node)
  set(extra "")
  if(variant STREQUAL "async")
    set(extra --async-save)
  elseif(variant STREQUAL "zstd")
    set(extra --compress zstd:3)
  elseif(variant STREQUAL "node")
    set(extra --ckpt-files node)
  endif()
  add_test(NAME resume_exact_tp2_dp2_${variant}
           COMMAND ${CMAKE_SOURCE_DIR}/tests/resume_exact.sh $<TARGET_FILE:meshpoint> $<TARGET_FILE:tool_ckpt_equal>
                   ${MP_RESUME_DATA}/t_train.bin ${CMAKE_SOURCE_DIR}/tests/configs/cli_tiny.json
                   ${CMAKE_BINARY_DIR}/resume_${variant} ${extra})
  set_tests_properties(resume_exact_tp2_dp2_${variant} PROPERTIES FIXTURES_REQUIRED resume_data TIMEOUT 300
                       LABELS mpi ENVIRONMENT "OPENBLAS_NUM_THREADS=1;OMPI_MCA_mpi_yield_when_idle=1")
endforeach()
# Faults during a training job's save: SIGKILL at each point of the commit protocol, disk full (stop and
# continue); resume must pick the newest complete checkpoint and finish exactly (tests/train_faults.sh).
foreach(case crash:during_rank_files crash:after_rank_files crash:before_index crash:after_index
             crash:after_rename crash:after_latest crash:during_view diskfull diskfull-continue corrupt)
  string(REPLACE ":" "_" tname ${case})
  add_test(NAME train_fault_${tname}
           COMMAND ${CMAKE_SOURCE_DIR}/tests/train_faults.sh $<TARGET_FILE:meshpoint> $<TARGET_FILE:tool_ckpt_equal>
                   ${MP_RESUME_DATA}/t_train.bin ${CMAKE_SOURCE_DIR}/tests/configs/cli_tiny.json
                   ${CMAKE_BINARY_DIR}/fault_${tname} ${case})
  set_tests_properties(train_fault_${tname} PROPERTIES FIXTURES_REQUIRED resume_data TIMEOUT 300
                       LABELS mpi ENVIRONMENT "OPENBLAS_NUM_THREADS=1;OMPI_MCA_mpi_yield_when_idle=1")
endforeach()
# A real training checkpoint (tp 2 x dp 2, padded vocab) read by h5py alone, plain and zstd.
foreach(c none zstd:3)
  string(REPLACE ":" "_" cname ${c})
  add_test(NAME train_ckpt_h5py_${cname}
           COMMAND ${MP_PYTHON} ${CMAKE_SOURCE_DIR}/tests/python/test_train_ckpt_h5py.py
                   --meshpoint $<TARGET_FILE:meshpoint> --mpiexec ${MPIEXEC_EXECUTABLE}
                   --plugins ${CMAKE_BINARY_DIR}/plugins --config ${CMAKE_SOURCE_DIR}/tests/configs/ckpt_odd_vocab.json
                   --data ${MP_RESUME_DATA}/t_train.bin --workdir ${CMAKE_BINARY_DIR}/train_h5py_${cname} --compress ${c})
  set_tests_properties(train_ckpt_h5py_${cname} PROPERTIES FIXTURES_REQUIRED resume_data TIMEOUT 300 LABELS mpi
                       ENVIRONMENT "OMPI_MCA_mpi_yield_when_idle=1")
endforeach()
# Preemption: SIGINT to a single process, SIGTERM to an mpiexec job of 4 ranks.
foreach(v "INT;1" "TERM;4")
  list(GET v 0 sig)
  list(GET v 1 np)
  add_test(NAME train_signal_${sig}_np${np}
           COMMAND ${CMAKE_SOURCE_DIR}/tests/signal_stop.sh $<TARGET_FILE:meshpoint> ${MP_RESUME_DATA}/t_train.bin
                   ${CMAKE_SOURCE_DIR}/tests/configs/cli_tiny.json ${CMAKE_BINARY_DIR}/signal_${sig} ${sig} ${np})
  set_tests_properties(train_signal_${sig}_np${np} PROPERTIES FIXTURES_REQUIRED resume_data TIMEOUT 300 LABELS mpi
                       ENVIRONMENT "OPENBLAS_NUM_THREADS=1;OMPI_MCA_mpi_yield_when_idle=1")
endforeach()
# Load-time resharding: saved on tp 2 x dp 2, resumed on dp 2 and on one process.
add_test(NAME resume_on_another_mesh
         COMMAND ${CMAKE_SOURCE_DIR}/tests/resume_other_mesh.sh $<TARGET_FILE:meshpoint> ${MP_RESUME_DATA}/t_train.bin
                 ${CMAKE_SOURCE_DIR}/tests/configs/cli_tiny.json ${CMAKE_BINARY_DIR}/resume_other_mesh)
set_tests_properties(resume_on_another_mesh PROPERTIES FIXTURES_REQUIRED resume_data TIMEOUT 300 LABELS mpi
                     ENVIRONMENT "OPENBLAS_NUM_THREADS=1;OMPI_MCA_mpi_yield_when_idle=1")
add_test(NAME resume_planned_load
         COMMAND ${CMAKE_SOURCE_DIR}/tests/resume_planned.sh $<TARGET_FILE:meshpoint> ${MP_RESUME_DATA}/t_train.bin
                 ${CMAKE_SOURCE_DIR}/tests/configs/cli_tiny.json ${CMAKE_BINARY_DIR}/resume_planned)
set_tests_properties(resume_planned_load PROPERTIES FIXTURES_REQUIRED resume_data TIMEOUT 300 LABELS mpi
                     ENVIRONMENT "OPENBLAS_NUM_THREADS=1;OMPI_MCA_mpi_yield_when_idle=1")
