// The zero-bubble and DualPipe schedules: equality with torch.distributed.pipelining's orders
// (independent formulations of its algorithms, and small orders derived by hand from them), the
// structure of DeepSeek's DualPipe, and verification of every plan over a grid.
#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <map>
#include <optional>
#include <random>
#include <sstream>

#include "compiler/compile.h"
#include "compiler/csv.h"
#include "compiler/diagnostic.h"
#include "compiler/lower_send_recv.h"
#include "compiler/plan_json.h"
#include "compiler/verify.h"
#include "tests/compiler/plan_fixtures.h"
#include "tests/compiler/plan_text.h"

namespace ppc {
namespace {

using Orders = std::vector<std::vector<Action>>;

// `stages` generic stages on `pp` ranks.
Plan compile_generic(const std::string& schedule, int pp, int stages, int m, bool lower = true) {
  return pptest::generated_plan(schedule, pp, stages / pp, m, lower);
}

std::string compute_text(const Plan& p) {
  return pptest::orders_text(p.compute);
}

Action act(ActionKind k, int stage, int mb) {
  return Action::compute(k, stage, mb);
}

// --- Oracles: PyTorch's algorithms, step by step ------------------------------------------------
// Each follows the structure of the PyTorch generator (a timeline of steps, microbatch counters per
// stage and action type); idle (None) slots are left out, as our compute order has none.

// ScheduleInterleavedZeroBubble: _get_1f1b_rank_ops(..., enable_zero_bubble=True) with
// num_1f1b_microbatches = rank, warm-up multiply factor 1. _add_bubbles_to_actions only inserts
// None slots, so it does not change the order. nullopt where PyTorch raises.
std::optional<Orders> torch_zb1p(int pp, int n, int m) {
  const int rounds = std::max(1, m / pp);
  if (m % rounds != 0) return std::nullopt;
  const int per_round = m / rounds;
  Orders orders;
  for (int rank = 0; rank < pp; ++rank) {
    const int warmup = std::min((n - 1) * per_round + (pp - 1 - rank), m * n);
    const int fwd_bwd = m * n - warmup, cooldown = warmup;
    std::map<int, int> next_f, next_i, next_w;
    std::vector<int> backward_steps;
    int weights_done = 0;
    std::vector<Action> out;
    auto f_stage = [&](int step) { return ((step / per_round) % n) * pp + rank; };
    auto b_stage = [&](int step) {
      return (n - 1 - ((step - warmup) / per_round) % n) * pp + rank;
    };
    auto maybe_weight = [&](int step) {
      if (step - warmup < rank) return;
      const int s = b_stage(backward_steps[static_cast<size_t>(weights_done++)]);
      out.push_back(act(ActionKind::W, s, next_w[s]++));
    };
    for (int step = 0; step < warmup + fwd_bwd + cooldown; ++step) {
      if (step < warmup) {
        out.push_back(act(ActionKind::F, f_stage(step), next_f[f_stage(step)]++));
      } else if (step < warmup + fwd_bwd) {
        out.push_back(act(ActionKind::F, f_stage(step), next_f[f_stage(step)]++));
        out.push_back(act(ActionKind::I, b_stage(step), next_i[b_stage(step)]++));
        backward_steps.push_back(step);
        maybe_weight(step);
      } else {
        out.push_back(act(ActionKind::I, b_stage(step), next_i[b_stage(step)]++));
        backward_steps.push_back(step);
        maybe_weight(step);
      }
    }
    while (weights_done < static_cast<int>(backward_steps.size())) {
      const int s = b_stage(backward_steps[static_cast<size_t>(weights_done++)]);
      out.push_back(act(ActionKind::W, s, next_w[s]++));
    }
    orders.push_back(out);
  }
  return orders;
}

// ScheduleZBVZeroBubble: counters f0, f1, b0, b1 over max(2pp-1, m) microbatches, then the
// actions of microbatches >= m removed. PyTorch accepts every m.
Orders torch_zbv(int pp, int m) {
  const int n = std::max(2 * pp - 1, m);
  const int stages = 2 * pp;
  Orders orders;
  for (int rank = 0; rank < pp; ++rank) {
    const int c0 = rank, c1 = stages - 1 - rank;
    int f0 = 0, f1 = 0, b0 = 0, b1 = 0;
    std::vector<Action> ops;
    auto add = [&](ActionKind k, int s, int& counter) { ops.push_back(act(k, s, counter++)); };
    auto add_at = [&](ActionKind k, int s, int mb) { ops.push_back(act(k, s, mb)); };
    for (int i = 0; i < 2 * (pp - rank) - 1; ++i) add(ActionKind::F, c0, f0);
    for (int i = 0; i < rank; ++i) {
      add(ActionKind::F, c1, f1);
      add(ActionKind::F, c0, f0);
    }
    for (int i = 0; i < pp - rank; ++i) {
      add(ActionKind::F, c1, f1);
      add_at(ActionKind::I, c1, b1);
      add(ActionKind::W, c1, b1);
    }
    while (f1 < f0 || f0 < n) {
      if (f0 < n) add(ActionKind::F, c0, f0);
      add_at(ActionKind::I, c0, b0);
      add(ActionKind::W, c0, b0);
      add(ActionKind::F, c1, f1);
      add_at(ActionKind::I, c1, b1);
      add(ActionKind::W, c1, b1);
    }
    int w0 = b0, w1 = b1;
    for (int i = 0; i < rank; ++i) {
      add(ActionKind::I, c0, b0);
      add(ActionKind::I, c1, b1);
    }
    for (int i = 0; i < pp - rank; ++i) {
      add(ActionKind::I, c0, b0);
      add(ActionKind::W, c0, w0);
    }
    while (w1 < b1) add(ActionKind::W, c1, w1);
    while (w0 < b0) add(ActionKind::W, c0, w0);
    std::vector<Action> kept;
    for (const Action& a : ops)
      if (a.microbatch < m) kept.push_back(a);
    orders.push_back(kept);
  }
  return orders;
}

// ScheduleDualPipeV: counters per (stage, type), FULL_BACKWARD and the backward of an overlap use
// and advance the I and W counters, I queues its W, W actions pop the oldest. nullopt where
// PyTorch raises (m < 2pp).
std::optional<Orders> torch_dualpipev(int pp, int m) {
  if (m < 2 * pp) return std::nullopt;
  Orders orders;
  for (int rank = 0; rank < pp; ++rank) {
    const int s0 = rank, s1 = 2 * pp - 1 - rank;
    std::map<std::pair<int, int>, int> counter;  // (stage, 0=F 1=I 2=W) -> next microbatch
    std::deque<std::pair<int, int>> weights;
    std::vector<Action> out;
    auto full_backward_done = [&](int s) {
      ++counter[{s, 1}];
      ++counter[{s, 2}];
    };
    auto add = [&](int s, ActionKind k) {
      if (k == ActionKind::F) {
        out.push_back(act(k, s, counter[{s, 0}]++));
      } else if (k == ActionKind::B) {
        out.push_back(act(k, s, counter[{s, 1}]));
        full_backward_done(s);
      } else {  // I
        const int mb = counter[{s, 1}]++;
        out.push_back(act(k, s, mb));
        weights.push_back({s, mb});
      }
    };
    auto overlap = [&](int fs, int bs) {
      out.push_back(Action::overlap(fs, counter[{fs, 0}]++, ActionKind::B, bs, counter[{bs, 1}]));
      full_backward_done(bs);
    };
    auto weight = [&] {
      if (weights.empty()) return;
      out.push_back(act(ActionKind::W, weights.front().first, weights.front().second));
      ++counter[{weights.front().first, 2}];
      weights.pop_front();
    };
    for (int i = 0; i < (pp - rank - 1) * 2; ++i) add(s0, ActionKind::F);
    for (int i = 0; i < rank + 1; ++i) {
      add(s0, ActionKind::F);
      add(s1, ActionKind::F);
    }
    for (int i = 0; i < pp - rank - 1; ++i) {
      add(s1, ActionKind::I);
      weight();
      add(s1, ActionKind::F);
    }
    for (int i = 0; i < m - 2 * pp + rank + 1; ++i) {
      if (i == 0 && rank == pp - 1) {
        add(s0, ActionKind::F);
        add(s1, ActionKind::B);
      } else {
        overlap(s0, s1);
      }
      overlap(s1, s0);
    }
    for (int i = 0; i < pp - rank - 1; ++i) {
      add(s1, ActionKind::B);
      overlap(s1, s0);
    }
    bool zb = false;
    for (int i = 0; i < rank + 1; ++i) {
      if (i == (rank + 1) / 2 && rank % 2 == 1) zb = true;
      add(s1, zb ? ActionKind::I : ActionKind::B);
      if (i == (rank + 1) / 2 && rank % 2 == 0) zb = true;
      add(s0, zb ? ActionKind::I : ActionKind::B);
    }
    for (int i = 0; i < pp - rank - 1; ++i) {
      weight();
      add(s0, zb ? ActionKind::I : ActionKind::B);
    }
    for (int i = 0; i < rank + 1; ++i) weight();
    orders.push_back(out);
  }
  return orders;
}

// --- Equality with PyTorch ----------------------------------------------------------------------

TEST(ZeroBubble, InterleavedZeroBubbleEqualsPyTorchWhereverPyTorchAccepts) {
  int compared = 0;
  for (int pp = 1; pp <= 8; ++pp)
    for (int n = 1; n <= 4; ++n)
      for (int m = 1; m <= 40; ++m) {
        auto expected = torch_zb1p(pp, n, m);
        if (!expected) continue;
        Plan p = compile_generic("InterleavedZeroBubble", pp, pp * n, m, false);
        ASSERT_EQ(compute_text(p), pptest::orders_text(*expected))
            << "pp " << pp << " n " << n << " m " << m;
        if (n == 1) {
          ASSERT_EQ(compute_text(compile_generic("ZB-H1", pp, pp, m, false)), compute_text(p));
        }
        ++compared;
      }
  EXPECT_EQ(compared, 752);
}

TEST(ZeroBubble, ZBVEqualsPyTorchForEveryConfiguration) {
  for (int pp = 1; pp <= 8; ++pp)
    for (int m = 1; m <= 40; ++m) {
      Plan p = compile_generic("ZBVZeroBubble", pp, 2 * pp, m, false);
      ASSERT_EQ(compute_text(p), pptest::orders_text(torch_zbv(pp, m)))
          << "pp " << pp << " m " << m;
    }
}

TEST(ZeroBubble, DualPipeVEqualsPyTorchWhereverPyTorchAccepts) {
  int compared = 0;
  for (int pp = 1; pp <= 8; ++pp)
    for (int m = 1; m <= 40; ++m) {
      auto expected = torch_dualpipev(pp, m);
      if (!expected) continue;
      Plan p = compile_generic("DualPipeV", pp, 2 * pp, m, false);
      ASSERT_EQ(compute_text(p), pptest::orders_text(*expected)) << "pp " << pp << " m " << m;
      ++compared;
    }
  EXPECT_EQ(compared, 40 * 8 - (2 + 4 + 6 + 8 + 10 + 12 + 14 + 16) + 8);
}

// Small orders worked out by hand from PyTorch's algorithms.
TEST(ZeroBubble, InterleavedZeroBubbleSmallOrder) {
  // pp 2, 2 stages per rank, 4 microbatches: 2 rounds of 2. Rank 0 warms up with
  // (2-1)*2 + (2-1-0) = 3 forwards and runs each W right after its I; rank 1 holds W back by one.
  EXPECT_EQ(compute_text(compile_generic("InterleavedZeroBubble", 2, 4, 4, false)),
            "0F0 0F1 2F0 2F1 2I0 2W0 0F2 2I1 2W1 0F3 0I0 0W0 2F2 0I1 0W1 2F3 2I2 2W2 2I3 2W3 0I2 "
            "0W2 0I3 0W3\n"
            "1F0 1F1 3F0 3I0 3F1 3I1 3W0 1F2 1I0 3W1 1F3 1I1 1W0 3F2 3I2 1W1 3F3 3I3 3W2 1I2 3W3 "
            "1I3 1W2 1W3\n");
}

TEST(ZeroBubble, ZBVSmallOrder) {
  // pp 2: rank 0 holds stages 0 and 3, rank 1 stages 1 and 2.
  EXPECT_EQ(compute_text(compile_generic("ZBV", 2, 4, 4, false)),
            "0F0 0F1 0F2 3F0 3I0 3W0 3F1 3I1 3W1 0F3 0I0 0W0 3F2 3I2 3W2 0I1 0W1 3F3 3I3 3W3 0I2 "
            "0W2 0I3 0W3\n"
            "1F0 2F0 1F1 2F1 2I0 2W0 1F2 1I0 1W0 2F2 2I1 2W1 1F3 1I1 1W1 2F3 2I2 2W2 1I2 2I3 1I3 "
            "1W2 2W3 1W3\n");
}

TEST(ZeroBubble, DualPipeVSmallOrder) {
  // pp 2, 4 microbatches (the least PyTorch accepts). The last rank runs its first F/B pair of the
  // steady state as two actions.
  EXPECT_EQ(compute_text(compile_generic("DualPipeV", 2, 4, 4, false)),
            "0F0 0F1 0F2 3F0 3I0 3W0 3F1 (0F3;3B1)OVERLAP_F_B (3F2;0B0)OVERLAP_F_B 3B2 "
            "(3F3;0B1)OVERLAP_F_B 3B3 "
            "0I2 0W2 0I3 0W3\n"
            "1F0 2F0 1F1 2F1 1F2 2B0 (2F2;1B0)OVERLAP_F_B (1F3;2B1)OVERLAP_F_B "
            "(2F3;1B1)OVERLAP_F_B 2B2 1B2 2I3 "
            "1I3 2W3 1W3\n");
}

// --- Where PyTorch rejects
// ------------------------------------------------------------------------

TEST(ZeroBubble, WherePyTorchRejectsWeStillProduceVerifiedPlans) {
  int extended = 0;
  for (int pp = 1; pp <= 8; ++pp) {
    for (int n = 1; n <= 4; ++n)
      for (int m = 1; m <= 40; ++m) {
        if (torch_zb1p(pp, n, m)) continue;
        Plan p = compile_generic("InterleavedZeroBubble", pp, pp * n, m);
        VerifyReport r = verify(p);
        ASSERT_TRUE(r.ok()) << "ZB1P pp " << pp << " n " << n << " m " << m << ": "
                            << r.errors.front();
        ++extended;
      }
    for (int m = 1; m < 2 * pp; ++m) {
      Plan p = compile_generic("DualPipeV", pp, 2 * pp, m);
      VerifyReport r = verify(p);
      ASSERT_TRUE(r.ok()) << "DualPipeV pp " << pp << " m " << m << ": " << r.errors.front();
      ++extended;
    }
  }
  EXPECT_GT(extended, 300);
  // DualPipeV below 2pp microbatches: the pattern of 2pp with the missing microbatches dropped.
  EXPECT_EQ(compute_text(compile_generic("DualPipeV", 2, 4, 1, false)),
            "0F0 3F0 3I0 3W0 0B0\n"
            "1F0 2F0 2B0 1B0\n");
}

// --- DualPipe
// ---------------------------------------------------------------------------------------

TEST(DualPipe, SmallOrderFromDeepSeeksAlgorithm) {
  // pp 2, 4 microbatches: copy 0 (stages 0 on rank 0, 1 on rank 1) takes microbatches 0-1, copy 1
  // (stage 2 = layout stage 0 on rank 1, stage 3 = layout stage 1 on rank 0) takes 2-3.
  Plan p = compile_generic("DualPipe", 2, 2, 4, false);
  EXPECT_EQ(p.copies, 2);
  EXPECT_EQ(p.num_stages(), 4);
  EXPECT_EQ(p.placement.rank_stages, (std::vector<std::vector<int>>{{0, 3}, {1, 2}}));
  EXPECT_EQ(compute_text(p),
            "0F0 3F2 0F1 3B2 (3F3;0B0)OVERLAP_F_B 3B3 0I1 0W1\n"
            "2F2 1F0 2F3 1B0 (1F1;2B2)OVERLAP_F_B 1B1 2I3 2W3\n");
}

TEST(DualPipe, SteadyStateFollowsTheDualPipeIndexRelations) {
  // In the steady state, rank i of the first half runs (F0_x, B1_{x-p/2}) overlapped, then
  // (F1_{x-p/2+1+i}, B0_{x-p+1+i}) overlapped, where F0/B0 are its copy-0 stage and F1/B1 its
  // copy-1 stage and indices count each copy's microbatches; the second half mirrors it.
  for (int pp : {2, 4, 6, 8}) {
    const int m = 6 * pp, half_m = m / 2;
    Plan p = compile_generic("DualPipe", pp, pp, m, false);
    for (int r = 0; r < pp; ++r) {
      const int i = std::min(r, pp - 1 - r);
      const int first = r < pp / 2 ? r : 2 * pp - 1 - r;  // the stage of phase 0
      int pairs = 0;
      const auto& order = p.compute[static_cast<size_t>(r)];
      for (size_t k = 0; k + 1 < order.size(); ++k) {
        const Action& a = order[k];
        const Action& b = order[k + 1];
        if (a.kind != ActionKind::OverlapFB || b.kind != ActionKind::OverlapFB || a.stage != first)
          continue;
        auto chunk = [&](int stage, int mb) {
          return p.copy_of_stage(stage) == 0 ? mb : mb - half_m;
        };
        const int x = chunk(a.stage, a.microbatch);
        ASSERT_EQ(chunk(a.stage2, a.microbatch2), x - pp / 2) << "rank " << r;
        ASSERT_EQ(chunk(b.stage, b.microbatch), x - pp / 2 + 1 + i) << "rank " << r;
        ASSERT_EQ(chunk(b.stage2, b.microbatch2), x - pp + 1 + i) << "rank " << r;
        ++pairs;
      }
      EXPECT_EQ(pairs, half_m - pp + i + 1 - (i == pp / 2 - 1 ? 1 : 0))
          << "pp " << pp << " rank " << r;
    }
  }
}

TEST(DualPipe, NeedsEvenPpAndOneStagePerRank) {
  try {
    compile_generic("DualPipe", 3, 3, 6);
    FAIL();
  } catch (const UserError& e) {
    EXPECT_EQ(e.format(),
              "--pp: DualPipe needs an even number of ranks (they pair up from both ends), got 3");
  }
  try {
    compile_generic("DualPipe", 2, 4, 6);
    FAIL();
  } catch (const UserError& e) {
    EXPECT_EQ(e.message(),
              "DualPipe runs one stage per rank, but 4 stages on --pp 2 give 2 per rank; use "
              "Interleaved1F1B or "
              "LoopedBFS, or --pp 4");
  }
}

TEST(DualPipe, NeedsAMicrobatchPerDirection) {
  try {
    compile_generic("DualPipe", 2, 2, 1);
    FAIL();
  } catch (const UserError& e) {
    EXPECT_EQ(e.format(),
              "--microbatches: DualPipe needs at least 2 microbatches (one per direction), got 1");
  }
}

TEST(DualPipe, OddAndSmallMicrobatchCountsSplitBetweenTheCopies) {
  // 5 microbatches: copy 0 takes 0-2 from rank 0, copy 1 takes 3-4 from rank 3.
  Plan p = compile_generic("DualPipe", 4, 4, 5);
  ASSERT_TRUE(verify(p).ok());
  for (int mb = 0; mb < 5; ++mb) EXPECT_EQ(p.copy_of_microbatch(mb), mb < 3 ? 0 : 1);
  EXPECT_EQ(p.compute[0].front(), act(ActionKind::F, 0, 0));
  EXPECT_EQ(p.compute[3].front(), act(ActionKind::F, 4, 3));  // plan stage 4 = copy 1's first stage
}

// --- Every plan verifies ------------------------------------------------------------------------

TEST(DualPipe, CsvAndJsonRoundTripsKeepTheTwoCopies) {
  // PyTorch's CSV has no notion of model copies: the importer recognises them on V placement when
  // no microbatch crosses from one half of the stages to the other.
  for (int m : {2, 3, 8}) {
    Plan p = compile_generic("DualPipe", 4, 4, m);
    std::ostringstream csv;
    emit_csv(p, csv, false);
    CsvImportOptions io;
    io.input_name = "dualpipe.csv";
    Plan back = read_csv(csv.str(), io);
    EXPECT_EQ(back.copies, 2) << m;
    EXPECT_EQ(back.layout.num_stages(), 4);
    EXPECT_EQ(back.lowered, p.lowered);
    EXPECT_TRUE(verify(back).ok());
  }
  // The JSON plan carries the copies.
  Plan p = compile_generic("DualPipe", 4, 4, 6);
  std::ostringstream json;
  emit_json(p, verify(p), json);
  Plan back = read_plan_json(json.str(), "dualpipe.json");
  EXPECT_EQ(back.copies, 2);
  EXPECT_EQ(back.placement, p.placement);
  EXPECT_EQ(back.compute, p.compute);
  EXPECT_EQ(back.lowered, p.lowered);
  EXPECT_TRUE(verify(back).ok());
  std::ostringstream zbv;
  emit_csv(compile_generic("ZBV", 4, 8, 8), zbv, false);
  CsvImportOptions io;
  io.input_name = "zbv.csv";
  EXPECT_EQ(read_csv(zbv.str(), io).copies, 1);
}

TEST(ZeroBubble, EveryPlanOfEveryNewScheduleVerifies) {
  int plans = 0;
  for (const char* s :
       {"ZB-H1", "ZB-H2", "InterleavedZeroBubble", "ZBVZeroBubble", "DualPipeV", "DualPipe"}) {
    const ScheduleInfo* info = find_schedule(s);
    for (int pp = 1; pp <= 8; ++pp)
      for (int vpp = 1; vpp <= 3; ++vpp) {
        if (info->vpp_rule == VppRule::One && vpp != 1) continue;
        if (info->vpp_rule == VppRule::Two && vpp != 2) continue;
        if (info->copies == 2 && pp % 2 != 0) continue;
        for (int m = info->copies; m <= 24; ++m) {
          Plan p = compile_generic(s, pp, pp * vpp, m);
          VerifyReport r = verify(p);
          ASSERT_TRUE(r.ok()) << s << " pp " << pp << " vpp " << vpp << " m " << m << ": "
                              << r.errors.front();
          ASSERT_TRUE(r.checked_lowered);
          ++plans;
        }
      }
  }
  EXPECT_EQ(plans, 24 * (8 + 8 + 8 * 3 + 8 + 8) + 23 * 4);
}

TEST(ZeroBubble, LoweringIsDeadlockFreeForAnyCosts) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> dur(0.1, 5.0);
  for (const char* s :
       {"ZB-H1", "ZB-H2", "InterleavedZeroBubble", "ZBVZeroBubble", "DualPipeV", "DualPipe"})
    for (int trial = 0; trial < 20; ++trial) {
      const ScheduleInfo* info = find_schedule(s);
      const int pp = info->copies == 2 ? 2 * (1 + trial % 4) : 2 + trial % 5;
      const int vpp = info->vpp_rule == VppRule::One   ? 1
                      : info->vpp_rule == VppRule::Two ? 2
                                                       : 1 + trial % 3;
      const int m = 2 + (trial * 7) % 19;
      Plan p = compile_generic(s, pp, pp * vpp, m, false);
      std::map<std::pair<int, int>, double> table;
      LoweringCosts costs;
      costs.compute = [&](const Action& a, int) {
        auto key = std::make_pair(a.stage, static_cast<int>(a.kind));
        if (!table.count(key)) table[key] = dur(rng);
        return table[key];
      };
      costs.transfer = [&](const Action&) { return 0.3; };
      VerifyReport r = verify(lower_send_recv(p, costs));
      ASSERT_TRUE(r.ok()) << s << " trial " << trial << ": " << r.errors.front();
    }
}

TEST(ZeroBubble, NamesAndAliases) {
  EXPECT_EQ(find_schedule("zb-h1")->name, "ZB-H1");
  EXPECT_EQ(find_schedule("ZBH2")->name, "ZB-H2");
  EXPECT_EQ(find_schedule("ScheduleInterleavedZeroBubble")->name, "InterleavedZeroBubble");
  EXPECT_EQ(find_schedule("zb1p")->name, "InterleavedZeroBubble");
  EXPECT_EQ(find_schedule("ScheduleZBVZeroBubble")->name, "ZBVZeroBubble");
  EXPECT_EQ(find_schedule("zbv")->name, "ZBVZeroBubble");
  EXPECT_EQ(find_schedule("ScheduleDualPipeV")->name, "DualPipeV");
  EXPECT_EQ(find_schedule("dualpipe")->name, "DualPipe");
}

}  // namespace
}  // namespace ppc
