# tests/memory_plan.cmake — the memory plan is an upper bound of each command's peak (tests/memory_plan.sh:
# train (also --recompute full), train --resume, eval, sample, reshard, export, import within plan + 16 MiB on a model with 32 MiB
# tensors; then train on dp 2, --resume on tp 2 and on tp 2 x dp 2, eval on 2 ranks, every rank within its
# own plan). Uses the resume_data fixture of tests/resume.cmake.
add_test(NAME memory_plan_bound COMMAND ${CMAKE_SOURCE_DIR}/tests/memory_plan.sh $<TARGET_FILE:meshpoint>
         ${CMAKE_BINARY_DIR}/resume_data/t_train.bin ${CMAKE_BINARY_DIR}/resume_data/t_val.bin
         ${CMAKE_SOURCE_DIR}/tests/configs/memplan_32m.json ${CMAKE_BINARY_DIR}/Testing/memory_plan
         ${MPIEXEC_EXECUTABLE})
set_tests_properties(memory_plan_bound PROPERTIES FIXTURES_REQUIRED resume_data TIMEOUT 300 LABELS mpi
                     ENVIRONMENT "OPENBLAS_NUM_THREADS=1;OMPI_MCA_mpi_yield_when_idle=1")
# The same for two families: Qwen3 with head_dim 512 at seq_len 512 (q and k twice hidden wide: their
# saved pre-norm copies and the q/k/v biases' neighbours are activations of 12 MiB a layer), and Phi-3
# with a 16 MiB gate/up pair, exported as one fused gate_up_proj and imported back under --max-memory 8M.
foreach(fam "qwen3;512" "phi3;16")
  list(GET fam 0 name)
  list(GET fam 1 seq)
  add_test(NAME memory_plan_${name} COMMAND ${CMAKE_SOURCE_DIR}/tests/memory_plan.sh $<TARGET_FILE:meshpoint>
           ${CMAKE_BINARY_DIR}/resume_data/t_train.bin ${CMAKE_BINARY_DIR}/resume_data/t_val.bin
           ${CMAKE_SOURCE_DIR}/tests/configs/memplan_${name}.json ${CMAKE_BINARY_DIR}/Testing/memory_plan_${name}
           ${MPIEXEC_EXECUTABLE} ${seq})
  set_tests_properties(memory_plan_${name} PROPERTIES FIXTURES_REQUIRED resume_data TIMEOUT 300 LABELS mpi
                       ENVIRONMENT "OPENBLAS_NUM_THREADS=1;OMPI_MCA_mpi_yield_when_idle=1")
endforeach()
