// The table of action kinds (action_kinds.h) and what the passes read from it: the names the
// notation parses, the predicates, each SEND's RECV, and the dependencies of every kind, against
// the rules written out by hand (dependencies.h's comment).
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "compiler/action.h"
#include "compiler/dependencies.h"
#include "compiler/plan.h"
#include "compiler/transfers.h"

namespace ppc {
namespace {

TEST(ActionKinds, EveryKindHasOneRowAndANameTheNotationReadsBack) {
  std::set<std::string> names;
  std::set<char> letters;
  for (int i = 0; i < kNumActionKinds; ++i) {
    const KindInfo& k = kKinds[i];
    EXPECT_EQ(static_cast<int>(k.kind), i);
    EXPECT_TRUE(names.insert(k.name).second) << k.name;
    EXPECT_EQ(kind_name(k.kind), std::string(k.name));
    if (is_compute(k.kind)) {
      EXPECT_TRUE(letters.insert(k.letter).second) << k.letter;
    }
    if (k.role == Role::Compound) continue;
    std::string err;
    const auto a = parse_action(fmt::format("12{}34", k.name), &err);
    ASSERT_TRUE(a) << k.name << ": " << err;
    EXPECT_EQ(a->kind, k.kind);
    EXPECT_EQ(a->stage, 12);
    EXPECT_EQ(a->microbatch, 34);
  }
  EXPECT_EQ(kNumPlainKinds, kNumActionKinds - 1);  // OVERLAP_F_B is the one compound kind
}

TEST(ActionKinds, PredicatesFollowTheRoles) {
  for (const KindInfo& k : kKinds) {
    SCOPED_TRACE(k.name);
    EXPECT_EQ(is_send(k.kind), k.role == Role::Send);
    EXPECT_EQ(is_recv(k.kind), k.role == Role::Recv);
    EXPECT_EQ(is_comm(k.kind), k.role == Role::Send || k.role == Role::Recv);
    EXPECT_EQ(is_compute(k.kind), !is_comm(k.kind));
    EXPECT_EQ(is_compound(k.kind), k.role == Role::Compound);
    EXPECT_EQ(event_of(k.kind), k.event);
    EXPECT_EQ(after_of(k.kind), k.after);
    EXPECT_EQ(input_of(k.kind), k.input);
    EXPECT_EQ(flow_of(k.kind), k.flow);
    EXPECT_EQ(unit_cost_of(k.kind), k.unit_cost);
  }
  using K = ActionKind;
  for (K k : {K::B, K::I}) EXPECT_TRUE(is_backward_input(k));
  for (K k : {K::F, K::W, K::SendB, K::OverlapFB}) EXPECT_FALSE(is_backward_input(k));
  // A SEND's peer is where its flow goes, a RECV's where it comes from.
  for (K k : {K::SendF, K::RecvB}) EXPECT_TRUE(peer_is_next(k));
  for (K k : {K::RecvF, K::SendB, K::F, K::B}) EXPECT_FALSE(peer_is_next(k));
  // In flight from F to its B or I; W and the rest change nothing.
  EXPECT_EQ(inflight_change(K::F), 1);
  EXPECT_EQ(inflight_change(K::B), -1);
  EXPECT_EQ(inflight_change(K::I), -1);
  for (K k : {K::W, K::SendF, K::RecvB, K::OverlapFB}) EXPECT_EQ(inflight_change(k), 0);
}

TEST(ActionKinds, EachSendMatchesTheReceiveOfItsFlow) {
  for (const KindInfo& k : kKinds) {
    SCOPED_TRACE(k.name);
    if (!is_comm(k.kind)) {
      EXPECT_EQ(match_of(k.kind), k.kind);
      continue;
    }
    EXPECT_NE(match_of(k.kind), k.kind);
    EXPECT_EQ(match_of(match_of(k.kind)), k.kind);
    EXPECT_EQ(flow_of(match_of(k.kind)), k.flow);
    EXPECT_NE(is_send(match_of(k.kind)), is_send(k.kind));
  }
}

// The plan of the dependency test: stages 0..3 on ranks 0, 1, 1, 0 (V placement: 1 and 2 pass
// tensors locally, 0 and 1, 2 and 3 cross ranks).
Plan four_stages() {
  Plan p;
  p.layout = generic_layout(4);
  p.placement = make_placement(4, 2, PlacementStyle::V);
  p.microbatches = 2;
  p.schedule = "test";
  return p;
}

using Needs = std::vector<std::tuple<Event, int, int>>;

Needs needs_of(const Plan& p, ActionKind k, int stage) {
  Needs out;
  for_each_need(p, Action::comm(k, stage, 1, -1),
                [&](const Need& n) { out.emplace_back(n.event, n.stage, n.microbatch); });
  return out;
}

// dependencies.h's rules, for every plain kind at every stage, one by one.
TEST(ActionKinds, DependenciesAreTheOnesWrittenOut) {
  const Plan p = four_stages();
  using K = ActionKind;
  using E = Event;
  ASSERT_EQ(p.placement.stage_rank, (std::vector<int>{0, 1, 1, 0}));
  // F: the previous stage's F when it is on this rank, else the RECV_F; nothing on stage 0.
  EXPECT_EQ(needs_of(p, K::F, 0), Needs{});
  EXPECT_EQ(needs_of(p, K::F, 1), (Needs{{E::RecvF, 1, 1}}));
  EXPECT_EQ(needs_of(p, K::F, 2), (Needs{{E::F, 1, 1}}));
  EXPECT_EQ(needs_of(p, K::F, 3), (Needs{{E::RecvF, 3, 1}}));
  // B and I: F of the stage itself, then the next stage's B/I or the RECV_B; the last stage
  // only its F.
  for (K k : {K::B, K::I}) {
    EXPECT_EQ(needs_of(p, k, 0), (Needs{{E::F, 0, 1}, {E::RecvB, 0, 1}}));
    EXPECT_EQ(needs_of(p, k, 1), (Needs{{E::F, 1, 1}, {E::BI, 2, 1}}));
    EXPECT_EQ(needs_of(p, k, 2), (Needs{{E::F, 2, 1}, {E::RecvB, 2, 1}}));
    EXPECT_EQ(needs_of(p, k, 3), (Needs{{E::F, 3, 1}}));
  }
  for (int s = 0; s < 4; ++s) {
    EXPECT_EQ(needs_of(p, K::W, s), (Needs{{E::BI, s, 1}}));
    EXPECT_EQ(needs_of(p, K::SendF, s), (Needs{{E::F, s, 1}}));
    EXPECT_EQ(needs_of(p, K::SendB, s), (Needs{{E::BI, s, 1}}));
    EXPECT_EQ(needs_of(p, K::RecvF, s), Needs{});
    EXPECT_EQ(needs_of(p, K::RecvB, s), Needs{});
  }
  // Each SEND finds its RECV on the neighbour's rank, and back.
  auto match = [&](K k, int stage, int peer) {
    const CommMatch m = comm_match(p, Action::comm(k, stage, 0, peer));
    return std::tuple(m.kind, m.stage, m.rank);
  };
  EXPECT_EQ(match(K::SendF, 0, 1), std::tuple(K::RecvF, 1, 1));
  EXPECT_EQ(match(K::RecvF, 1, 0), std::tuple(K::SendF, 0, 0));
  EXPECT_EQ(match(K::SendB, 1, 0), std::tuple(K::RecvB, 0, 0));
  EXPECT_EQ(match(K::RecvB, 0, 1), std::tuple(K::SendB, 1, 1));
  EXPECT_EQ(std::get<1>(match(K::SendB, 0, -1)), -1);  // no previous stage
  EXPECT_EQ(std::get<1>(match(K::RecvB, 3, -1)), -1);  // no next one
  // And lowering's transfers: F(0)'s activation and I(1)'s gradient cross ranks, F(1)'s and a
  // W's do not.
  const CrossRank cross(p);
  const auto tf = cross.transfer(0, Action::compute(K::F, 0, 1));
  ASSERT_TRUE(tf);
  EXPECT_EQ(tf->send, Action::comm(K::SendF, 0, 1, 1));
  EXPECT_EQ(tf->recv, Action::comm(K::RecvF, 1, 1, 0));
  const auto tb = cross.transfer(1, Action::compute(K::I, 1, 1));
  ASSERT_TRUE(tb);
  EXPECT_EQ(tb->send, Action::comm(K::SendB, 1, 1, 0));
  EXPECT_EQ(tb->recv, Action::comm(K::RecvB, 0, 1, 1));
  EXPECT_FALSE(cross.transfer(1, Action::compute(K::F, 1, 1)));
  EXPECT_FALSE(cross.transfer(1, Action::compute(K::W, 2, 1)));
}

}  // namespace
}  // namespace ppc
