# tests/cluster_hosts.cmake — meshpoint launched on two hosts (tests/cluster_hosts.sh, docs/CLUSTER.md): two
# Open MPI nodes simulated on this machine (an rsh agent that runs each host's daemon here with a cleared
# environment and a session directory of its own); a tp 2 x dp 2 run split over them with checkpoints,
# mpirun's exit status for meshpoint's exit codes, a rank killed, preemption by SIGTERM and --resume, and
# checkpoints on node-local storage (a mount namespace for one host; skipped, exit 77, where there is
# none). Open MPI 4.x only (else skipped). Uses the resume_data fixture of tests/resume.cmake.
foreach(case train exit_status preempt node_local)
  add_test(NAME cluster_hosts_${case}
           COMMAND ${CMAKE_SOURCE_DIR}/tests/cluster_hosts.sh $<TARGET_FILE:meshpoint> ${CMAKE_BINARY_DIR}/resume_data/t_train.bin
                   ${CMAKE_SOURCE_DIR}/tests/configs/cli_tiny.json ${CMAKE_BINARY_DIR}/cluster_hosts_${case} ${case}
                   ${MPIEXEC_EXECUTABLE} ${MPIEXEC_ARGS})
  set_tests_properties(cluster_hosts_${case} PROPERTIES FIXTURES_REQUIRED resume_data TIMEOUT 300 LABELS mpi
                       SKIP_RETURN_CODE 77 ENVIRONMENT "OPENBLAS_NUM_THREADS=1;OMPI_MCA_mpi_yield_when_idle=1")
endforeach()
