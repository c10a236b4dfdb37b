// The input/weight split through the autograd graph (runtime/model/autograd_split.h), Google
// Benchmark, built as autograd_split_bench when PP_BUILD_RUNTIME is on. One microbatch through
// one stage, in one process:
//
//  BM_UserModuleSplit/<width>: a stage of four blocks of ordinary torch::nn modules (LayerNorm,
//    Linear to 4x the width, GELU, Linear back, residual), 4 sequences of 128 tokens, a width
//    where the products dominate. Counters: F_ms, B_ms, I_ms, W_ms, IW_over_B, and the memory a
//    microbatch holds from its I until its W: held_MB (what the W frees, as the allocator reports
//    it; pprun --profile measures the same) and captured_MB (the gradients the I kept, part of it),
//    against activation_MB (what the F left allocated, which a B frees).
//  BM_BuiltinSplit/<hidden>: the built-in model's stage of two decoder layers, its hand-written
//    split against the generic one forced on it (ModelContext::generic_split). Counters: B_ms,
//    hand_IW_ms, generic_IW_ms, generic_over_hand, hand_held_MB, generic_held_MB.
//
// Each iteration runs every variant once on the same inputs, alternating, after a first full
// backward that leaves every parameter's .grad allocated (later ones accumulate in place, so that
// a W's net allocation is what it frees). Figures from a shared machine are not to be trusted:
// bench/README.md says how to run them.
#include <ATen/ATen.h>
#include <benchmark/benchmark.h>
#include <c10/core/Allocator.h>
#include <c10/util/ThreadLocalDebugInfo.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/torch.h>

#include <chrono>

#include "bench/builtin_stage.h"
#include "runtime/launch/process_setup.h"
#include "runtime/model/autograd_split.h"
#include "runtime/model/stage.h"

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

// The bytes allocated less the bytes freed on this thread while installed (LibTorch's allocators
// report to it as to the profiler's memory tracking; on the CPU a free is reported only for
// memory allocated while some such reporter was installed: install it before the forward).
struct NetAllocated final : c10::MemoryReportingInfoBase {
  int64_t net = 0;
  void reportMemoryUsage(void*, int64_t bytes, size_t, size_t, c10::Device) override {
    net += bytes;
  }
  bool memoryProfilingEnabled() const override { return true; }
};

struct Meter {
  std::shared_ptr<NetAllocated> mem = std::make_shared<NetAllocated>();
  c10::DebugInfoGuard guard{c10::DebugInfoKind::PROFILER_STATE, mem};
  int64_t mark() {
    const int64_t n = mem->net;
    mem->net = 0;
    return n;
  }
};

constexpr double kMB = 1.0 / (1 << 20);

struct BlockImpl : torch::nn::Module {
  torch::nn::LayerNorm norm{nullptr};
  torch::nn::Linear up{nullptr}, down{nullptr};
  explicit BlockImpl(int64_t w) {
    norm = register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({w})));
    up = register_module("up", torch::nn::Linear(w, 4 * w));
    down = register_module("down", torch::nn::Linear(4 * w, w));
  }
  at::Tensor forward(const at::Tensor& x) { return x + down(torch::gelu(up(norm(x)))); }
};
TORCH_MODULE(Block);

