# tests/family_config.cmake — config.json of every family against transformers 5.24 itself
# (tests/python/family_config.py in the scripts/bench_venv.sh venv): the published files and configs that
# omit the keys whose defaults differ, read by meshpoint and written back, build the same *ForCausalLM
# with the same sizes, head_dim, eps, RoPE and per-layer windows. The first run makes the venv (minutes).
add_test(NAME family_config
         COMMAND bash -c "py=$(${CMAKE_SOURCE_DIR}/scripts/bench_venv.sh) && exec \"$py\" ${CMAKE_SOURCE_DIR}/tests/python/family_config.py $<TARGET_FILE:tool_config_json> ${CMAKE_SOURCE_DIR}")
set_tests_properties(family_config PROPERTIES TIMEOUT 900 LABELS tokenizer RESOURCE_LOCK bench_venv)
