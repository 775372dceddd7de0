# tests/kill_campaign.cmake — the kill -9 campaign (tests/kill_campaign.py): SIGKILL a
# 2-rank training job (every process, or one rank) at random instants, many inside saves, in plain, zstd
# and async modes; every checkpoint listed complete must verify, `latest` must name a complete one, and
# the resume must end bitwise equal to a straight run. Release build: 12 trials over the six modes
# (~1 minute on 2 cores). Sanitizer build (about 7x slower there): 2 trials, zstd/job and async/rank,
# 6 steps, so that the resume-after-kill paths run under ASan/UBSan/LSan within ~1 minute.
# MP_CAMPAIGN_TRIALS=N (MP_CAMPAIGN_SECONDS: the soft time budget; MP_CAMPAIGN_MODES) for longer
# campaigns on demand. Figures: docs/RELIABILITY.md "Kill -9 campaign". Uses the
# resume_data fixture of tests/resume.cmake.
if(MP_SANITIZE)
  set(MP_KILL_ARGS --trials 2 --steps 6 --modes zstd/job,async/rank)
else()
  set(MP_KILL_ARGS --trials 12)
endif()
add_test(NAME kill_campaign
         COMMAND ${MP_PYTHON} ${CMAKE_SOURCE_DIR}/tests/kill_campaign.py
                 --meshpoint $<TARGET_FILE:meshpoint> --equal $<TARGET_FILE:tool_ckpt_equal>
                 --mpiexec ${MPIEXEC_EXECUTABLE} --data ${CMAKE_BINARY_DIR}/resume_data/t_train.bin
                 --config ${CMAKE_SOURCE_DIR}/tests/kill_campaign.json --work ${CMAKE_BINARY_DIR}/kill_campaign
                 --report ${CMAKE_BINARY_DIR}/kill_campaign/report.json --budget 120 ${MP_KILL_ARGS})
set_tests_properties(kill_campaign PROPERTIES FIXTURES_REQUIRED resume_data TIMEOUT 600 LABELS mpi
                     ENVIRONMENT "OPENBLAS_NUM_THREADS=1;OMPI_MCA_mpi_yield_when_idle=1")
