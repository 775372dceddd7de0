# tests/dcp.cmake — dcp_read: PyTorch DCP directories written by torch (1 process; 2 and 4 gloo processes with
# DTensor shards on dim 0, dim 1 and both; f32/bf16/f16) through `meshpoint ckpt ls|show|verify` and
# tests/tool_dcp_dump, bitwise against the state dict torch saved; damaged directories (verify exit 1) and
# crafted `.metadata` pickles (os.system, builtins.eval, nesting bombs, huge lengths: exit 2, nothing run).
# In scripts/bench_venv.sh's venv (minutes the first time).
add_test(NAME dcp_read COMMAND ${CMAKE_SOURCE_DIR}/tests/dcp.sh ${CMAKE_BINARY_DIR} ${CMAKE_SOURCE_DIR})
set_tests_properties(dcp_read PROPERTIES TIMEOUT 900 LABELS dcp RESOURCE_LOCK bench_venv
                     ENVIRONMENT "OPENBLAS_NUM_THREADS=1;OMP_NUM_THREADS=1")
