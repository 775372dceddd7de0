# tests/gguf_vocab.cmake — the tokenizer side of GGUF (tokenizer/tok_gguf.h, docs/GGUF_TOKENIZER.md) against llama.cpp
# itself, through tests/gguf_vocab.sh, in scripts/llamacpp_venv.sh's venv (llama-cpp-python built from its sdist: minutes
# the first time, cached after; it makes the bench venv first):
#   gguf_vocab      tests/python/gguf_vocab.py: convert_hf_to_gguf.py's tokenizer keys = from_json's, llama.cpp's ids
#                   on from_json's keys = tokenizers' on the corpus of the tokenizer tests, to_json's file = llama.cpp
#   gguf_ref_tool   tests/python/gguf_ref.py (the oracle driver the GGUF export tests use) on the converter's tiny
#                   model: logits per position, greedy steps consistent with them, perplexity, tokenize, refusals
#   gguf_import     tests/python/gguf_import.py: `meshpoint import model.gguf` of llama.cpp's converter's f32/q8_0 files
#                   and its quantizer's q4_0/q4_1 files, per family (llama, mistral, qwen2, qwen3, phi3): tensors
#                   bitwise (f32 = the HF directory, quantized = gguf.quants.dequantize), eval = transformers' loss,
#                   rebuilt tokenizer = llama.cpp's ids, the export's tokenizer = tokenizers' ids in llama.cpp,
#                   fine-tune from the import, refusals (architecture, tensor type)
foreach(case vocab ref_tool import)
  add_test(NAME gguf_${case} COMMAND ${CMAKE_SOURCE_DIR}/tests/gguf_vocab.sh ${CMAKE_BINARY_DIR} ${CMAKE_SOURCE_DIR} ${case})
  set_tests_properties(gguf_${case} PROPERTIES TIMEOUT 1800 LABELS gguf RESOURCE_LOCK llamacpp_venv
                       ENVIRONMENT "OPENBLAS_NUM_THREADS=1;OMP_NUM_THREADS=1")
endforeach()
