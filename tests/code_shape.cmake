# tests/code_shape.cmake — the code's shape, kept (tests/python/code_shape.py): no function in
# cli/, ckpt/ or reshard/ over 100 lines, cmd_train.c under 400, the one-way library dependencies of
# docs/DESIGN_NOTES.md, ckpt/ckpt_internal.h included only inside ckpt/ and tests/ckpt/ (its white-box tests),
# tests/README.md's "By module" table naming every library .c file, no getenv in the library folders but
# core/fault.c's MP_FAULT and the user variables of docs/CLI.md, and no literal exit status in cli/.
add_test(NAME code_shape COMMAND ${MP_PYTHON} ${CMAKE_SOURCE_DIR}/tests/python/code_shape.py ${CMAKE_SOURCE_DIR})
set_tests_properties(code_shape PROPERTIES LABELS unit TIMEOUT 60)
