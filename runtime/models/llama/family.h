// pprun's own model family as a pprt::Family (pprt/family.h): the Llama-style decoder with
// multi-token prediction (builtin.h), sized by its own options (--config FILE, --hidden, --heads,
// --kv-heads, --ffn, --tie-embeddings), resumed with its sizes compared in words, read from and
// written to Hugging Face's Llama, Mistral and Qwen2 directories (hf_mapping.h). pprun is
// pprt::main with this family (tools/pprun/main.cpp); the runtime knows nothing more of it.
#pragma once

#include "pprt/family.h"
#include "runtime/models/llama/config.h"

namespace pprt {

Family llama_family();

// A configuration of the family (its JSON, Family::configure's) as the model's sizes. Throws
// ppc::UserError naming `where` and the field.
ModelConfig llama_config(const Config& config, const std::string& where = "model");

}  // namespace pprt
