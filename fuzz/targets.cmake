# The fuzz targets: fuzz/<name>_fuzz.cpp each, seeds in fuzz/corpus/<name>/, regression inputs in
# fuzz/regressions/<name>/. Used by the fuzz build (fuzz/CMakeLists.txt) and by the test that
# replays the corpus in the normal suite (tests/CMakeLists.txt).
#
# To add a target: write fuzz/<name>_fuzz.cpp (PP_FUZZ_TARGET(<name>) { ... }), add <name> here
# (and PP_FUZZ_SOURCES_<name> if it needs sources beyond libppc), commit seeds in
# fuzz/corpus/<name>/. scripts/fuzz.sh and the tests pick it up.
# (One line: scripts/fuzz.sh reads it.)
set(PP_FUZZ_TARGETS layout csv_import json_plan pprun_plan cost_model model_config checkpoint safetensors token_file)

# Sources beyond libppc, relative to the repository root (plain C++: no LibTorch).
set(PP_FUZZ_SOURCES_pprun_plan runtime/launch/plan_load.cpp)
set(PP_FUZZ_SOURCES_model_config runtime/models/llama/config.cpp runtime/models/llama/architecture.cpp
    runtime/models/llama/moe_config.cpp)
set(PP_FUZZ_SOURCES_checkpoint fuzz/fuzz_files.cpp runtime/checkpoint/format.cpp runtime/checkpoint/safetensors.cpp
    runtime/models/llama/config.cpp runtime/models/llama/architecture.cpp
    runtime/models/llama/moe_config.cpp runtime/job.cpp)
set(PP_FUZZ_SOURCES_safetensors fuzz/fuzz_files.cpp runtime/checkpoint/safetensors.cpp)
set(PP_FUZZ_SOURCES_token_file fuzz/fuzz_files.cpp runtime/data/token_file.cpp)
