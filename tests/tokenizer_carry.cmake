# tests/tokenizer_carry.cmake — carried tokenizer files on 2 ranks (tests/tokenizer_carry_mpi.sh): train
# --init-from on tp 2, a save carrying files killed at every the fault ckpt_crash_at point then resumed, reshard
# on 2 ranks; every checkpoint carries the files byte for byte and verifies; a crafted list naming config.json
# is refused by export, reshard, train --init-from and ckpt verify.
add_test(NAME tokenizer_carry_mpi COMMAND ${CMAKE_SOURCE_DIR}/tests/tokenizer_carry_mpi.sh $<TARGET_FILE:meshpoint>
         ${CMAKE_BINARY_DIR}/cli_mpi_data/t_train.bin ${CMAKE_SOURCE_DIR}/tests/configs/cli_tiny.json
         ${CMAKE_BINARY_DIR}/tokenizer_carry $<TARGET_FILE:tool_ckpt_craft>)
set_tests_properties(tokenizer_carry_mpi PROPERTIES FIXTURES_REQUIRED cli_mpi_data TIMEOUT 600 LABELS mpi
                     ENVIRONMENT "OPENBLAS_NUM_THREADS=1;OMPI_MCA_mpi_yield_when_idle=1")
