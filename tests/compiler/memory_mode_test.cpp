// Memory policies (memory_mode.h): --recompute's and --offload's text, the rule that applies to a
// layer, the canonical text, the checks against a plan, and the plan's "memory" field.
#include <gtest/gtest.h>

#include <sstream>

#include "compiler/diagnostic.h"
#include "compiler/memory_mode.h"
#include "compiler/plan_json.h"
#include "compiler/verify.h"
#include "tests/compiler/error_cases.h"
#include "tests/compiler/plan_fixtures.h"

namespace ppc {
namespace {

TEST(MemoryMode, LaterRulesOverrideEarlierOnes) {
  const MemoryPolicy p = parse_memory_policy("full, t:selective ,stage2:none", "--recompute");
  EXPECT_EQ(p.mode_of(0, LayerKind::Embedding), MemoryMode::Full);
  EXPECT_EQ(p.mode_of(0, LayerKind::Decoder), MemoryMode::Selective);
  EXPECT_EQ(p.mode_of(1, LayerKind::Mtp), MemoryMode::Full);
  EXPECT_EQ(p.mode_of(2, LayerKind::Decoder), MemoryMode::None);
  EXPECT_EQ(p.mode_of(2, LayerKind::Mtp), MemoryMode::None);
  EXPECT_EQ(MemoryPolicy{}.mode_of(0, LayerKind::Decoder), MemoryMode::None);
  EXPECT_TRUE(p.uses(MemoryMode::Selective));
  EXPECT_FALSE(p.uses(MemoryMode::Offload));
}

TEST(MemoryMode, CanonicalTextReadsBackUnchanged) {
  const MemoryPolicy p = combine(parse_memory_policy("full,m:none,stage12:selective", "x"),
                                 parse_offload_targets("stage0,x", "y"));
  const std::string text = format_memory_policy(p);
  EXPECT_EQ(text, "all:full,m:none,stage12:selective,stage0:offload,x:offload");
  EXPECT_EQ(parse_memory_policy(text, "x"), p);
  EXPECT_EQ(format_memory_policy(MemoryPolicy{}), "");
}

TEST(MemoryMode, BadTextIsOneLineNamingTheFlag) {
  auto msg = [](const char* text) {
    return pptest::message_of([&] { parse_memory_policy(text, "--recompute"); });
  };
  EXPECT_EQ(msg("ful"),
            "--recompute: 'ful': unknown mode \"ful\" (expected none, selective, full or offload)");
  EXPECT_EQ(msg("full,,t:none"),
            "--recompute: 'full,,t:none': an empty item (expected [TARGET:]MODE, e.g. t:full)");
  EXPECT_EQ(msg("stagex:full"),
            "--recompute: 'stagex:full': unknown target \"stagex\" (expected all, a layer symbol "
            "such as t, or stageN)");
  EXPECT_EQ(msg("tt:full"),
            "--recompute: 'tt:full': unknown target \"tt\" (expected all, a layer symbol such as "
            "t, or stageN)");
  EXPECT_EQ(pptest::message_of([] { parse_offload_targets("stage-1", "--offload"); }),
            "--offload: 'stage-1': unknown target \"stage-1\" (expected all, a layer symbol such "
            "as t, or stageN)");
}

TEST(MemoryMode, CheckedAgainstThePlan) {
  const Layout layout = parse_layout("Et|tt|tm|L");
  EXPECT_NO_THROW(check_memory_policy(parse_memory_policy("m:full,stage3:none", "f"), layout, 4,
                                      "--recompute"));
  EXPECT_EQ(pptest::message_of([&] {
              check_memory_policy(parse_memory_policy("x:full", "f"), layout, 4, "--recompute");
            }),
            "--recompute: 'x:full': no stage holds a layer 'x' (layout Et|tt|tm|L)");
  EXPECT_EQ(pptest::message_of([&] {
              check_memory_policy(parse_memory_policy("stage4:full", "f"), layout, 4,
                                  "--recompute");
            }),
            "--recompute: 'stage4:full': stage4 does not exist (the plan has 4 stages: stage0 to "
            "stage3)");
}

TEST(MemoryMode, ThePlanRecordsItsPolicy) {
  Plan p = pptest::generated_plan("1F1B", 2, 1, 4, true);
  p.layout = parse_layout("Et|tL");
  p.has_model = true;
  std::ostringstream plain;
  emit_json(p, verify(p), plain);
  EXPECT_EQ(plain.str().find("\"memory\""), std::string::npos);  // older plans read the same
  p.memory = parse_memory_policy("t:full,stage0:offload", "x");
  std::ostringstream ss;
  emit_json(p, verify(p), ss);
  EXPECT_NE(ss.str().find("\"memory\": \"t:full,stage0:offload\""), std::string::npos);
  EXPECT_EQ(read_plan_json(ss.str(), "plan.json"), p);
}

}  // namespace
}  // namespace ppc
