// The JSON plan loader as ppcompile runs it (--from-json FILE): read, verify the compute order,
// lower an unlowered plan, verify the lowered order; an accepted plan is emitted as JSON and read
// back (the same plan).
#include <sstream>

#include "compiler/plan_json.h"
#include "compiler/verify_and_lower.h"
#include "fuzz/fuzz_target.h"

PP_FUZZ_TARGET(json_plan) {
  auto prepared = ppfuzz::accepted([&] {
    return ppc::verify_and_lower_or_throw(ppc::read_plan_json(input, "fuzz.json"), ppc::CostModel{},
                                          "fuzz.json");
  });
  if (!prepared) return;
  ppfuzz::must_succeed("emitting the accepted plan", [&] {
    std::ostringstream out;
    ppc::emit_json(prepared->plan, prepared->report, out);
    const ppc::Plan back = ppc::read_plan_json(out.str(), "emitted.json");
    ppfuzz::expect(back == prepared->plan, "the emitted JSON reads back as another plan");
    ppfuzz::expect(ppc::verify(back).ok(), "the emitted JSON fails verification");
  });
}
