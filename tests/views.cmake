# tests/views.cmake — index.h5's views checked by `ckpt verify` and rebuilt by `ckpt repair-views`
# (tests/views.sh), and the corruption campaign (tests/python/corruption_campaign.py): damaged copies of a
# 2-rank checkpoint classified as detected / benign / missed / crash for a bounded time.
# Uses the resume_data fixture of tests/resume.cmake.
set(MP_VIEWS_ENV "OPENBLAS_NUM_THREADS=1;OMPI_MCA_mpi_yield_when_idle=1")
foreach(case intact wrong crash dense tables background pending pending_start pending_race)
  add_test(NAME views_${case}
           COMMAND ${CMAKE_SOURCE_DIR}/tests/views.sh $<TARGET_FILE:meshpoint> ${CMAKE_BINARY_DIR}/resume_data/t_train.bin
                   ${CMAKE_SOURCE_DIR}/tests/configs/cli_tiny.json ${CMAKE_BINARY_DIR}/views_${case}
                   $<TARGET_FILE_DIR:h5zstd> ${case})
  set_tests_properties(views_${case} PROPERTIES FIXTURES_REQUIRED resume_data TIMEOUT 300 ENVIRONMENT "${MP_VIEWS_ENV}")
endforeach()
# the campaign's checkpoints: steps 2 and 4 of a tp 2 run (two rank files each)
set(MP_CORRUPT_DIR ${CMAKE_BINARY_DIR}/corruption)
add_test(NAME corruption_setup
         COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_ARGS} -np 2 $<TARGET_FILE:meshpoint> train
                 --config ${CMAKE_SOURCE_DIR}/tests/configs/cli_tiny.json
                 --train-data ${CMAKE_BINARY_DIR}/resume_data/t_train.bin --steps 4 --ckpt-every 2 --tp 2 --log-every 0
                 --run-dir ${MP_CORRUPT_DIR}/run --overwrite)
set_tests_properties(corruption_setup PROPERTIES FIXTURES_SETUP corruption FIXTURES_REQUIRED resume_data
                     ENVIRONMENT "${MP_VIEWS_ENV}" LABELS mpi)
# MP_CAMPAIGN_SECONDS (default 60) and MP_CAMPAIGN_SEED (default: from the time) pass through from the
# environment: run longer on demand with MP_CAMPAIGN_SECONDS=1800 ctest -R corruption_campaign
add_test(NAME corruption_campaign
         COMMAND ${MP_PYTHON} ${CMAKE_SOURCE_DIR}/tests/python/corruption_campaign.py --bin $<TARGET_FILE:meshpoint>
                 --equal $<TARGET_FILE:tool_ckpt_equal> --ckpt ${MP_CORRUPT_DIR}/run/checkpoints/step_00000004
                 --other ${MP_CORRUPT_DIR}/run/checkpoints/step_00000002
                 --data ${CMAKE_BINARY_DIR}/resume_data/t_val.bin --workdir ${MP_CORRUPT_DIR}/work
                 --plugins $<TARGET_FILE_DIR:h5zstd>)
set_tests_properties(corruption_campaign PROPERTIES FIXTURES_REQUIRED "corruption;resume_data" TIMEOUT 600
                     ENVIRONMENT "${MP_VIEWS_ENV}")
