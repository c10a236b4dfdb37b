// The benchmarks' stage of the built-in model (runtime_bench's BM_SplitBackward,
// autograd_split_bench's BM_BuiltinSplit), built once here.
#pragma once

#include <ATen/ATen.h>

#include "compiler/layout.h"
#include "runtime/model/stage.h"
#include "runtime/models/llama/builtin.h"

namespace bench {

// The middle stage of E|tt|L (two decoder layers) of the built-in model of width `hidden`: 8 heads,
// 4 KV heads, the FFN 8/3 of the width rounded down to a multiple of 16, sequences of 128 tokens,
// on the CPU. And one microbatch of kBatch sequences for it: an input `x` and an output gradient
// `g` (random, drawn after the stage's parameters).
struct BuiltinStage {
  static constexpr int kBatch = 4;
  pprt::ModelConfig config;
  pprt::Model builtin;
  pprt::RankModel model;
  pprt::Stage& stage;
  at::Tensor x, g;

  explicit BuiltinStage(int hidden)
      : config(config_of(hidden)),
        builtin(pprt::builtin_model(config)),
        model(pprt::ModelContext{
            &builtin, {config.vocab, config.seq_len}, 0.1, 1, at::Device(at::kCPU)}),
        stage(model.add(ppc::parse_layout("E|tt|L"), 1)),
        x(at::randn({1, kBatch, config.seq_len, config.hidden})),
        g(at::randn({1, kBatch, config.seq_len, config.hidden}) * 1e-3) {}

  static pprt::ModelConfig config_of(int hidden) {
    pprt::ModelConfig c;
    c.hidden = hidden;
    c.heads = 8;
    c.kv_heads = 4;
    c.ffn = c.hidden * 8 / 3 / 16 * 16;
    c.seq_len = 128;
    return c;
  }
};

}  // namespace bench
