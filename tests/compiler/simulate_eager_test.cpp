// The eager message model (MessageModel::Eager, what pprun's Gloo transport does): a batch is
// posted without blocking, a message arrives its transfer time after both ends were posted, and
// only the compute that reads it waits. Checked against the dataflow reference (the compute
// orders with sends that never block), against the rendezvous model it relaxes, and by hand.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "compiler/compile.h"
#include "compiler/cost_model.h"
#include "compiler/diagnostic.h"
#include "compiler/lower_for_model.h"
#include "compiler/lower_send_recv.h"
#include "compiler/simulate.h"
#include "compiler/verify_and_lower.h"
#include "tests/compiler/dataflow_reference.h"

namespace ppc {
namespace {

struct Named {
  const char* schedule;
  int stages_per_rank;
};

// Every named schedule on generic stages (DualPipe: one stage per rank, two copies).
const std::vector<Named> kSchedules = {
    {"GPipe", 1},     {"1F1B", 1},
    {"ZB-H1", 1},     {"ZB-H2", 1},
    {"DualPipe", 1},  {"Interleaved1F1B", 2},
    {"LoopedBFS", 2}, {"ZBVZeroBubble", 2},
    {"DualPipeV", 2}, {"InterleavedZeroBubble", 2},
};

Plan compute_order(const std::string& schedule, int pp, int stages, int m) {
  CompileOptions o;
  o.layout = generic_layout(stages);
  o.pp = pp;
  o.schedule = schedule;
  o.microbatches = m;
  return compile(o);
}

CostModel flags(double f, double i, double w, double latency = 0, double overlap = 0) {
  CostFlags fl;
  fl.f = f;
  fl.i = i;
  fl.w = w;
  fl.latency = latency;
  fl.overlap = overlap;
  return cost_model_from_flags(fl);
}

CostModel eager(CostModel m) {
  m.messages = MessageModel::Eager;
  return m;
}

// With free messages and every SEND posted at once, no rank waits for anything but its inputs:
// the eager model's makespan is the dataflow makespan, for every schedule, whatever the costs.
TEST(EagerMessages, FreeMessagesGiveTheDataflowMakespan) {
  int checked = 0;
  for (const CostModel& cost : {flags(1, 1, 1), flags(1, 1.2, 0.8), flags(1, 2.5, 0.5, 0, 0.6)})
    for (const Named& n : kSchedules)
      for (int pp : {2, 4})
        for (int m : {pp, 2 * pp, 3 * pp + 1}) {
          Plan plan;
          try {
            plan = compute_order(n.schedule, pp, pp * n.stages_per_rank, m);
          } catch (const UserError&) {
            continue;  // not a configuration this schedule runs
          }
          const Plan lowered = lower_send_recv(plan);  // every SEND posted at once
          const Simulation s = simulate(lowered, eager(cost));
          EXPECT_NEAR(s.makespan, dataflow_makespan(plan, cost), 1e-9)
              << n.schedule << " pp " << pp << " m " << m;
          ++checked;
        }
  EXPECT_GT(checked, 150);
}

// The eager model relaxes the rendezvous one: no plan takes longer under it, its memory peaks
// (which follow from each rank's order) are the same, and so is the work.
TEST(EagerMessages, NeverLongerThanTheRendezvousModel) {
  for (const CostModel& cost : {flags(1, 1, 1, 0.1), flags(1, 1.2, 0.8, 0.3)})
    for (const Named& n : kSchedules)
      for (int pp : {2, 4}) {
        Plan plan;
        try {
          plan = compute_order(n.schedule, pp, pp * n.stages_per_rank, 3 * pp);
        } catch (const UserError&) {
          continue;
        }
        for (bool defer : {false, true}) {
          LoweringCosts lc = lowering_costs(plan, cost);
          lc.defer_sends = defer;
          const Plan lowered = lower_send_recv(plan, lc);
          const Simulation r = simulate(lowered, cost), e = simulate(lowered, eager(cost));
          EXPECT_LE(e.makespan, r.makespan + 1e-9) << n.schedule << " pp " << pp;
          EXPECT_EQ(e.peak_memory, r.peak_memory) << n.schedule << " pp " << pp;
          for (size_t k = 0; k < r.busy.size(); ++k) EXPECT_NEAR(e.busy[k], r.busy[k], 1e-9);
          EXPECT_EQ(e.messages, r.messages);
        }
      }
}

// Two ranks, one stage each, 1F1B with one microbatch: F0 on rank 0 (1), the message (0.5), F0
// and B0 on rank 1 (1 + 2), the gradient (0.5), B0 on rank 0 (2) = 7 under either model. With
// two microbatches the models part: rank 0 posts SEND_F1 after F1 and goes on to wait for the
// gradient; under the rendezvous model its batch [SEND_F1 RECV_B0]... waits for rank 1 to reach
// the matching batch, under the eager one nothing waits but B0 for its gradient.
TEST(EagerMessages, AHandWorkedCase) {
  const CostModel cost = flags(1, 1, 1, 0.5);  // B = I + W = 2
  const Plan one = lower_send_recv(compute_order("1F1B", 2, 2, 1));
  EXPECT_DOUBLE_EQ(simulate(one, eager(cost)).makespan, 7);
  EXPECT_DOUBLE_EQ(simulate(one, cost).makespan, 7);
  // m = 2, rank 0: F0 F1 B0 B1; rank 1: F0 B0 F1 B1. Eager: rank 0 F0 [0,1] F1 [1,2]; rank 1
  // F0 [1.5,2.5] B0 [2.5,4.5] F1 [4.5,5.5] (F1's activation arrived at 2.5) B1 [5.5,7.5]; rank 0
  // B0 [5,7] (gradient at 4.5 + 0.5) B1 [8,10] (gradient at 7.5 + 0.5).
  const Plan two = lower_send_recv(compute_order("1F1B", 2, 2, 2));
  const Simulation e = simulate(two, eager(cost));
  EXPECT_DOUBLE_EQ(e.makespan, 10);
}

// The time a rank spends posting each SEND and RECV holds it up (pprun's end-of-run check
// charges what the posts took), and each rank may begin late.
TEST(EagerMessages, PostingAndLateStarts) {
  const CostModel cost = flags(1, 1, 1);
  const Plan plan = lower_send_recv(compute_order("1F1B", 2, 2, 1));
  SimulationRun run(plan, cost, false);
  ExecCosts costs = run.costs();
  // Rank 0: F0, SEND_F0, RECV_B0, B0; rank 1: RECV_F0, F0, B0, SEND_B0.
  EagerOptions o;
  o.post = {0.25};
  const Execution posted = execute_eager(plan, costs, true, o);
  ASSERT_TRUE(posted.finished()) << posted.failure();
  // F0 [0,1], posts to 1.5 (two ops), the activation arrives at 1.25; rank 1 posted its RECV
  // by 0.25: F0 [1.25,2.25] B0 [2.25,4.25], SEND_B0 posted by 4.5; rank 0's B0 [4.5,6.5].
  EXPECT_DOUBLE_EQ(posted.end[0], 6.5);
  EXPECT_DOUBLE_EQ(posted.end[1], 4.5);
  // The cost model's "post" is the same charge, on every rank.
  CostModel with_post = eager(cost);
  with_post.post = 0.25;
  EXPECT_DOUBLE_EQ(simulate(plan, with_post).makespan, 6.5);
  o.post.clear();
  o.start = {0, 3};  // rank 1 begins at 3
  const Execution late = execute_eager(plan, costs, true, o);
  EXPECT_DOUBLE_EQ(late.end[1], 6);  // F0 [3,4] B0 [4,6]
  EXPECT_DOUBLE_EQ(late.end[0], 8);  // B0 [6,8]
}

// A cost file selects the model: "transport": "gloo" (what pprun --profile writes on Gloo) is
// eager, "nccl" and no field the rendezvous model; anything else is an error naming the field.
TEST(EagerMessages, TheCostFileSelectsTheModel) {
  const std::string layers = R"("layers": {"t": {"f": 1, "i": 1, "w": 1}})";
  EXPECT_EQ(parse_cost_model("{" + layers + "}", "c.json").messages, MessageModel::Rendezvous);
  EXPECT_EQ(parse_cost_model("{" + layers + R"(, "transport": "nccl"})", "c.json").messages,
            MessageModel::Rendezvous);
  const CostModel g = parse_cost_model("{" + layers + R"(, "transport": "gloo"})", "c.json");
  EXPECT_EQ(g.messages, MessageModel::Eager);
  EXPECT_NE(describe(g).find("eager sends"), std::string::npos);
  EXPECT_EQ(
      parse_cost_model("{" + layers + R"(, "transport": "gloo", "post": 0.25})", "c.json").post,
      0.25);
  try {  // a posting time only means something under the eager model
    parse_cost_model("{" + layers + R"(, "post": 0.25})", "c.json");
    FAIL() << "no error";
  } catch (const UserError& e) {
    EXPECT_NE(e.message().find("post: a posting time needs"), std::string::npos) << e.message();
  }
  try {
    parse_cost_model("{" + layers + R"(, "transport": "mpi"})", "c.json");
    FAIL() << "no error";
  } catch (const UserError& e) {
    EXPECT_NE(e.message().find("transport"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("gloo"), std::string::npos) << e.message();
  }
}

// verify_and_lower's simulation (the verifier's run serves it under the rendezvous model) equals
// simulate()'s under the eager model too, timeline and all; lowering for an eager model keeps
// the shorter of its two placements under that model.
TEST(EagerMessages, VerifyAndLowerSimulatesUnderTheModel) {
  const CostModel cost = eager(flags(1, 1.2, 0.8, 0.2));
  for (const Named& n : kSchedules) {
    Plan plan;
    try {
      plan = compute_order(n.schedule, 4, 4 * n.stages_per_rank, 8);
    } catch (const UserError&) {
      continue;
    }
    const Plan lowered = lower_for_model(plan, cost);
    const Simulation direct = simulate(lowered, cost);
    for (SimulationNeed need : {SimulationNeed::Summary, SimulationNeed::Timeline}) {
      const VerifiedPlan v = verify_and_lower(plan, cost, need);
      ASSERT_TRUE(v.report.ok()) << n.schedule;
      ASSERT_TRUE(v.sim.has_value()) << n.schedule;
      EXPECT_DOUBLE_EQ(v.sim->makespan, direct.makespan) << n.schedule;
      EXPECT_EQ(v.sim->peak_memory, direct.peak_memory) << n.schedule;
      if (need == SimulationNeed::Timeline) {
        EXPECT_EQ(v.sim->memory.size(), direct.memory.size()) << n.schedule;
        ASSERT_EQ(v.sim->times.size(), direct.times.size());
        for (size_t r = 0; r < direct.times.size(); ++r)
          for (size_t i = 0; i < direct.times[r].size(); ++i)
            EXPECT_DOUBLE_EQ(v.sim->times[r][i].end, direct.times[r][i].end);
      }
    }
    LoweringCosts held = lowering_costs(plan, cost);
    held.defer_sends = true;
    EXPECT_LE(direct.makespan, simulate(lower_send_recv(plan, held), cost).makespan + 1e-9);
    EXPECT_LE(direct.makespan,
              simulate(lower_send_recv(plan, lowering_costs(plan, cost)), cost).makespan + 1e-9);
  }
}

}  // namespace
}  // namespace ppc
