# tests/isa.cmake — the CPU kernels of every ISA level (runtime dispatch, core/cpu_isa.c): the
# numeric and bitwise suites again with MP_ISA=v2, v3 and v4 (tests/isa_run.sh; a level this CPU cannot
# run is skipped, exit 77): the kernels against float64 (test_kernels), mesh invariance on 1x1 and
# tp2 x dp2 (mpi_llama), exact resume on tp2 x dp2 (resume_exact.sh) and PyTorch parity (compare_torch.py).
# The unforced run of every other entry uses the best level the CPU runs. isa_refused: MP_ISA above what
# the CPU runs (the fault cpu_isa_max pretends a v2 CPU) and an unknown level are refused with exit 2.
set(MP_ISA_RUN ${CMAKE_SOURCE_DIR}/tests/isa_run.sh $<TARGET_FILE:meshpoint>)
set(MP_ISA_ENV "OPENBLAS_NUM_THREADS=1;OMP_NUM_THREADS=1;OMPI_MCA_mpi_yield_when_idle=1")
foreach(lvl v2 v3 v4)
  if(CRITERION_FOUND)
    add_test(NAME isa_${lvl}_kernels COMMAND ${MP_ISA_RUN} ${lvl} $<TARGET_FILE:test_kernels> --jobs 2)
  endif()
  add_test(NAME isa_${lvl}_mesh_tp1_dp1 COMMAND ${MP_ISA_RUN} ${lvl} ${MPIEXEC_EXECUTABLE} ${MPIEXEC_ARGS} -np 1
           $<TARGET_FILE:mpi_llama> --tp 1 --sp 1 --config gqa_tied)
  add_test(NAME isa_${lvl}_mesh_tp2_dp2 COMMAND ${MP_ISA_RUN} ${lvl} ${MPIEXEC_EXECUTABLE} ${MPIEXEC_ARGS} -np 4
           $<TARGET_FILE:mpi_llama> --tp 2 --sp 1 --config odd)
  add_test(NAME isa_${lvl}_resume
           COMMAND ${MP_ISA_RUN} ${lvl} ${CMAKE_SOURCE_DIR}/tests/resume_exact.sh $<TARGET_FILE:meshpoint>
                   $<TARGET_FILE:tool_ckpt_equal> ${CMAKE_BINARY_DIR}/resume_data/t_train.bin
                   ${CMAKE_SOURCE_DIR}/tests/configs/cli_tiny.json ${CMAKE_BINARY_DIR}/isa_${lvl}_resume)
  set_tests_properties(isa_${lvl}_resume PROPERTIES FIXTURES_REQUIRED resume_data)
  add_test(NAME isa_${lvl}_torch
           COMMAND ${MP_ISA_RUN} ${lvl} ${MP_PYTHON} ${CMAKE_SOURCE_DIR}/tests/python/compare_torch.py
                   --tool $<TARGET_FILE:tool_llama_dump> --config ${CMAKE_SOURCE_DIR}/tests/configs/torch_gqa_tied.json
                   --perturb-norms)
  foreach(t kernels mesh_tp1_dp1 mesh_tp2_dp2 resume torch)
    if(TEST isa_${lvl}_${t})
      set_tests_properties(isa_${lvl}_${t} PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 300 LABELS "isa;mpi"
                           ENVIRONMENT "${MP_ISA_ENV}")
    endif()
  endforeach()
endforeach()
add_test(NAME isa_refused COMMAND ${CMAKE_SOURCE_DIR}/tests/isa_refused.sh $<TARGET_FILE:meshpoint>
         ${CMAKE_SOURCE_DIR}/tests/configs/cli_tiny.json ${CMAKE_BINARY_DIR}/resume_data/t_train.bin
         ${CMAKE_BINARY_DIR}/isa_refused)
set_tests_properties(isa_refused PROPERTIES FIXTURES_REQUIRED resume_data SKIP_RETURN_CODE 77 TIMEOUT 60
                     ENVIRONMENT "OPENBLAS_NUM_THREADS=1")
# attn_bwd_vs_txt: bench/bench_attn.c's agreement check as a test, on every level — the flash attention
# backward against the T x T backward it replaced (an independent implementation), at a shape crossing
# query and key blocks (T = 300, GQA 4/2, head dim 16), one timing round (the time is not checked).
foreach(lvl v2 v3 v4)
  add_test(NAME isa_${lvl}_attn_bwd_vs_txt COMMAND ${MP_ISA_RUN} ${lvl} $<TARGET_FILE:bench_attn> 2 300 4 2 16 1 1)
  set_tests_properties(isa_${lvl}_attn_bwd_vs_txt PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 120 LABELS "isa"
                       ENVIRONMENT "${MP_ISA_ENV}")
endforeach()
