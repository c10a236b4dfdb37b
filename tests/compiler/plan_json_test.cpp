// The JSON plan (plan_json.h): written and read back, and the errors of the reader.
#include <gtest/gtest.h>

#include <functional>
#include <sstream>

#include "compiler/compile.h"
#include "compiler/diagnostic.h"
#include "compiler/layout.h"
#include "compiler/plan_json.h"
#include "compiler/verify.h"

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

TEST(Json, ErrorsNameTheField) {
  Plan p = interleaved(2, 1, 2);
  std::ostringstream ss;
  emit_json(p, verify(p), ss);
  const std::string good = ss.str();
  auto with = [&](const std::string& from, const std::string& to) {
    std::string s = good;
    s.replace(s.find(from), from.size(), to);
    return error_of([&] { read_plan_json(s, "plan.json"); });
  };
  EXPECT_EQ(with("\"version\": 1", "\"version\": 7"),
            "plan.json: version: unsupported plan version 7 (this build reads version 1)");
  EXPECT_EQ(
      with("\"format\": \"ppcompile-plan\"", "\"format\": \"x\""),
      "plan.json: format: expected \"ppcompile-plan\" (is this a ppcompile --emit json plan?)");
  EXPECT_EQ(with("\"1F1\"", "\"1X1\""),
            "plan.json: ranks[1].compute[2]: \"1X1\": unknown action kind");
  EXPECT_EQ(with("\"pp\": 2", "\"pp\": \"2\""), "plan.json: pp: expected an integer");
  EXPECT_EQ(with("\"microbatches\": 2", "\"micro\": 2"), "plan.json: missing field 'microbatches'");
  EXPECT_EQ(
      error_of([&] { read_plan_json(good.substr(0, good.size() / 2), "plan.json"); }).substr(0, 30),
      "plan.json: not valid JSON: [js");
  // A number too large for a double is nlohmann's out_of_range, not a parse_error: still a user
  // error. Found by fuzzing.
  EXPECT_EQ(error_of([&] { read_plan_json("275555E5555", "plan.json"); }),
            "plan.json: not valid JSON: [json.exception.out_of_range.406] number overflow parsing "
            "'275555E5555'");
}

}  // namespace
}  // namespace ppc
