# tests/device_parity.cmake — devices against the fp32 CPU backend (tests/test_device_parity.c) and the bf16
# paths of layers/ on a mesh (tests/bf16_mesh.sh).
#   device_parity_cpu_bf16  the CPU emulation of the GPU's precision (core/backend_cpu_bf16.c) vs cpu:
#                           logits, loss, every gradient, 3 AdamW steps' losses within bf16 tolerances
#   device_parity_cuda      the same for the CUDA backend; skipped (77) without a usable GPU or CUDA build
#   device_parity_*_hd64    the same on tests/configs/parity_hd64.json (head dim 64) at T = 112: several
#                           32-key tiles of the attention kernels and a partial last one
#   device_parity_*_family  the same with q/k/v biases, q/k norms and head_dim 24 (the Qwen families' ops)
#   device_parity_*_family128  ... at head_dim 128 (Qwen3's): on CUDA the tensor-core attention kernels
#   device_parity_*_family96   ... at head_dim 96 (Phi-3's): on CUDA the SIMT attention kernels
#   device_parity_*_window  the same with a sliding window of 40 keys in every layer (--window 40, < T)
#   device_parity_*_family128_window  head_dim 128 with biases and q/k norms under a window of 40 keys at
#                           T = 112 (Qwen's sliding layers): on CUDA tensor cores, two 64-key tiles
#   bf16_mesh_tp2_dp2       tp 2 x dp 2 (SP) with --device cpu-bf16 vs cpu: losses within tolerance,
#                           bitwise repeatable, its checkpoint resumed on --device cpu
# tests/test_device_parity.c has a main of its own: the tests/test_*.c glob builds it (with Criterion,
# whose main it replaces) and registers `test_device_parity --jobs 2`, which runs it without a device
# (cpu against itself, bitwise). Without Criterion it is built here.
if(NOT TARGET test_device_parity)
  add_executable(test_device_parity tests/test_device_parity.c)
  target_link_libraries(test_device_parity PRIVATE mp_layers mp_core)
endif()
target_compile_definitions(test_device_parity PRIVATE MP_SRC_DIR="${CMAKE_SOURCE_DIR}")
foreach(v "cpu_bf16;cpu-bf16" "cuda;cuda")
  list(GET v 0 tname)
  list(GET v 1 dev)
  add_test(NAME device_parity_${tname} COMMAND test_device_parity ${dev})
  set_tests_properties(device_parity_${tname} PROPERTIES LABELS unit SKIP_RETURN_CODE 77 TIMEOUT 300
                       ENVIRONMENT "OPENBLAS_NUM_THREADS=1;MP_SRC=${CMAKE_SOURCE_DIR}")
  add_test(NAME device_parity_${tname}_hd64
           COMMAND test_device_parity --seq-len 112 ${dev} ${CMAKE_SOURCE_DIR}/tests/configs/parity_hd64.json)
  set_tests_properties(device_parity_${tname}_hd64 PROPERTIES LABELS unit SKIP_RETURN_CODE 77 TIMEOUT 300
                       ENVIRONMENT "OPENBLAS_NUM_THREADS=1")
  add_test(NAME device_parity_${tname}_family
           COMMAND test_device_parity --family 24 ${dev} ${CMAKE_SOURCE_DIR}/tests/configs/torch_gqa_tied.json
                   ${CMAKE_SOURCE_DIR}/tests/configs/cli_tiny.json)
  set_tests_properties(device_parity_${tname}_family PROPERTIES LABELS unit SKIP_RETURN_CODE 77 TIMEOUT 300
                       ENVIRONMENT "OPENBLAS_NUM_THREADS=1")
  foreach(hd 128 96)
    add_test(NAME device_parity_${tname}_family${hd}
             COMMAND test_device_parity --family ${hd} ${dev} ${CMAKE_SOURCE_DIR}/tests/configs/torch_gqa_tied.json
                     ${CMAKE_SOURCE_DIR}/tests/configs/cli_tiny.json)
    set_tests_properties(device_parity_${tname}_family${hd} PROPERTIES LABELS unit SKIP_RETURN_CODE 77 TIMEOUT 300
                         ENVIRONMENT "OPENBLAS_NUM_THREADS=1")
  endforeach()
  add_test(NAME device_parity_${tname}_family128_window
           COMMAND test_device_parity --seq-len 112 --window 40 --family 128 ${dev}
                   ${CMAKE_SOURCE_DIR}/tests/configs/parity_hd64.json)
  set_tests_properties(device_parity_${tname}_family128_window PROPERTIES LABELS unit SKIP_RETURN_CODE 77
                       TIMEOUT 300 ENVIRONMENT "OPENBLAS_NUM_THREADS=1")
  add_test(NAME device_parity_${tname}_window
           COMMAND test_device_parity --seq-len 112 --window 40 ${dev} ${CMAKE_SOURCE_DIR}/tests/configs/parity_hd64.json)
  set_tests_properties(device_parity_${tname}_window PROPERTIES LABELS unit SKIP_RETURN_CODE 77 TIMEOUT 300
                       ENVIRONMENT "OPENBLAS_NUM_THREADS=1")
endforeach()
add_test(NAME bf16_mesh_tp2_dp2
         COMMAND ${CMAKE_SOURCE_DIR}/tests/bf16_mesh.sh $<TARGET_FILE:meshpoint> ${CMAKE_BINARY_DIR}/resume_data/t_train.bin
                 ${CMAKE_SOURCE_DIR}/tests/configs/cli_tiny.json ${CMAKE_BINARY_DIR}/bf16_mesh)
set_tests_properties(bf16_mesh_tp2_dp2 PROPERTIES FIXTURES_REQUIRED resume_data TIMEOUT 300 LABELS mpi
                     ENVIRONMENT "OPENBLAS_NUM_THREADS=1;OMPI_MCA_mpi_yield_when_idle=1")
