# tests/cuda_module.cmake — the CUDA backend as a module that only a CUDA device loads (tests/cuda_module.sh),
# in every build (a build without CUDA checks its own refusals):
#   cuda_module_cpu_maps  no CPU command (--version, data, train, ckpt, eval, sample, init, reshard, export,
#                         import) loads libcudart, libcublas(Lt), libnccl or the module (LD_DEBUG=libs);
#                         `--device cuda` does (the watch sees them) and exits 2 with CUDA's reason
#   cuda_module_hidden    the binary without the module (and, under unshare --mount, with CUDA's libraries
#                         hidden): --version says why, --device cuda exits 2 with that reason, CPU trains
foreach(case cpu_maps hidden)
  string(REGEX REPLACE "^cpu_" "" what ${case})
  add_test(NAME cuda_module_${case}
           COMMAND ${CMAKE_SOURCE_DIR}/tests/cuda_module.sh $<TARGET_FILE:meshpoint> ${CMAKE_BINARY_DIR}/resume_data/t_train.bin
                   ${CMAKE_SOURCE_DIR}/tests/configs/cli_tiny.json ${CMAKE_BINARY_DIR}/cuda_module_${case} ${what})
  set_tests_properties(cuda_module_${case} PROPERTIES FIXTURES_REQUIRED resume_data TIMEOUT 300 LABELS unit
                       ENVIRONMENT "OPENBLAS_NUM_THREADS=1")
endforeach()
