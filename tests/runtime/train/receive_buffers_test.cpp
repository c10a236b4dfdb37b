// The executor's receive buffers (executor.h: receive_buffers()): a RECV lands in a buffer kept
// across steps, so the steps of a plan after the first reuse the same buffers (the same data
// pointers, none added), and the losses are those of executors that allocate afresh every step,
// bit for bit. On real ranks (one thread each, real c10d Gloo), for 1F1B, ZB-V (two stages per rank
// in a V), DualPipe (two model copies, receives in both directions at once) and bf16.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <mutex>
#include <optional>

#include "rank_threads.h"
#include "runtime/model/stage.h"
#include "runtime/models/llama/builtin.h"
#include "runtime/train/executor.h"
#include "runtime/train/messages.h"
#include "test_model.h"
#include "test_plans.h"

namespace {

using pprt::ModelConfig;
using rttest::small_config;

constexpr int kRows = 8;
constexpr int kSteps = 3;

// Step `step`'s tokens: other rows every step.
at::Tensor tokens(const ModelConfig& c, int step) {
  return rttest::synthetic_tokens(c, kRows, step);
}

struct Run {
  std::map<std::pair<int, int>, std::vector<double>> losses;  // (step, rank) -> per microbatch
  // per rank, per step: the receive buffers after the step (one executor for all the steps)
  std::vector<std::vector<std::vector<const void*>>> buffers;
};

// kSteps steps of `plan`, each followed by a plain gradient step on every rank's parameters (so
// that every step sends other values); `fresh`: a new executor every step, else one for all.
Run run(const ppc::Plan& plan, at::ScalarType dtype, bool fresh) {
  const ModelConfig c = small_config();
  const pprt::Model builtin = pprt::builtin_model(c);
  Run res;
  res.buffers.resize(static_cast<size_t>(plan.pp()));
  std::mutex m;
  pprt_test::run_ranks(plan.pp(), [&](int rank, pprt::Transport& t, pprt::Store&) {
    pprt::ModelContext ctx{&builtin, {c.vocab, c.seq_len}, 0.1, 11, at::Device(at::kCPU)};
    ctx.dtype = dtype;
    pprt::RankModel model(ctx);
    for (int s : plan.placement.rank_stages[static_cast<size_t>(rank)])
      model.add(plan.layout, plan.layout_stage(s));
    pprt::ExecutorOptions eo;
    eo.timeout = std::chrono::seconds(30);
    std::optional<pprt::Executor> exec;
    for (int step = 0; step < kSteps; ++step) {
      if (fresh || !exec)
        exec.emplace(plan, rank, model.stages, model.ctx, &t, at::Device(at::kCPU), eo);
      const pprt::StepReport rep = exec->run_step(tokens(c, step), step);
      {
        at::NoGradGuard no_grad;
        for (auto& p : model.store.params())
          if (p.tensor.grad().defined()) {
            p.tensor.sub_(p.tensor.grad() * 0.5);
            p.tensor.mutable_grad().zero_();
          }
      }
      std::lock_guard<std::mutex> lock(m);
      res.losses[{step, rank}] = rep.losses;
      res.buffers[static_cast<size_t>(rank)].push_back(exec->receive_buffers());
    }
  });
  return res;
}

void expect_buffers_reused(const ppc::Plan& plan, at::ScalarType dtype = at::kFloat) {
  const Run kept = run(plan, dtype, false), fresh = run(plan, dtype, true);
  // The same losses, bit for bit, and they change from step to step (the steps send other data).
  EXPECT_EQ(kept.losses, fresh.losses);
  bool changed = false;
  for (int rank = 0; rank < plan.pp(); ++rank)
    changed |= kept.losses.at({0, rank}) != kept.losses.at({kSteps - 1, rank});
  EXPECT_TRUE(changed) << "every step computed the same losses";
  for (int rank = 0; rank < plan.pp(); ++rank) {
    const auto& b = kept.buffers[static_cast<size_t>(rank)];
    ASSERT_EQ(b.size(), static_cast<size_t>(kSteps));
    EXPECT_FALSE(b[0].empty()) << "rank " << rank << " kept no receive buffer";
    for (int step = 1; step < kSteps; ++step)
      EXPECT_EQ(b[static_cast<size_t>(step)], b[0])
          << "rank " << rank << ": step " << step << " received into other buffers";
    // At most one buffer per receive of a step (fewer: those a step reuses within itself).
    const auto& acts = plan.order()[static_cast<size_t>(rank)];
    const auto receives = std::count_if(acts.begin(), acts.end(), [](const ppc::Action& a) {
      return a.kind == ppc::ActionKind::RecvF || a.kind == ppc::ActionKind::RecvB;
    });
    EXPECT_LE(static_cast<int64_t>(b[0].size()), receives) << "rank " << rank;
  }
}

TEST(Executor, ReceiveBuffersAreKeptAcrossSteps1F1B) {
  expect_buffers_reused(rttest::compile("Ett|tt|tL", 3, "1F1B", 4));
}

TEST(Executor, ReceiveBuffersAreKeptAcrossStepsZBV) {
  expect_buffers_reused(rttest::compile("Et|tt|tt|tL", 2, "ZBV", 4));
}

TEST(Executor, ReceiveBuffersAreKeptAcrossStepsDualPipe) {
  const ppc::Plan plan = rttest::compile("Et|tt|tt|tL", 4, "DualPipe", 8);
  ASSERT_EQ(plan.copies, 2);
  expect_buffers_reused(plan);
}

TEST(Executor, ReceiveBuffersAreKeptAcrossStepsBf16) {
  expect_buffers_reused(rttest::compile("Ett|tL", 2, "1F1B", 4), at::kBFloat16);
}

// A boundary of several tensors is one message holding their elements one after another: for
// pprun's MTP streams, the bytes of the stack it sent as one tensor before; a boundary of one
// tensor sends the tensor itself (not copied when contiguous and of the message's dtype). The
// receiver reads the tensors back as views of the message.
TEST(Executor, AMessageOfSeveralTensorsHoldsTheBytesOfTheirStack) {
  const at::Tensor h = at::randn({2, 5, 8}), d1 = at::randn({2, 5, 8}), d2 = at::randn({2, 5, 8});
  const at::Tensor message = pprt::pack({h, d1, d2}, at::kFloat);
  const at::Tensor stacked = at::stack({h, d1, d2}).contiguous();
  ASSERT_EQ(message.nbytes(), stacked.nbytes());
  EXPECT_EQ(std::memcmp(message.data_ptr(), stacked.data_ptr(), message.nbytes()), 0);
  const std::vector<int64_t> s{2, 5, 8};
  const pprt::BoundarySpec spec{
      {{s, at::kFloat, ""}, {s, at::kFloat, "mtp.1"}, {s, at::kFloat, "mtp.2"}}};
  const std::vector<at::Tensor> back = pprt::unpack(message, spec);
  ASSERT_EQ(back.size(), 3u);
  EXPECT_TRUE(at::equal(back[0], h));
  EXPECT_TRUE(at::equal(back[1], d1));
  EXPECT_TRUE(at::equal(back[2], d2));
  EXPECT_EQ(back[2].data_ptr(),
            static_cast<void*>(static_cast<char*>(message.data_ptr()) + 2 * h.nbytes()));  // a view
  // One tensor: the message is the tensor.
  const at::Tensor alone = pprt::pack({h}, at::kFloat);
  EXPECT_EQ(alone.data_ptr(), h.data_ptr());
  EXPECT_EQ(alone.sizes(), h.sizes());
  // Mixed precision: the stack's bytes in bf16.
  EXPECT_TRUE(
      at::equal(pprt::pack({h, d1}, at::kBFloat16), at::stack({h, d1}).to(at::kBFloat16).view(-1)));
}

// A receive buffer is sized from its message's spec (a microbatch's own shape), and buffers of
// another shape are kept beside those of the first, each reused once nothing holds it.
TEST(Executor, ReceiveBuffersAreSizedFromEachMessagesSpec) {
  pprt::ReceivePools pools(1, at::Device(at::kCPU));
  const pprt::BoundarySpec one{{{{2, 4}, at::kFloat, ""}}};
  const pprt::BoundarySpec two{{{{3, 4}, at::kFloat, ""}, {{3, 4}, at::kFloat, "mtp.1"}}};
  at::Tensor x = pools.take(0, one, false);
  at::Tensor y = pools.take(0, two, false);
  EXPECT_EQ(x.sizes().vec(), (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(y.sizes().vec(), (std::vector<int64_t>{24}));  // one message of both tensors
  at::Tensor z = pools.take(0, one, false);                // x is held: another buffer
  EXPECT_NE(z.data_ptr(), x.data_ptr());
  const void* held = x.data_ptr();
  x = at::Tensor();
  EXPECT_EQ(pools.take(0, one, false).data_ptr(), held);  // released: reused
  EXPECT_EQ(pools.buffers().size(), 3u);
}

}  // namespace
