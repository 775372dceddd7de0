# tests/cli_protocols.cmake — the two failure protocols of the commands' phases (cli/runtime.h):
#   cli_protocols_compile_ok     tests/protocol_mix.c with each phase under its own macro compiles (the
#                                control for the next three)
#   cli_protocols_mix_<n>        the same file with a phase under the other protocol's macro (or a bare
#                                code) does not compile, for the type mismatch
#   cli_protocols_mpi            on 2 ranks, a phase of each kind failing on one rank or on all prints one
#                                message and exits alike on every rank (tests/cli_protocols.sh); uses the
#                                resume_data fixture of tests/resume.cmake
foreach(mix 0 1 2 3)
  set(name cli_protocols_mix_${mix})
  if(mix EQUAL 0)
    set(name cli_protocols_compile_ok)
  endif()
  add_test(NAME ${name} COMMAND ${CMAKE_C_COMPILER} -std=gnu11 -fsyntax-only -Werror -DMIX=${mix} -I${CMAKE_SOURCE_DIR}
                                "-I$<JOIN:$<TARGET_PROPERTY:meshpoint,INCLUDE_DIRECTORIES>,;-I>"
                                ${CMAKE_SOURCE_DIR}/tests/protocol_mix.c
           COMMAND_EXPAND_LISTS)
  set_tests_properties(${name} PROPERTIES LABELS unit TIMEOUT 60)
  if(NOT mix EQUAL 0)   # fails, and for the type mismatch (gcc: "invalid initializer"; clang: "incompatible type")
    set_tests_properties(${name} PROPERTIES PASS_REGULAR_EXPRESSION "invalid initializer|incompatible type")
  endif()
endforeach()
add_test(NAME cli_protocols_mpi
         COMMAND ${CMAKE_SOURCE_DIR}/tests/cli_protocols.sh $<TARGET_FILE:meshpoint> ${CMAKE_BINARY_DIR}/resume_data/t_train.bin
                 ${CMAKE_SOURCE_DIR}/tests/configs/cli_tiny.json ${CMAKE_BINARY_DIR}/cli_protocols)
set_tests_properties(cli_protocols_mpi PROPERTIES FIXTURES_REQUIRED resume_data TIMEOUT 300 LABELS mpi
                     ENVIRONMENT "OPENBLAS_NUM_THREADS=1;OMPI_MCA_mpi_yield_when_idle=1")
