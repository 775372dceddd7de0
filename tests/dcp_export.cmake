# tests/dcp_export.cmake — dcp_export: `meshpoint export --format dcp` of a tp 2 x dp 2 training run and of an
# import of transformers' LlamaForCausalLM, loaded by torch.distributed.checkpoint.load (HF and torchtitan names,
# one process and 2 gloo processes into DTensors) bitwise, ckpt verify, refusals and atomicity
# (tests/python/dcp_export.py). In scripts/bench_venv.sh's venv.
add_test(NAME dcp_export
         COMMAND ${CMAKE_SOURCE_DIR}/tests/dcp_export.sh $<TARGET_FILE:meshpoint> ${CMAKE_BINARY_DIR}/resume_data/t_train.bin
                 ${CMAKE_BINARY_DIR}/dcp_export ${CMAKE_SOURCE_DIR})
set_tests_properties(dcp_export PROPERTIES FIXTURES_REQUIRED resume_data TIMEOUT 900 LABELS "dcp;mpi" RESOURCE_LOCK bench_venv
                     ENVIRONMENT "OPENBLAS_NUM_THREADS=1;OMP_NUM_THREADS=1;OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_rmaps_base_oversubscribe=1")
