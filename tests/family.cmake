# tests/family.cmake — the model families (layers/family.h) end to end against transformers' own classes
# (tests/family.sh -> tests/python/family_ref.py, scripts/bench_venv.sh's venv): import, gradients, eval on
# every mesh, greedy sample, fine-tune (mesh-invariant, bitwise resume, reshard round trip), export.
# mistral_window: Mistral with a sliding window shorter than the sequence; qwen2_window: Qwen2 with
# use_sliding_window, layer 0 full and layer 1 sliding (max_window_layers 1).
foreach(family llama mistral mistral_window qwen2 qwen2_window qwen3 phi3)
  add_test(NAME family_${family}
           COMMAND ${CMAKE_SOURCE_DIR}/tests/family.sh ${CMAKE_BINARY_DIR} ${CMAKE_SOURCE_DIR} ${family}
                   ${MPIEXEC_EXECUTABLE} ${MPIEXEC_ARGS})
  set_tests_properties(family_${family} PROPERTIES TIMEOUT 600 LABELS "mpi;family" RESOURCE_LOCK bench_venv
                       PROCESSORS 2)
endforeach()
