# tests/mpi_tests.cmake — ctest entries for the multi-rank communicator and mesh test (tests/mpi_comm.c)
# at world sizes 1, 2, 3 (uneven splits, odd tp/dp) and 4 (tp=2 x dp=2). Other multi-rank tests list
# their entries in their own *.cmake files.
foreach(np 1 2 3 4)
  add_test(NAME mpi_comm_np${np} COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_ARGS} -np ${np} $<TARGET_FILE:mpi_comm>)
  set_tests_properties(mpi_comm_np${np} PROPERTIES ENVIRONMENT "OPENBLAS_NUM_THREADS=1;OMPI_MCA_mpi_yield_when_idle=1"
                       TIMEOUT 120 LABELS mpi)
endforeach()
