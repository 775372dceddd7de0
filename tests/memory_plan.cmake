# tests/memory_plan.cmake — the memory plan is an upper bound of each command's peak (tests/memory_plan.sh:
# train, train --resume, eval, sample, reshard, export, import within plan + 16 MiB on a model with 32 MiB
# tensors). Uses the resume_data fixture of tests/resume.cmake.
add_test(NAME memory_plan_bound COMMAND ${CMAKE_SOURCE_DIR}/tests/memory_plan.sh $<TARGET_FILE:meshpoint>
         ${CMAKE_BINARY_DIR}/resume_data/t_train.bin ${CMAKE_BINARY_DIR}/resume_data/t_val.bin
         ${CMAKE_SOURCE_DIR}/tests/configs/memplan_32m.json ${CMAKE_BINARY_DIR}/Testing/memory_plan)
set_tests_properties(memory_plan_bound PROPERTIES FIXTURES_REQUIRED resume_data TIMEOUT 300
                     ENVIRONMENT "OPENBLAS_NUM_THREADS=1")
