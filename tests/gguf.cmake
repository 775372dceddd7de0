# tests/gguf.cmake — gguf_export: `meshpoint export --format gguf` of a tiny model of each family (llama, mistral,
# qwen2, qwen3, phi3) at f32, f16, bf16 and q8_0, read back with llama.cpp's gguf-py (GGUFReader) and checked
# key by key and byte for byte against the HF export converted as convert_hf_to_gguf.py does (names, q/k
# permutation, fusion, types, gguf.quants' q8_0/bf16); refusals and atomicity (tests/python/gguf_export.py).
# In scripts/test_venv.sh's venv.
add_test(NAME gguf_export
         COMMAND ${CMAKE_SOURCE_DIR}/tests/gguf_export.sh $<TARGET_FILE:meshpoint> ${CMAKE_BINARY_DIR}/gguf_export
                 ${CMAKE_SOURCE_DIR})
set_tests_properties(gguf_export PROPERTIES TIMEOUT 600 LABELS gguf RESOURCE_LOCK test_venv)
# gguf_llamacpp: llama.cpp itself as the oracle (tests/python/gguf_llamacpp.py: logits within 1e-4 of the max,
# 32 greedy tokens, q8_0 greedy and perplexity), in scripts/llamacpp_venv.sh's venv (llama-cpp-python built
# from its sdist: minutes, once; then cached).
add_test(NAME gguf_llamacpp
         COMMAND ${CMAKE_SOURCE_DIR}/tests/gguf_llamacpp.sh $<TARGET_FILE:meshpoint> $<TARGET_FILE:tool_hf_logits>
                 ${CMAKE_BINARY_DIR}/gguf_llamacpp ${CMAKE_SOURCE_DIR})
set_tests_properties(gguf_llamacpp PROPERTIES TIMEOUT 3600 LABELS gguf RESOURCE_LOCK llamacpp_venv
                     ENVIRONMENT "OPENBLAS_NUM_THREADS=1")
