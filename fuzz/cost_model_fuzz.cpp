// The cost model reader (ppcompile --cost FILE, docs/cost-model.md); an accepted model is used
// the way --emit stats uses it (stage costs of a small plan, a simulation, its description).
#include "compiler/compile.h"
#include "compiler/cost_model.h"
#include "compiler/lower_for_model.h"
#include "compiler/simulate.h"
#include "fuzz/fuzz_target.h"

PP_FUZZ_TARGET(cost_model) {
  auto model = ppfuzz::accepted([&] { return ppc::parse_cost_model(input, "fuzz-cost.json"); });
  if (!model) return;
  ppfuzz::must_succeed("simulating a plan under the accepted model", [&] {
    (void)ppc::describe(*model);
    ppc::CompileOptions o;
    o.layout = ppc::parse_layout("Et|tt|tmL");
    o.has_model = true;
    o.pp = 3;
    o.schedule = "1F1B";
    o.microbatches = 3;
    const ppc::Plan plan = ppc::lower_for_model(ppc::compile(o), *model);
    const ppc::Simulation sim = ppc::simulate(plan, *model);
    ppfuzz::expect(sim.makespan >= 0, "negative makespan");
  });
}
