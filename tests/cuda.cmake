# tests/cuda.cmake — the CUDA kernels' checks (core/cuda/hostcheck/), in CUDA builds only (cmake/cuda.cmake).
# They call the kernels themselves, so they link core/cuda/ statically (mp_cuda), not the module.
#   cuda_kernels_host    runs here, without a GPU: the kernels' host/device helpers and the flash-attention
#                        tiling replayed on the host against a float64 attention and the CPU kernels
#   cuda_kernels_device  every launcher against host references, reductions run twice and compared
#                        bitwise; needs a GPU (sm_80+), exit 77 (skipped) without one
if(MP_HAVE_CUDA)
  foreach(check host device)
    add_executable(cuda_check_${check} core/cuda/hostcheck/check_kernels_${check}.cu)
    set_target_properties(cuda_check_${check} PROPERTIES CUDA_ARCHITECTURES "${MP_CUDA_ARCHS}" CUDA_STANDARD 17)
    target_link_libraries(cuda_check_${check} PRIVATE mp_cuda mp_core)   # the kernels linked in, not loaded
    add_test(NAME cuda_kernels_${check} COMMAND cuda_check_${check})
    set_tests_properties(cuda_kernels_${check} PROPERTIES LABELS unit SKIP_RETURN_CODE 77 TIMEOUT 300
                         ENVIRONMENT "OPENBLAS_NUM_THREADS=1")
  endforeach()
endif()

# bench/gemm_probe.cu: every GEMM key of the 1B step alone on the GPU through the backend's cuBLASLt wrapper
# (not a test: the GPU check runs it as an optional part; without a GPU it exits 77 naming "no GPU")
if(MP_HAVE_CUDA)
  add_executable(gemm_probe bench/gemm_probe.cu)
  set_target_properties(gemm_probe PROPERTIES CUDA_ARCHITECTURES "${MP_CUDA_ARCHS}" CUDA_STANDARD 17)
  target_link_libraries(gemm_probe PRIVATE mp_cuda mp_core)
  target_compile_options(gemm_probe PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra,-Wno-unused-parameter>)
  if(MP_WERROR)
    target_compile_options(gemm_probe PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-Werror=all-warnings -Xcompiler=-Werror>)
  endif()
endif()
