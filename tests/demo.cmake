# tests/demo.cmake — the README's door. readme_commands: the README's two commands and .ci/run's are the
# same (tests/readme_commands.sh). readme_tour: the README's ten-line tour runs as written, each command
# doing what its comment says (tests/readme_tour.sh). cli_docs: docs/CLI.md, the command reference the
# README points to, has a section for every command and names every flag of its --help (tests/cli_docs.sh). demo_selfcheck_*: the demo's stages check their own outcome
# (tests/demo_selfcheck.sh): the short demo passes, and each deliberately broken stage fails it naming
# the stage; a directory the demo did not make is refused.
add_test(NAME readme_commands COMMAND ${CMAKE_SOURCE_DIR}/tests/readme_commands.sh ${CMAKE_SOURCE_DIR})
add_test(NAME readme_tour COMMAND ${CMAKE_SOURCE_DIR}/tests/readme_tour.sh $<TARGET_FILE:meshpoint> ${CMAKE_SOURCE_DIR}
                                  ${CMAKE_BINARY_DIR}/readme_tour)
set_tests_properties(readme_tour PROPERTIES TIMEOUT 300 LABELS mpi
                     ENVIRONMENT "OPENBLAS_NUM_THREADS=1;OMPI_MCA_mpi_yield_when_idle=1")
add_test(NAME cli_docs COMMAND ${CMAKE_SOURCE_DIR}/tests/cli_docs.sh $<TARGET_FILE:meshpoint> ${CMAKE_SOURCE_DIR})
# doc_citations: every "section title" a file cites of docs/DESIGN_NOTES.md is one of its sections
# (tests/python/doc_citations.py), so cutting or renaming a section there cannot leave a comment pointing nowhere.
add_test(NAME doc_citations COMMAND ${MP_PYTHON} ${CMAKE_SOURCE_DIR}/tests/python/doc_citations.py ${CMAKE_SOURCE_DIR})
set_tests_properties(doc_citations PROPERTIES LABELS unit TIMEOUT 60)
foreach(case pass resume reshard sample plot foreign)
  add_test(NAME demo_selfcheck_${case}
           COMMAND ${CMAKE_SOURCE_DIR}/tests/demo_selfcheck.sh $<TARGET_FILE:meshpoint> ${CMAKE_BINARY_DIR}/demo_selfcheck_${case} ${case})
  set_tests_properties(demo_selfcheck_${case} PROPERTIES WORKING_DIRECTORY ${CMAKE_SOURCE_DIR} TIMEOUT 300 LABELS mpi
                       ENVIRONMENT "OPENBLAS_NUM_THREADS=1;OMPI_MCA_mpi_yield_when_idle=1")
endforeach()