void BM_UserModuleSplit(benchmark::State& state) {
  pprt::set_threads(1);
  pprt::keep_freed_memory();
  const int64_t w = state.range(0), b = 4, T = 128;
  torch::nn::Sequential stage;
  for (int i = 0; i < 4; ++i) stage->push_back(Block(w));
  const at::Tensor x = at::randn({b, T, w});
  const at::Tensor g = at::randn({b, T, w}) * 1e-3;
  Meter meter;
  {  // every .grad allocated once
    const at::Tensor in = x.detach().requires_grad_(true);
    torch::autograd::backward({stage->forward(in)}, {g});
  }
  double tf = 0, tb = 0, ti = 0, tw = 0, held = 0, captured = 0, act = 0;
  int64_t n = 0;
  for (auto _ : state) {
    for (bool split : {false, true}) {
      at::Tensor in = x.detach().requires_grad_(true);
      meter.mark();
      auto t0 = Clock::now();
      at::Tensor out = stage->forward(in);
      if (!split) tf += ms_since(t0), act += static_cast<double>(meter.mark());
      if (!split) {
        t0 = Clock::now();
        torch::autograd::backward({out}, {g});
        tb += ms_since(t0);
        benchmark::DoNotOptimize(in.grad().data_ptr());
        continue;
      }
      pprt::AutogradSplit s;
      t0 = Clock::now();
      at::Tensor gx = s.backward_input(out, g, in);
      ti += ms_since(t0);
      captured += static_cast<double>(s.held().gradient_bytes);
      out = at::Tensor();
      in = at::Tensor();
      gx = at::Tensor();
      meter.mark();
      t0 = Clock::now();
      s.backward_weight();
      tw += ms_since(t0);
      held -= static_cast<double>(meter.mark());
    }
    ++n;
  }
  state.counters["F_ms"] = tf / n;
  state.counters["B_ms"] = tb / n;
  state.counters["I_ms"] = ti / n;
  state.counters["W_ms"] = tw / n;
  state.counters["IW_over_B"] = (ti + tw) / tb;
  state.counters["activation_MB"] = act / n * kMB;
  state.counters["held_MB"] = held / n * kMB;
  state.counters["captured_MB"] = captured / n * kMB;
}
BENCHMARK(BM_UserModuleSplit)->Arg(512)->Arg(1024)->Unit(benchmark::kMillisecond)->MinTime(2.0);

void BM_BuiltinSplit(benchmark::State& state) {
  pprt::set_threads(1);
  pprt::keep_freed_memory();
  bench::BuiltinStage s(static_cast<int>(state.range(0)));
  pprt::Stage& stage = s.stage;
  const at::Tensor &x = s.x, &g = s.g;
  Meter meter;
  {  // every .grad allocated once
    const at::Tensor in = x.detach().requires_grad_(true);
    torch::autograd::backward({stage.forward(in, at::Tensor(), 0, nullptr, nullptr)}, {g});
  }
  double tb = 0, th = 0, tg = 0, held_h = 0, held_g = 0;
  int64_t n = 0;
  for (auto _ : state) {
    for (int variant : {0, 1, 2}) {  // B, hand-written I + W, generic I + W
      at::Tensor in = x.detach().requires_grad_(true);
      pprt::WeightWork work;
      // B and the hand-written split as pprun runs them (a WeightWork); the generic split without.
      at::Tensor out = stage.forward(in, at::Tensor(), 0, variant != 2 ? &work : nullptr, nullptr);
      auto t0 = Clock::now();
      if (variant == 0) {
        torch::autograd::backward({out}, {g});
        tb += ms_since(t0);
        continue;
      }
      pprt::AutogradSplit s;
      if (variant == 1) {
        work.set_deferring(true);
        torch::autograd::backward({out}, {g});
      } else {
        benchmark::DoNotOptimize(s.backward_input(out, g, in).data_ptr());
      }
      out = at::Tensor();
      in = at::Tensor();
      meter.mark();
      if (variant == 1)
        work.run();
      else
        s.backward_weight();
      const double ms = ms_since(t0);
      const auto freed = static_cast<double>(-meter.mark());
      (variant == 1 ? th : tg) += ms;
      (variant == 1 ? held_h : held_g) += freed;
    }
    ++n;
  }
  state.counters["B_ms"] = tb / n;
  state.counters["hand_IW_ms"] = th / n;
  state.counters["generic_IW_ms"] = tg / n;
  state.counters["generic_over_hand"] = tg / th;
  state.counters["hand_held_MB"] = held_h / n * kMB;
  state.counters["generic_held_MB"] = held_g / n * kMB;
}
BENCHMARK(BM_BuiltinSplit)->Arg(256)->Arg(512)->Unit(benchmark::kMillisecond)->MinTime(2.0);

}  // namespace

BENCHMARK_MAIN();
