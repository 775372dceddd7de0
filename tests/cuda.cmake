# tests/cuda.cmake — the CUDA kernels' checks (tests/cuda/), in CUDA builds only (cmake/cuda.cmake).
# They call the kernels themselves, so they link core/cuda/ statically (mp_cuda), not the module.
#   cuda_kernels_host    runs here, without a GPU: the kernels' host/device helpers and the flash-attention
#                        tiling replayed on the host against a float64 attention and the CPU kernels
#   cuda_kernels_host_sass  the kernels' SASS in the CUDA module (libmeshpoint-cuda.so) and the device checks (tests/cuda_sass.sh): no float-to-8/16-bit-integer
#                        conversion (nvcc 13.0's ptxas miscompiled the tensor-core attention's bf16 byte stores
#                        into them); skipped (77) without a cuobjdump
#   cuda_mma_probe       tests/cuda/mma_probe.cu: the mma.sync fragment layouts and the attention's tile
#                        helpers on the device against the host replay; needs a GPU, exit 77 without one;
#                        cuda_mma_probe_selftest runs its analysis on emulated right and wrong devices
#   cuda_kernels_device  every launcher against host references, reductions run twice and compared
#                        bitwise; needs a GPU (sm_80+), exit 77 (skipped) without one
if(MP_HAVE_CUDA)
  foreach(check host device)
    add_executable(cuda_check_${check} tests/cuda/check_kernels_${check}.cu)
    set_target_properties(cuda_check_${check} PROPERTIES CUDA_ARCHITECTURES "${MP_CUDA_ARCHS}" CUDA_STANDARD 17)
    target_link_libraries(cuda_check_${check} PRIVATE mp_cuda mp_core)   # the kernels linked in, not loaded
    add_test(NAME cuda_kernels_${check} COMMAND cuda_check_${check})
    set_tests_properties(cuda_kernels_${check} PROPERTIES LABELS unit SKIP_RETURN_CODE 77 TIMEOUT 300
                         ENVIRONMENT "OPENBLAS_NUM_THREADS=1")
  endforeach()
  add_executable(cuda_mma_probe tests/cuda/mma_probe.cu)
  set_target_properties(cuda_mma_probe PROPERTIES CUDA_ARCHITECTURES "${MP_CUDA_ARCHS}" CUDA_STANDARD 17)
  target_link_libraries(cuda_mma_probe PRIVATE mp_cuda mp_core)   # the kernels linked in, not loaded
  add_test(NAME cuda_mma_probe COMMAND cuda_mma_probe)
  set_tests_properties(cuda_mma_probe PROPERTIES LABELS unit SKIP_RETURN_CODE 77 TIMEOUT 300
                       ENVIRONMENT "OPENBLAS_NUM_THREADS=1")
  add_test(NAME cuda_mma_probe_selftest COMMAND cuda_mma_probe --selftest)
  set_tests_properties(cuda_mma_probe_selftest PROPERTIES LABELS unit TIMEOUT 300 ENVIRONMENT "OPENBLAS_NUM_THREADS=1")
  add_test(NAME cuda_kernels_host_sass COMMAND ${CMAKE_SOURCE_DIR}/tests/cuda_sass.sh $<TARGET_FILE:meshpoint-cuda>
           $<TARGET_FILE:cuda_check_device> $<TARGET_FILE:cuda_mma_probe>)
  set_tests_properties(cuda_kernels_host_sass PROPERTIES LABELS unit SKIP_RETURN_CODE 77 TIMEOUT 300)
endif()

# bench/membound_probe.cu: the RMSNorm kernels alone at the 1B shape against a copy of the same bytes (not a test;
# it #includes the kernel file, so it links only the CUDA runtime; without a GPU it exits 77 naming "no GPU")
if(MP_HAVE_CUDA)
  add_executable(membound_probe bench/membound_probe.cu)
  set_target_properties(membound_probe PROPERTIES CUDA_ARCHITECTURES "${MP_CUDA_ARCHS}" CUDA_STANDARD 17)
  target_include_directories(membound_probe PRIVATE ${CMAKE_SOURCE_DIR})
  target_compile_options(membound_probe PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra,-Wno-unused-parameter>)
  if(MP_WERROR)
    target_compile_options(membound_probe PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-Werror=all-warnings -Xcompiler=-Werror>)
  endif()
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
