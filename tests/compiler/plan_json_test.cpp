// The JSON plan (plan_json.h): written and read back, and the errors of the reader.
#include <gtest/gtest.h>

#include <sstream>

#include "compiler/compile.h"
#include "compiler/diagnostic.h"
#include "compiler/layout.h"
#include "compiler/plan_json.h"
#include "compiler/verify.h"
#include "tests/compiler/error_cases.h"
#include "tests/compiler/plan_fixtures.h"

namespace ppc {
namespace {

TEST(Json, RoundTrips) {
  Plan p = pptest::generated_plan("Interleaved1F1B", 4, 2, 5, true);
  p.layout = parse_layout("E|t*2|t|tt|t|t|t|tL");
  p.has_model = true;
  std::ostringstream ss;
  emit_json(p, verify(p), ss);
  Plan q = read_plan_json(ss.str(), "plan.json");
  EXPECT_EQ(q, p);
}

// Every case of tests/compiler/errors/plan_json.txt, and a plan cut short.
TEST(Json, ErrorsNameTheField) {
  Plan p = pptest::generated_plan("Interleaved1F1B", 2, 1, 2, true);
  std::ostringstream ss;
  emit_json(p, verify(p), ss);
  const std::string good = ss.str();
  for (const pptest::ErrorCase& c : pptest::error_cases("plan_json")) {
    std::string text = c.has("json") ? c["json"] : good;
    if (c.has("replace")) {
      const size_t at = text.find(c["replace"]);
      ASSERT_NE(at, std::string::npos) << c.where;
      text.replace(at, c["replace"].size(), c["with"]);
    }
    pptest::expect_message(c, pptest::message_of([&] { read_plan_json(text, "plan.json"); }));
  }
  EXPECT_EQ(pptest::message_of([&] {
              read_plan_json(good.substr(0, good.size() / 2), "plan.json");
            }).substr(0, 30),
            "plan.json: not valid JSON: [js");
}

}  // namespace
}  // namespace ppc
