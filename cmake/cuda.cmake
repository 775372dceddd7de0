# cmake/cuda.cmake — the CUDA backend (core/cuda/: kernels, cuBLASLt GEMMs, the NCCL communicator, the
# profiler), built into the loadable module libmeshpoint-cuda.so when the CUDA toolkit (nvcc, cudart,
# cuBLASLt) and NCCL are found.
#
#   -DMP_CUDA=AUTO (default)  built when found, else a CPU-only build (`--device cuda` says so)
#   -DMP_CUDA=ON              required: configuring fails naming what is missing
#   -DMP_CUDA=OFF             never (no module; `--version` says "cuda not built in")
#
# One binary either way: meshpoint (and every program linking mp_core) links no CUDA library. The module, placed beside the programs of
# the build (the GPU bundle puts it in bin/, beside meshpoint), is dlopened by core/cuda_module.c only
# when something asks for a CUDA device; a CPU run never maps CUDA, and the binary starts where CUDA is
# not installed. The module calls back into core (errors, accounting, log prefix): every program linking
# mp_core exports core's mp_* functions (core/cuda/host_symbols.list), and the module exports one symbol
# (core/cuda/module.map).
# core/cuda/ is compiled once (mp_cuda_obj, position-independent) into both the module and a static
# library, mp_cuda, which the kernel checks (tests/cuda.cmake) link directly. A CUDA build on a machine
# without a usable GPU refuses `--device cuda` with a clear error (exit 2). Kernels are built for sm_80
# (A100) and sm_90 (H100/H200); -DMP_CUDA_ARCHS overrides. MP_WERROR=ON turns warnings into errors for
# C and CUDA alike (scripts/test.sh builds the CUDA variant that way).
set(MP_CUDA AUTO CACHE STRING "CUDA backend: AUTO (when nvcc and NCCL are found), ON (required) or OFF")
set_property(CACHE MP_CUDA PROPERTY STRINGS AUTO ON OFF)
set(MP_CUDA_ARCHS "80;90" CACHE STRING "CUDA architectures of the kernels")
option(MP_WERROR "Treat compiler warnings as errors (C and CUDA)" OFF)
if(MP_WERROR)
  target_compile_options(mp_core PRIVATE $<$<COMPILE_LANGUAGE:C>:-Werror>)
endif()

set(MP_HAVE_CUDA OFF)
set(mp_cuda_missing "")
if(NOT MP_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)   # the toolkit's usual place, when not on PATH
  endif()
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    set(CMAKE_CUDA_ARCHITECTURES ${MP_CUDA_ARCHS})
    enable_language(CUDA)
    # as for C (CMakeLists.txt): no -DNDEBUG, so the launchers' host-side asserts stay live in Release
    set(CMAKE_CUDA_FLAGS_RELEASE "-O3")
    set(CMAKE_CUDA_FLAGS_RELWITHDEBINFO "-O2 -g")
    find_package(CUDAToolkit)
    find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} ${CUDAToolkit_LIBRARY_ROOT}/include)
    find_library(NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} ${CUDAToolkit_LIBRARY_ROOT}/lib
                 ${CUDAToolkit_LIBRARY_ROOT}/lib64)
    if(NOT CUDAToolkit_FOUND OR NOT TARGET CUDA::cublasLt)
      set(mp_cuda_missing "the CUDA toolkit's cudart/cuBLASLt")
    elseif(NOT NCCL_INCLUDE_DIR OR NOT NCCL_LIBRARY)
      set(mp_cuda_missing "NCCL (nccl.h, libnccl)")
    else()
      set(MP_HAVE_CUDA ON)
    endif()
  else()
    set(mp_cuda_missing "nvcc")
  endif()
  if(MP_CUDA STREQUAL "ON" AND NOT MP_HAVE_CUDA)
    message(FATAL_ERROR "MP_CUDA=ON but ${mp_cuda_missing} was not found")
  endif()
endif()

if(MP_HAVE_CUDA)
  file(GLOB MP_CUDA_SRC CONFIGURE_DEPENDS core/cuda/*.cu core/cuda/*.c)
  add_library(mp_cuda_obj OBJECT ${MP_CUDA_SRC})
  set_target_properties(mp_cuda_obj PROPERTIES CUDA_ARCHITECTURES "${MP_CUDA_ARCHS}" CUDA_STANDARD 17
                        CUDA_STANDARD_REQUIRED ON POSITION_INDEPENDENT_CODE ON)
  target_include_directories(mp_cuda_obj PRIVATE ${NCCL_INCLUDE_DIR})
  target_link_libraries(mp_cuda_obj PRIVATE CUDA::cudart CUDA::cublasLt MPI::MPI_C)   # their headers
  # the project's C warning flags do not apply to nvcc's host pass; name them for it
  target_compile_options(mp_cuda_obj PRIVATE
    $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra,-Wno-unused-parameter>)
  if(MP_WERROR)
    target_compile_options(mp_cuda_obj PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-Werror=all-warnings -Xcompiler=-Werror>)
  endif()
  set(mp_cuda_libs CUDA::cudart CUDA::cublasLt ${NCCL_LIBRARY} MPI::MPI_C)
  # the module: dlopened, never linked; core's symbols come from the executable that loads it
  add_library(meshpoint-cuda MODULE $<TARGET_OBJECTS:mp_cuda_obj>)
  target_link_libraries(meshpoint-cuda PRIVATE ${mp_cuda_libs})
  set_target_properties(meshpoint-cuda PROPERTIES LINKER_LANGUAGE CUDA CUDA_RUNTIME_LIBRARY Shared
                        LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR} LINK_DEPENDS ${CMAKE_SOURCE_DIR}/core/cuda/module.map)
  target_link_options(meshpoint-cuda PRIVATE "LINKER:--version-script=${CMAKE_SOURCE_DIR}/core/cuda/module.map")
  # the same objects as a static library, for programs that call the kernels themselves (tests/cuda.cmake)
  add_library(mp_cuda STATIC $<TARGET_OBJECTS:mp_cuda_obj>)
  target_link_libraries(mp_cuda PUBLIC ${mp_cuda_libs})
  set_target_properties(mp_cuda PROPERTIES LINKER_LANGUAGE CUDA CUDA_RUNTIME_LIBRARY Shared)
  target_compile_definitions(mp_core PUBLIC MP_HAVE_CUDA=1)
  # the module's calls into core: programs export core's mp_* functions (and nothing else of theirs)
  target_link_options(mp_core INTERFACE "LINKER:--dynamic-list=${CMAKE_SOURCE_DIR}/core/cuda/host_symbols.list")
  message(STATUS "meshpoint: CUDA backend ON (nvcc ${CMAKE_CUDA_COMPILER_VERSION}, archs ${MP_CUDA_ARCHS}, NCCL ${NCCL_LIBRARY})")
else()
  message(STATUS "meshpoint: CUDA backend OFF (MP_CUDA=${MP_CUDA}; missing: ${mp_cuda_missing})")
endif()
