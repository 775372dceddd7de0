# tests/family.cmake — the model families (layers/family.h) end to end against transformers' own classes
# (tests/family.sh -> tests/python/family_ref.py, scripts/bench_venv.sh's venv): import, gradients, eval on
# every mesh, greedy sample, fine-tune (mesh-invariant, bitwise resume, reshard round trip), export.
# mistral_window: Mistral with a sliding window shorter than the sequence.
foreach(family llama mistral mistral_window qwen2 qwen3 phi3)
  add_test(NAME family_${family}
           COMMAND ${CMAKE_SOURCE_DIR}/tests/family.sh ${CMAKE_BINARY_DIR} ${CMAKE_SOURCE_DIR} ${family}
                   ${MPIEXEC_EXECUTABLE} ${MPIEXEC_ARGS})
  set_tests_properties(family_${family} PROPERTIES TIMEOUT 600 LABELS "mpi;family" RESOURCE_LOCK bench_venv
                       PROCESSORS 2)
endforeach()
