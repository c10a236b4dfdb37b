// The simulator against the published formulas, under equal unit costs (F = I = W = 1, B = 2 per
// stage, no communication cost) unless a test says otherwise:
//   1F1B            bubble (p-1)(F+B)                 -> (p-1)/(m+p-1) of the makespan
//   Interleaved1F1B the same divided by v             -> (p-1)/(vm+p-1)
//   ZB-H1 / ZB1P    (p-1)(F+B-2W)                     -> p-1: a third of 1F1B's
//   ZB-H2, ZBV      (p-1)(F+I-2W) = 0 (steady state)  -> zero once m >= 2p-1
//   DualPipe        (p/2-1)(F&B+B-3W)   (README)      -> on the most idle rank
//   DualPipeV       (pp/2-1)(F&B+B-3W), pp = 2p stages
// and the peak in-flight activations: 1F1B p, ZB-H2 2p-1, DualPipe p+1, DualPipeV 2p+1, ...
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "compiler/compile.h"
#include "compiler/cost_model.h"
#include "compiler/lower_for_model.h"
#include "compiler/lower_send_recv.h"
#include "compiler/simulate.h"
#include "compiler/verify.h"
#include "tests/compiler/dataflow_reference.h"

namespace ppc {
namespace {

Plan compile_generic(const std::string& schedule, int pp, int stages, int m,
                     const CostModel& cost = {}) {
  CompileOptions o;
  o.layout = generic_layout(stages);
  o.pp = pp;
  o.schedule = schedule;
  o.microbatches = m;
  Plan plan = compile(o);
  return lower_send_recv(plan, lowering_costs(plan, cost));
}

Simulation sim_of(const std::string& schedule, int pp, int stages, int m,
                  const CostModel& cost = {}) {
  return simulate(compile_generic(schedule, pp, stages, m, cost), cost);
}

double max_idle(const Simulation& s) {
  double idle = 0;
  for (double b : s.busy) idle = std::max(idle, s.makespan - b);
  return idle;
}

CostModel costs(double f, double i, double w, double overlap = 0) {
  CostFlags fl;
  fl.f = f;
  fl.i = i;
  fl.w = w;
  fl.overlap = overlap;
  return cost_model_from_flags(fl);
}

TEST(Theory, OneFOneB) {
  for (int p = 1; p <= 8; ++p)
    for (int m = p; m <= 4 * p; ++m) {
      const Simulation s = sim_of("1F1B", p, p, m);
      EXPECT_DOUBLE_EQ(s.makespan - 3.0 * m, 3.0 * (p - 1)) << "p " << p << " m " << m;
      EXPECT_NEAR(s.bubble, double(p - 1) / (m + p - 1), 1e-12);
      EXPECT_NEAR(s.steady_bubble, s.bubble, 1e-12);  // rank 0 spans the whole step
    }
}

TEST(Theory, InterleavedOneFOneBDividesTheBubbleByV) {
  // (p-1)/(vm+p-1): exact under the deadlock model for p <= 4 and, at any p, when sends never
  // block. At p = 5 and p = 8 with two or more rounds of microbatches, the deadlock model's
  // rendezvous (a send waits for its receiver to finish the compute it is in) adds 2 to 5 units.
  for (int p = 1; p <= 8; ++p)
    for (int v = 1; v <= 4; ++v)
      for (int m = p; m <= 4 * p; m += p) {
        const Plan plan = compile_generic("Interleaved1F1B", p, p * v, m);
        const Simulation s = simulate(plan, CostModel{});
        const double ideal = 3.0 * v * m + 3.0 * (p - 1);
        EXPECT_DOUBLE_EQ(dataflow_makespan(plan, CostModel{}), ideal)
            << "p " << p << " v " << v << " m " << m;
        if (p <= 4) {
          EXPECT_NEAR(s.bubble, double(p - 1) / (v * m + p - 1), 1e-12)
              << "p " << p << " v " << v << " m " << m;
        } else {
          EXPECT_GE(s.makespan, ideal);
          EXPECT_LE(s.makespan, ideal + 5);
        }
      }
}

TEST(Theory, ZBH1IsAThirdOfOneFOneB) {
  for (int p = 1; p <= 8; ++p)
    for (int m = p; m <= 4 * p; ++m) {
      const Simulation zb = sim_of("ZB-H1", p, p, m), ofob = sim_of("1F1B", p, p, m);
      const double zb_idle = zb.makespan - 3.0 * m, ofob_idle = ofob.makespan - 3.0 * m;
      EXPECT_DOUBLE_EQ(zb_idle, p - 1.0) << "p " << p << " m " << m;  // (p-1)(F+B-2W)
      EXPECT_DOUBLE_EQ(3 * zb_idle, ofob_idle);
      EXPECT_EQ(verify(compile_generic("ZB-H1", p, p, m)).peak_inflight[0], p);  // 1F1B's memory
    }
}

TEST(Theory, InterleavedZeroBubbleKeepsZBH1sBubbleOverVTimesTheWork) {
  for (int p = 1; p <= 8; ++p)
    for (int v = 2; v <= 3; ++v)
      for (int m = p; m <= 3 * p; ++m) {
        const Simulation s = sim_of("InterleavedZeroBubble", p, p * v, m);
        EXPECT_DOUBLE_EQ(s.makespan, 3.0 * v * m + (p - 1))
            << "p " << p << " v " << v << " m " << m;
      }
}

TEST(Theory, ZBH2AndZBVHaveNoBubbleInSteadyStateOnceMIsAtLeast2pMinus1) {
  for (int p = 1; p <= 8; ++p)
    for (int m = 1; m <= 4 * p; ++m) {
      const Simulation h2 = sim_of("ZB-H2", p, p, m), v = sim_of("ZBVZeroBubble", p, 2 * p, m);
      if (m >= 2 * p - 1) {
        EXPECT_NEAR(h2.steady_bubble, 0, 1e-12) << "ZB-H2 p " << p << " m " << m;
        EXPECT_NEAR(v.steady_bubble, 0, 1e-12) << "ZBV p " << p << " m " << m;
        // One step alone still pays the pipeline's fill: the last rank starts p-1 forwards late.
        EXPECT_DOUBLE_EQ(h2.makespan, 3.0 * m + (p - 1));
        EXPECT_DOUBLE_EQ(v.makespan, 6.0 * m + (p - 1));
      } else {
        EXPECT_GT(h2.steady_bubble, 0) << "ZB-H2 p " << p << " m " << m;
      }
      const VerifyReport r = verify(compile_generic("ZB-H2", p, p, m));
      EXPECT_EQ(r.peak_inflight[0], std::min(m, 2 * p - 1)) << "p " << p << " m " << m;
    }
}

TEST(Theory, DualPipeMatchesTheReadmeTableOnItsMostIdleRank) {
  // (PP/2-1)(F&B+B-3W) with F&B = max(F,B) + (1-overlap) min(F,B); activation PP+1 microbatches.
  for (double overlap : {0.0, 0.5, 1.0}) {
    const CostModel cost = costs(1, 1, 1, overlap);
    const double fb = 2 + (1 - overlap) * 1;
    for (int p = 2; p <= 16; p += 2)
      for (int m = 2 * p; m <= 4 * p; m += 2) {
        const Simulation s = sim_of("DualPipe", p, p, m, cost);
        EXPECT_NEAR(max_idle(s), (p / 2 - 1) * (fb + 2 - 3), 1e-9)
            << "p " << p << " m " << m << " overlap " << overlap;
      }
  }
  for (int p = 2; p <= 16; p += 2) {
    const Plan plan = compile_generic("DualPipe", p, p, 4 * p);
    const VerifyReport r = verify(plan);
    EXPECT_EQ(*std::max_element(r.peak_inflight.begin(), r.peak_inflight.end()), p + 1)
        << "p " << p;
  }
}

TEST(Theory, DualPipeVMatchesTheReadmeTable) {
  // PP = 2p stages on p ranks: (p-1)(F&B+B-3W); activation PP+1 = 2p+1 stage-microbatches.
  for (double overlap : {0.0, 0.5, 1.0}) {
    const CostModel cost = costs(1, 1, 1, overlap);
    const double fb = 2 + (1 - overlap) * 1;
    for (int p = 1; p <= 8; ++p)
      for (int m = 2 * p; m <= 4 * p; ++m) {
        const Simulation s = sim_of("DualPipeV", p, 2 * p, m, cost);
        EXPECT_NEAR(max_idle(s), (p - 1) * (fb + 2 - 3), 1e-9)
            << "p " << p << " m " << m << " overlap " << overlap;
      }
  }
  for (int p = 1; p <= 8; ++p) {
    const VerifyReport r = verify(compile_generic("DualPipeV", p, 2 * p, 4 * p));
    EXPECT_EQ(r.peak_inflight[0], 2 * p + 1) << "p " << p;
  }
}

TEST(Theory, PeakInFlightOfTheClassicSchedules) {
  for (int p = 1; p <= 8; ++p) {
    EXPECT_EQ(verify(compile_generic("1F1B", p, p, 3 * p)).peak_inflight[0], p);
    EXPECT_EQ(verify(compile_generic("GPipe", p, p, 3 * p)).peak_inflight[0], 3 * p);
    // Interleaved, m = 2p (rounds of p): (v-1)p + 2(p-1) warm-up forwards, plus the first steady F.
    for (int v = 2; v <= 3; ++v)
      EXPECT_EQ(verify(compile_generic("Interleaved1F1B", p, p * v, 2 * p)).peak_inflight[0],
                std::min((v - 1) * p + 2 * (p - 1) + 1, 2 * p * v));
  }
}

TEST(Theory, ZBH1FormulaHoldsForUnequalCostsWhenSendsNeverBlock) {
  // (p-1)(F+B-2W) = (p-1)(F+I-W) for W no larger than F and I. Under the deadlock model the
  // rendezvous of each transfer costs more once F, I and W differ.
  for (auto [f, i, w] :
       {std::tuple{1.0, 1.5, 0.5}, {1.0, 1.2, 0.8}, {2.0, 1.0, 1.0}, {1.5, 2.0, 1.0}})
    for (int p = 2; p <= 8; ++p) {
      const int m = 4 * p;
      const CostModel cost = costs(f, i, w);
      const Plan plan = compile_generic("ZB-H1", p, p, m, cost);
      const double busy = m * (f + i + w);
      EXPECT_NEAR(dataflow_makespan(plan, cost) - busy, (p - 1) * (f + i - w), 1e-9)
          << f << " " << i << " " << w;
      EXPECT_GE(simulate(plan, cost).makespan - busy, (p - 1) * (f + i - w) - 1e-9);
    }
}

TEST(Theory, ActivationMemoryFollowsTheInFlightMicrobatches) {
  // Unit costs: one unit per stage-microbatch from its F to its B or I.
  for (const char* s : {"1F1B", "ZB-H1", "ZB-H2", "InterleavedZeroBubble", "DualPipeV"}) {
    const int p = 4,
              stages = std::string(s) == "DualPipeV" || std::string(s) == "InterleavedZeroBubble"
                           ? 8
                           : 4;
    const Plan plan = compile_generic(s, p, stages, 16);
    const Simulation sim = simulate(plan, CostModel{});
    const VerifyReport r = verify(plan);
    for (int rank = 0; rank < p; ++rank)
      EXPECT_DOUBLE_EQ(sim.peak_memory[rank], r.peak_inflight[rank]) << s;
    for (const auto& points : sim.memory) EXPECT_DOUBLE_EQ(points.back().value, 0) << s;
  }
  // Keeping part of the activation until W raises the peak above the in-flight count where W
  // lags its I: on ZB-H2's last rank, by 2(p-1) slots.
  CostModel keep = costs(1, 1, 1);
  keep.weight_grad_memory = 0.5;
  const Plan plan = compile_generic("ZB-H2", 4, 4, 16, keep);
  const Simulation sim = simulate(plan, keep);
  EXPECT_DOUBLE_EQ(sim.peak_memory[0], verify(plan).peak_inflight[0]);  // W right after I
  EXPECT_GT(sim.peak_memory[3], verify(plan).peak_inflight[3]);
  EXPECT_DOUBLE_EQ(sim.memory[3].back().value, 0);
}

TEST(Theory, DualPipeHoldsTwoCopiesOfTheParameters) {
  CostFlags fl;
  fl.params = 10;
  const CostModel cost = cost_model_from_flags(fl);
  const Simulation dual = sim_of("DualPipe", 4, 4, 8, cost), ofob = sim_of("1F1B", 4, 4, 8, cost);
  for (int r = 0; r < 4; ++r) {
    EXPECT_DOUBLE_EQ(ofob.param_memory[r], 10);
    EXPECT_DOUBLE_EQ(dual.param_memory[r], 20);
  }
}

}  // namespace
}  // namespace ppc
