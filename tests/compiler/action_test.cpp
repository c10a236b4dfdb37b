#include <gtest/gtest.h>

#include <fmt/format.h>

#include "compiler/action.h"
#include "tests/compiler/error_cases.h"

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

// format_action writes digits itself: check it against fmt over every digit count and sign.
TEST(Action, FormatsEveryNumberAsFmtDoes) {
  const int values[] = {0,       1,       9,          10,    11,     42,
                        99,      100,     101,        999,   1000,   1234,
                        9999,    10000,   54321,      99999, 100000, 123456,
                        1048575, 1 << 30, 2147483647, -1,    -10,    -2147483647 - 1};
  const ActionKind kinds[] = {ActionKind::F,     ActionKind::B,     ActionKind::I,
                              ActionKind::W,     ActionKind::SendF, ActionKind::RecvF,
                              ActionKind::SendB, ActionKind::RecvB};
  for (int s : values)
    for (int mb : values) {
      for (ActionKind k : kinds)
        EXPECT_EQ(to_string(Action::comm(k, s, mb, 0)), fmt::format("{}{}{}", s, kind_name(k), mb));
      EXPECT_EQ(to_string(Action::overlap(s, mb, ActionKind::I, mb, s)),
                fmt::format("({}F{};{}I{})OVERLAP_F_B", s, mb, mb, s));
      for (const Action& a :
           {Action::comm(ActionKind::RecvB, s, mb, 0), Action::compute(ActionKind::F, mb, s),
            Action::overlap(s, mb, ActionKind::B, mb, s)})
        EXPECT_EQ(action_text_size(a), to_string(a).size());
      std::string appended = "x";
      append_to(appended, Action::compute(ActionKind::W, s, mb));
      EXPECT_EQ(appended, fmt::format("x{}W{}", s, mb));
    }
  for (int v = 0; v < 100000; ++v) {
    char buf[kMaxActionText];
    char* end = format_action(Action::compute(ActionKind::F, v, 7), buf);
    ASSERT_EQ(std::string(buf, end), std::to_string(v) + "F7");
  }
  char buf[kMaxActionText];
  const Action widest = Action::overlap(-2147483647 - 1, -2147483647 - 1, ActionKind::B,
                                        -2147483647 - 1, -2147483647 - 1);
  EXPECT_LE(static_cast<size_t>(format_action(widest, buf) - buf), kMaxActionText);
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

// Every case of tests/compiler/errors/action.txt.
TEST(Action, RejectsMalformedText) {
  for (const pptest::ErrorCase& c : pptest::error_cases("action"))
    pptest::expect_message(c, parse_error(c["action"]));
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
