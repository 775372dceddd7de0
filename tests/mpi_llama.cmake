# tests/mpi_llama.cmake — mesh invariance of the model (tests/mpi_llama.c) on every mesh it promises:
# 1x1, tp2, tp4, dp2, dp4, tp2xdp2, SP on and off where tp > 1, for a config whose vocab (250) is not
# divisible by 4 and whose dim-0 sizes are not divisible by dp ("odd"), and a GQA config with tied
# embeddings ("gqa_tied"); plus tp2xdp2 with reshard_after_forward off (ZeRO-2); and "family" (q/k/v
# biases, q/k norms, head_dim 12 != 64/8) on tp2, dp2 and tp2xdp2, SP on and off. Every entry also checks
# activation recomputation (recompute full) bitwise against the plain model on its mesh.
set(MP_MPI_ENV "OPENBLAS_NUM_THREADS=1;OMPI_MCA_mpi_yield_when_idle=1")
# meshes as np:tp
set(meshes_odd 1:1 2:2 2:1 4:4 4:1 4:2)
set(meshes_gqa_tied ${meshes_odd})
set(meshes_family 2:2 2:1 4:2)
foreach(cfg odd gqa_tied family)
  foreach(npt ${meshes_${cfg}})
    string(REPLACE ":" ";" mesh ${npt})
    list(GET mesh 0 np)
    list(GET mesh 1 tp)
    set(sps 1)
    if(tp GREATER 1)
      set(sps 1 0)
    endif()
    foreach(sp ${sps})
      math(EXPR dp "${np} / ${tp}")
      set(name mpi_llama_${cfg}_tp${tp}_dp${dp}_sp${sp})
      add_test(NAME ${name} COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_ARGS} -np ${np} $<TARGET_FILE:mpi_llama>
               --tp ${tp} --sp ${sp} --config ${cfg})
      set_tests_properties(${name} PROPERTIES ENVIRONMENT "${MP_MPI_ENV}" TIMEOUT 300 LABELS mpi)
    endforeach()
  endforeach()
endforeach()
add_test(NAME mpi_llama_gqa_tied_tp2_dp2_zero2 COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_ARGS} -np 4
         $<TARGET_FILE:mpi_llama> --tp 2 --config gqa_tied --raf 0)
set_tests_properties(mpi_llama_gqa_tied_tp2_dp2_zero2 PROPERTIES ENVIRONMENT "${MP_MPI_ENV}" TIMEOUT 300 LABELS mpi)
