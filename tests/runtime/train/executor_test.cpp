// The executor on real ranks (one thread each, real c10d Gloo): for compiled plans of every kind
// of schedule, and for plans transformed by hand (B split into I and W, F and B fused into
// OVERLAP_F_B, V placement), one step gives the gradients and the losses of the unpipelined
// model, and each rank's peak of in-flight activations is the compiler's prediction. Models with
// multi-token prediction, tied embeddings, DualPipe's two copies and empty end stages included:
// the gradients of a parameter held by several ranks add up to the unpipelined model's.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>

#include <cmath>
#include <map>
#include <mutex>

#include "compiler/compile.h"
#include "compiler/lower_send_recv.h"
#include "compiler/verify.h"
#include "rank_threads.h"
#include "runtime/model/stage.h"
#include "runtime/models/llama/builtin.h"
#include "runtime/train/executor.h"
#include "runtime/train/plan_order.h"
#include "runtime/train/replan.h"
#include "test_model.h"
#include "test_plans.h"

namespace {

using rttest::compile;
using rttest::small_config;

using pprt::ModelConfig;
using pprt::Stage;

constexpr int kRows = 8;

at::Tensor tokens(const ModelConfig& c) {
  return rttest::synthetic_tokens(c, kRows, 0);
}

// Lowers a plan whose compute orders were changed, and checks it with the verifier.
ppc::Plan relower(ppc::Plan plan) {
  plan.lowered.clear();
  plan = ppc::lower_send_recv(plan);
  const auto rep = ppc::verify(plan);
  EXPECT_TRUE(rep.ok()) << (rep.errors.empty() ? "" : rep.errors.front());
  return plan;
}

struct Result {
  std::map<std::string, at::Tensor> grads;  // summed over the ranks holding a copy
  std::vector<int> peak;
  std::vector<double> losses, mtp_losses;
};

// The built-in model (builtin.h) on the CPU.
pprt::ModelContext context(const pprt::Model& model, const ModelConfig& c) {
  return pprt::ModelContext{&model, {c.vocab, c.seq_len}, 0.1, 11, at::Device(at::kCPU)};
}

// The stages rank `rank` of `plan` runs, over one parameter store.
struct RankModel : pprt::RankModel {
  RankModel(const pprt::Model& model, const ppc::Plan& plan, int rank, const ModelConfig& c)
      : pprt::RankModel(context(model, c)) {
    for (int s : plan.placement.rank_stages[static_cast<size_t>(rank)])
      add(plan.layout, plan.layout_stage(s));
  }
};

Result run_pipelined(const ppc::Plan& plan, const ModelConfig& c) {
  Result res;
  res.peak.assign(static_cast<size_t>(plan.pp()), -1);
  res.losses.assign(static_cast<size_t>(plan.microbatches), 0.0);
  res.mtp_losses = res.losses;
  std::mutex m;
  const at::Tensor tk = tokens(c);
  const pprt::Model builtin = pprt::builtin_model(c);
  pprt_test::run_ranks(plan.pp(), [&](int rank, pprt::Transport& t, pprt::Store&) {
    RankModel model(builtin, plan, rank, c);
    pprt::ExecutorOptions eo;
    eo.timeout = std::chrono::seconds(30);
    pprt::Executor exec(plan, rank, model.stages, model.ctx, &t, at::Device(at::kCPU), eo);
    const pprt::StepReport rep = exec.run_step(tk, 0);
    std::lock_guard<std::mutex> lock(m);
    res.peak[static_cast<size_t>(rank)] = rep.peak_inflight;
    for (size_t mb = 0; mb < rep.losses.size(); ++mb) {  // each microbatch's L is on one rank
      res.losses[mb] += rep.losses[mb];
      if (!rep.reported.empty()) res.mtp_losses[mb] += rep.reported[0].sum[mb];  // "mtp"
    }
    for (auto& p : model.store.params()) {
      auto [it, fresh] = res.grads.emplace(p.name, p.tensor.grad().clone());
      if (!fresh) it->second += p.tensor.grad();
    }
  });
  return res;
}

Result run_reference(const ppc::Layout& layout, int mbs, const ModelConfig& c) {
  const pprt::Model builtin = pprt::builtin_model(c);
  pprt::RankModel model(context(builtin, c));
  Stage& whole = model.add(layout, -1);
  pprt::ParamStore& store = model.store;
  const at::Tensor tk = tokens(c);
  const int b = kRows / mbs;
  Result res;
  for (int mb = 0; mb < mbs; ++mb) {
    const at::Tensor rows = tk.narrow(0, mb * b, b);
    pprt::LossReport parts;
    pprt::WeightWork work;
    at::Tensor loss = whole.forward(at::Tensor(), rows, mb, &work, &parts);
    res.losses.push_back(parts.main.item<double>());
    res.mtp_losses.push_back(parts.values.empty() ? 0.0  // "mtp": the mean of its depths'
                                                  : parts.values[0].value.mean().item<double>());
    torch::autograd::backward({loss * (1.0 / mbs)});
  }
  for (auto& p : store.params()) res.grads[p.name] = p.tensor.grad().clone();
  return res;
}

void expect_matches_reference(const ppc::Plan& plan, ModelConfig c = small_config()) {
  const Result got = run_pipelined(plan, c);
  const Result ref = run_reference(plan.layout, plan.microbatches, c);
  EXPECT_EQ(got.peak, ppc::peak_inflight(plan))
      << "measured peak in-flight activations differ from the plan's";
  ASSERT_EQ(got.losses.size(), ref.losses.size());
  for (size_t i = 0; i < ref.losses.size(); ++i) {
    EXPECT_NEAR(got.losses[i], ref.losses[i], 1e-6 * ref.losses[i]) << "microbatch " << i;
    EXPECT_NEAR(got.mtp_losses[i], ref.mtp_losses[i], 1e-6 * ref.mtp_losses[i])
        << "microbatch " << i;
  }
  ASSERT_EQ(got.grads.size(), ref.grads.size());
  for (const auto& [name, g] : ref.grads) {
    ASSERT_TRUE(got.grads.count(name)) << name;
    EXPECT_TRUE(at::allclose(got.grads.at(name), g, 1e-5, 1e-8))
        << name << ": max difference " << (got.grads.at(name) - g).abs().max().item<double>();
  }
}

TEST(Executor, OneFOneBMatchesTheUnpipelinedModel) {
  expect_matches_reference(compile("Ettt|tttL", 2, "1F1B", 4));
}

TEST(Executor, InterleavedStagesPassTensorsLocally) {
  expect_matches_reference(compile("Et|tt|tt|tL", 2, "Interleaved1F1B", 4));
}

TEST(Executor, ZeroBubbleInputAndWeightBackward) {
  expect_matches_reference(compile("Ettt|tttL", 2, "ZB-H1", 4));
}

TEST(Executor, VPlacementWithZeroBubble) {
  expect_matches_reference(compile("Et|tt|tt|tL", 2, "ZBVZeroBubble", 4));
}

TEST(Executor, OverlappedForwardBackwardPairs) {
  const ppc::Plan plan = compile("Et|tt|tt|tL", 2, "DualPipeV", 4);
  bool overlap = false;
  for (const auto& order : plan.compute)
    for (const auto& a : order) overlap = overlap || a.kind == ppc::ActionKind::OverlapFB;
  ASSERT_TRUE(overlap) << "DualPipeV at pp 2 with 4 microbatches should have OVERLAP_F_B actions";
  expect_matches_reference(plan);
}

// Independent of the compiler's zero-bubble schedules: 1F1B with every B split into I, and all
// the W at the end of the step.
TEST(Executor, EveryBackwardSplitWithWeightsDeferredToTheEnd) {
  ppc::Plan plan = compile("Ettt|tttL", 2, "1F1B", 4);
  for (auto& order : plan.compute) {
    std::vector<ppc::Action> out, ws;
    for (const auto& a : order) {
      if (a.kind != ppc::ActionKind::B) {
        out.push_back(a);
        continue;
      }
      out.push_back(ppc::Action::compute(ppc::ActionKind::I, a.stage, a.microbatch));
      ws.push_back(ppc::Action::compute(ppc::ActionKind::W, a.stage, a.microbatch));
    }
    out.insert(out.end(), ws.begin(), ws.end());
    order = out;
  }
  expect_matches_reference(relower(plan));
}

// 1F1B with each steady-state "F then B" pair fused into one OVERLAP_F_B.
TEST(Executor, HandFusedOverlapActions) {
  ppc::Plan plan = compile("Ettt|tttL", 2, "1F1B", 4);
  int fused = 0;
  for (auto& order : plan.compute) {
    std::vector<ppc::Action> out;
    for (size_t i = 0; i < order.size(); ++i) {
      if (i + 1 < order.size() && order[i].kind == ppc::ActionKind::F &&
          order[i + 1].kind == ppc::ActionKind::B) {
        out.push_back(ppc::Action::overlap(order[i].stage, order[i].microbatch, ppc::ActionKind::B,
                                           order[i + 1].stage, order[i + 1].microbatch));
        ++i;
        ++fused;
        continue;
      }
      out.push_back(order[i]);
    }
    order = out;
  }
  ASSERT_GT(fused, 0);
  expect_matches_reference(relower(plan));
}

// A V placement whose order is GPipe's, projected on each rank (rank r holds stages r and 3-r).
TEST(Executor, HandWrittenVPlacement) {
  ppc::Plan plan;
  plan.layout = ppc::parse_layout("Et|tt|tt|tL");
  plan.has_model = true;
  plan.schedule = "hand-written";
  plan.microbatches = 2;
  plan.placement = ppc::make_placement(4, 2, ppc::PlacementStyle::V);
  plan.compute.assign(2, {});
  for (int s = 0; s < 4; ++s)
    for (int mb = 0; mb < 2; ++mb)
      plan.compute[static_cast<size_t>(plan.rank_of(s))].push_back(
          ppc::Action::compute(ppc::ActionKind::F, s, mb));
  for (int s = 3; s >= 0; --s)
    for (int mb = 0; mb < 2; ++mb)
      plan.compute[static_cast<size_t>(plan.rank_of(s))].push_back(
          ppc::Action::compute(ppc::ActionKind::B, s, mb));
  expect_matches_reference(relower(plan));
}

TEST(Executor, MultiTokenPredictionOnItsOwnStage) {
  expect_matches_reference(compile("Et|tt|t,m|L", 2, "Interleaved1F1B", 4));
}

TEST(Executor, MultiTokenPredictionWithTheLossAndTwoDepthsWithZeroBubble) {
  expect_matches_reference(compile("Ettt|tmmL", 2, "ZB-H1", 4));
}

TEST(Executor, MultiTokenPredictionInAVPlacement) {
  expect_matches_reference(compile("Et|tt|tm|mL", 2, "DualPipeV", 4));
}

TEST(Executor, TiedEmbeddingsAcrossRanks) {
  ModelConfig c = small_config();
  c.tie_embeddings = true;
  expect_matches_reference(compile("Ett|tt|tt,m|L", 4, "1F1B", 4), c);
}

TEST(Executor, DualPipesTwoModelCopies) {
  const ppc::Plan plan = compile("Et|tt|tt|tL", 4, "DualPipe", 8);
  ASSERT_EQ(plan.copies, 2);
  expect_matches_reference(plan);
}

TEST(Executor, EmptyStagesAtBothEnds) {
  expect_matches_reference(compile("|Ett|tt|tL|", 5, "1F1B", 4));
}

TEST(Executor, RunsAPlanWithoutTransportOnOneRank) {
  const ppc::Plan plan = compile("Ett|ttL", 1, "Interleaved1F1B", 2);
  const ModelConfig c = small_config();
  const pprt::Model builtin = pprt::builtin_model(c);
  RankModel model(builtin, plan, 0, c);
  pprt::Executor exec(plan, 0, model.stages, model.ctx, nullptr, at::Device(at::kCPU), {});
  const pprt::StepReport rep = exec.run_step(tokens(c), 0);
  const Result ref = run_reference(plan.layout, 2, c);
  ASSERT_EQ(rep.losses.size(), 2u);
  EXPECT_NEAR(rep.losses[1], ref.losses[1], 1e-6);
  EXPECT_EQ(rep.actions, plan.order()[0].size());
  EXPECT_GT(rep.compute_ns, 0);
  EXPECT_LE(rep.compute_ns + rep.wait_ns + rep.post_ns, rep.wall_ns);
}

// The plan's microbatch order (plan_order.h): the rows of data microbatch order[k] go to plan
// microbatch k, and each data microbatch's loss comes back in its own place, the loss the
// reference computes for it; a replanned plan is the loaded one with only its order changed.
TEST(Executor, FollowsThePlansMicrobatchOrder) {
  ppc::Plan plan = compile("Ett|ttL", 1, "Interleaved1F1B", 4);
  const std::vector<int> order{2, 0, 3, 1};
  const ModelConfig c = small_config();
  const at::Tensor tk = tokens(c);
  const at::Tensor in_plan = pprt::rows_in_plan_order(tk, order);
  for (int k = 0; k < 4; ++k)
    EXPECT_TRUE(at::equal(in_plan.narrow(0, 2 * k, 2), tk.narrow(0, 2 * order[k], 2)));
  EXPECT_TRUE(pprt::rows_in_plan_order(tk, {0, 1, 2, 3}).is_same(tk));

  const pprt::Model builtin = pprt::builtin_model(c);
  RankModel model(builtin, plan, 0, c);
  pprt::Executor exec(plan, 0, model.stages, model.ctx, nullptr, at::Device(at::kCPU), {});
  pprt::StepReport rep = exec.run_step(in_plan, 0);
  pprt::report_in_data_order(rep, order);
  const Result ref = run_reference(plan.layout, 4, c);
  ASSERT_EQ(rep.losses.size(), 4u);
  for (size_t mb = 0; mb < 4; ++mb)
    EXPECT_NEAR(rep.losses[mb], ref.losses[mb], 1e-6 * ref.losses[mb]) << "data microbatch " << mb;
  // The losses differ between microbatches, so a wrong mapping would show.
  EXPECT_GT(std::fabs(ref.losses[0] - ref.losses[2]), 1e-6);

  ppc::Plan ordered = plan;
  ordered.microbatch_order = order;
  pprt::check_replanned(plan, ordered);
  ordered.microbatch_order = {0, 0, 1, 2};
  EXPECT_THROW(pprt::check_replanned(plan, ordered), ppc::InternalError);
  ordered.microbatch_order = order;
  ordered.lowered[0].pop_back();
  EXPECT_THROW(pprt::check_replanned(plan, ordered), ppc::InternalError);
}

}  // namespace
