// The small built-in model and token batches the executor's tests replay plans with.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

#include "runtime/data/token_source.h"
#include "runtime/models/llama/config.h"

namespace rttest {

// Small enough to run many plans in a test, with every part of the model (GQA, SwiGLU).
inline pprt::ModelConfig small_config() {
  pprt::ModelConfig c;
  c.hidden = 32;
  c.heads = 4;
  c.kv_heads = 2;
  c.ffn = 64;
  c.seq_len = 16;
  return c;
}

// Step `step`'s batch of `rows` synthetic sequences (seed 3) of seq_len + 1 tokens, as pprun draws
// them: [rows, seq_len + 1].
inline at::Tensor synthetic_tokens(const pprt::ModelConfig& c, int rows, int64_t step) {
  std::vector<int64_t> v;
  pprt::TokenSource::synthetic(c.vocab, 3).batch(step, rows, c.seq_len + 1, v);
  return at::from_blob(v.data(), {rows, c.seq_len + 1}, at::kLong).clone();
}

}  // namespace rttest
