# tests/inference.cmake — eval and sample are forward-only (tests/inference.sh): their memory plans hold
# no gradients or moments, and eval runs on every mesh the model allows (tp 3 at a sequence length tp
# does not divide, SP left to eval). Uses the resume_data fixture of tests/resume.cmake.
foreach(case plan eval_tp3)
  add_test(NAME inference_${case}
           COMMAND ${CMAKE_SOURCE_DIR}/tests/inference.sh $<TARGET_FILE:meshpoint> ${CMAKE_BINARY_DIR}/resume_data/t_train.bin
                   ${CMAKE_BINARY_DIR}/inference_${case} ${case})
  set_tests_properties(inference_${case} PROPERTIES FIXTURES_REQUIRED resume_data TIMEOUT 300 LABELS mpi
                       ENVIRONMENT "OPENBLAS_NUM_THREADS=1;OMPI_MCA_mpi_yield_when_idle=1")
endforeach()
