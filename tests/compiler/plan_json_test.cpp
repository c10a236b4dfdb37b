// The JSON plan (plan_json.h): written and read back, and the errors of the reader.
#include <gtest/gtest.h>

#include <functional>
#include <sstream>

#include "compiler/compile.h"
#include "compiler/diagnostic.h"
#include "compiler/layout.h"
#include "compiler/plan_json.h"
#include "compiler/verify.h"
#include "tests/compiler/error_cases.h"

namespace ppc {
namespace {

Plan interleaved(int pp, int vpp, int m) {
  CompileOptions o;
  o.layout = generic_layout(pp * vpp);
  o.pp = pp;
  o.schedule = "Interleaved1F1B";
  o.microbatches = m;
  return compile(o);
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const UserError& e) {
    return e.format();
  }
  return "(no error)";
}

TEST(Json, RoundTrips) {
  Plan p = interleaved(4, 2, 5);
  p.layout = parse_layout("E|t*2|t|tt|t|t|t|tL");
  p.has_model = true;
  std::ostringstream ss;
  emit_json(p, verify(p), ss);
  Plan q = read_plan_json(ss.str(), "plan.json");
  EXPECT_EQ(q, p);
}

// Every case of tests/compiler/errors/plan_json.txt, and a plan cut short.
TEST(Json, ErrorsNameTheField) {
  Plan p = interleaved(2, 1, 2);
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
    pptest::expect_message(c, error_of([&] { read_plan_json(text, "plan.json"); }));
  }
  EXPECT_EQ(
      error_of([&] { read_plan_json(good.substr(0, good.size() / 2), "plan.json"); }).substr(0, 30),
      "plan.json: not valid JSON: [js");
}

}  // namespace
}  // namespace ppc
