# tests/tokenizer.cmake — the tokenizer (tokenizer/, docs/TOKENIZER.md) against Hugging Face's `tokenizers`,
# through tests/tokenizer.sh: tokenizer_compare (ids, decode, round trip per convention), tokenizer_unorm (the
# Unicode normalizers on every code point and random clusters), tokenizer_refusals
# (what is not implemented is refused by name, exit 2), tokenizer_data (`meshpoint data --tokenizer` end to
# end), tokenizer_ckpt (checkpoints carry the model's tokenizer files: import -> sample in text -> train
# --init-from/--resume -> reshard -> export, against transformers). The first run makes the pinned venv
# (scripts/test_venv.sh: PyPI, seconds; tokenizer_ckpt: scripts/bench_venv.sh, minutes).
foreach(case compare unorm refusals data)
  add_test(NAME tokenizer_${case}
           COMMAND ${CMAKE_SOURCE_DIR}/tests/tokenizer.sh ${CMAKE_BINARY_DIR} ${CMAKE_SOURCE_DIR} ${case})
  set_tests_properties(tokenizer_${case} PROPERTIES TIMEOUT 600 LABELS tokenizer RESOURCE_LOCK test_venv)
endforeach()
add_test(NAME tokenizer_ckpt COMMAND ${CMAKE_SOURCE_DIR}/tests/tokenizer.sh ${CMAKE_BINARY_DIR} ${CMAKE_SOURCE_DIR} ckpt)
set_tests_properties(tokenizer_ckpt PROPERTIES TIMEOUT 900 LABELS tokenizer RESOURCE_LOCK bench_venv
                     ENVIRONMENT "OPENBLAS_NUM_THREADS=1;OMP_NUM_THREADS=1")
