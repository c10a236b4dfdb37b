#include <gtest/gtest.h>

#include "compiler/action.h"

namespace ppc {
namespace {

std::string roundtrip(const std::string& text) {
  std::string err;
  auto a = parse_action(text, &err);
  EXPECT_TRUE(a.has_value()) << text << ": " << err;
  return a ? to_string(*a) : "";
}

std::string parse_error(const std::string& text) {
  std::string err;
  auto a = parse_action(text, &err);
  EXPECT_FALSE(a.has_value()) << text;
  return err;
}

TEST(Action, PyTorchNotationRoundTrips) {
  for (const char* t : {"0F1", "3I0", "2W4", "1B2", "2SEND_B0", "3RECV_F1", "0SEND_F12",
                        "10RECV_B3", "(0F3;3B1)OVERLAP_F_B", "(1F0;6I2)OVERLAP_F_B"})
    EXPECT_EQ(roundtrip(t), t);
}

TEST(Action, ParsesFields) {
  std::string err;
  auto a = parse_action("12SEND_B7", &err);
  ASSERT_TRUE(a);
  EXPECT_EQ(a->kind, ActionKind::SendB);
  EXPECT_EQ(a->stage, 12);
  EXPECT_EQ(a->microbatch, 7);
  EXPECT_EQ(a->peer, -1);
  auto o = parse_action(" (0F3; 3B1)OVERLAP_F_B ", &err);
  ASSERT_TRUE(o) << err;
  EXPECT_EQ(o->kind, ActionKind::OverlapFB);
  EXPECT_EQ(o->forward_part(), Action::compute(ActionKind::F, 0, 3));
  EXPECT_EQ(o->backward_part(), Action::compute(ActionKind::B, 3, 1));
}

TEST(Action, RejectsMalformedText) {
  EXPECT_EQ(parse_error(""), "empty action");
  EXPECT_EQ(parse_error("F1"), "expected a stage number at the start");
  EXPECT_EQ(parse_error("1X2"), "unknown action kind");
  EXPECT_EQ(parse_error("1F"), "expected a microbatch number after 'F'");
  EXPECT_EQ(parse_error("1F2x"), "unexpected text after the microbatch number");
  EXPECT_EQ(parse_error("1F99999999999"), "expected a microbatch number after 'F'");
  EXPECT_EQ(parse_error("0UNSHARD"), "FSDP action 'UNSHARD' is not a pipeline action");
  EXPECT_EQ(parse_error("(0F3;3B1)"), "a compound action must end with ')OVERLAP_F_B'");
  EXPECT_EQ(parse_error("(0F3)OVERLAP_F_B"),
            "OVERLAP_F_B must hold exactly two actions, a forward and a backward");
  EXPECT_EQ(parse_error("(0B3;3F1)OVERLAP_F_B"),
            "OVERLAP_F_B must hold a forward (F) then a backward (B or I)");
  EXPECT_EQ(parse_error("(0F3;3Q1)OVERLAP_F_B"), "in OVERLAP_F_B: unknown action kind");
}

TEST(Action, KindPredicates) {
  EXPECT_TRUE(is_comm(ActionKind::SendF));
  EXPECT_TRUE(is_comm(ActionKind::RecvB));
  EXPECT_FALSE(is_comm(ActionKind::OverlapFB));
  EXPECT_TRUE(is_compute(ActionKind::W));
  EXPECT_TRUE(is_backward_input(ActionKind::I));
  EXPECT_FALSE(is_backward_input(ActionKind::W));
  EXPECT_STREQ(kind_name(ActionKind::OverlapFB), "OVERLAP_F_B");
}

}  // namespace
}  // namespace ppc
