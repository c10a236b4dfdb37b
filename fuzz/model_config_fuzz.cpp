// pprun's model size file (pprun --config FILE, runtime/models/llama/config.h): parse and check.
#include "compiler/layout.h"
#include "fuzz/fuzz_target.h"
#include "runtime/models/llama/architecture.h"
#include "runtime/models/llama/config.h"

PP_FUZZ_TARGET(model_config) {
  auto config =
      ppfuzz::accepted([&] { return pprt::parse_model_config(input, "fuzz-model.json"); });
  if (!config) return;
  ppfuzz::must_succeed("using the accepted config", [&] {
    (void)pprt::describe(*config);
    ppfuzz::expect(pprt::count_parameters(*config, ppc::parse_layout("Et|tL")) > 0,
                   "a model without parameters");
  });
}
