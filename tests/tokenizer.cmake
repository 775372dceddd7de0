# tests/tokenizer.cmake — the tokenizer (tokenizer/, docs/TOKENIZER.md) against Hugging Face's `tokenizers`,
# through tests/tokenizer.sh: tokenizer_compare (ids, decode, round trip per convention), tokenizer_refusals
# (what is not implemented is refused by name, exit 2), tokenizer_data (`meshpoint data --tokenizer` end to
# end). The first run makes the pinned venv (scripts/test_venv.sh: PyPI, seconds).
foreach(case compare refusals data)
  add_test(NAME tokenizer_${case}
           COMMAND ${CMAKE_SOURCE_DIR}/tests/tokenizer.sh ${CMAKE_BINARY_DIR} ${CMAKE_SOURCE_DIR} ${case})
  set_tests_properties(tokenizer_${case} PROPERTIES TIMEOUT 600 LABELS tokenizer RESOURCE_LOCK test_venv)
endforeach()
