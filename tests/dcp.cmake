# tests/dcp.cmake — dcp_read: PyTorch DCP directories written by torch (1 process; 2 and 4 gloo processes with
# DTensor shards on dim 0, dim 1 and both; f32/bf16/f16) through `meshpoint ckpt ls|show|verify` and
# tests/tool_dcp_dump, bitwise against the state dict torch saved; damaged directories (verify exit 1) and
# crafted `.metadata` pickles (os.system, builtins.eval, nesting bombs, huge lengths: exit 2, nothing run).
# In scripts/bench_venv.sh's venv (minutes the first time).
add_test(NAME dcp_read COMMAND ${CMAKE_SOURCE_DIR}/tests/dcp.sh ${CMAKE_BINARY_DIR} ${CMAKE_SOURCE_DIR})
set_tests_properties(dcp_read PROPERTIES TIMEOUT 900 LABELS dcp RESOURCE_LOCK bench_venv
                     ENVIRONMENT "OPENBLAS_NUM_THREADS=1;OMP_NUM_THREADS=1")

# dcp_import: `meshpoint import DCP_DIR --config` (HF and torchtitan names, 1/2/4-process saves, f32/bf16, AdamW
# state) to 1x1 and tp2 x dp2 bitwise against the saved state dict, eval = transformers' loss, resume with the
# moments, `export DCP_DIR` loaded by transformers, memory within plan, refusals (tests/python/dcp_import.py).
add_test(NAME dcp_import COMMAND ${CMAKE_SOURCE_DIR}/tests/dcp.sh ${CMAKE_BINARY_DIR} ${CMAKE_SOURCE_DIR} import)
set_tests_properties(dcp_import PROPERTIES TIMEOUT 900 LABELS dcp RESOURCE_LOCK bench_venv
                     ENVIRONMENT "OPENBLAS_NUM_THREADS=1;OMP_NUM_THREADS=1")

# dcp_titan: torchtitan's own Llama3Model (PyPI torchtitan 0.3.0, scripts/titan_venv.sh) saved with DCP by 1 process
# and 2 gloo processes (FSDP2) imports with --config to 1x1 and tp2 x dp2, meshpoint's logits = torchtitan's (1e-5,
# RoPE llama3 scaling included); `export --format dcp --names torchtitan` loads into a fresh torchtitan model with
# exactly its keys, bitwise, same logits (tests/python/dcp_titan.py).
add_test(NAME dcp_titan COMMAND ${CMAKE_SOURCE_DIR}/tests/dcp.sh ${CMAKE_BINARY_DIR} ${CMAKE_SOURCE_DIR} titan)
set_tests_properties(dcp_titan PROPERTIES TIMEOUT 900 LABELS dcp RESOURCE_LOCK bench_venv
                     ENVIRONMENT "OPENBLAS_NUM_THREADS=1;OMP_NUM_THREADS=1")
