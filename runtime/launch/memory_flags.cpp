// --recompute and --offload (memory_flags.h).
#include "runtime/launch/memory_flags.h"

#include <fmt/format.h>

#include "compiler/memory_mode.h"
#include "runtime/fail.h"

namespace pprt {

void resolve_memory(const std::string& recompute, const std::string& offload, bool host_copy,
                    Job& job) {
  const ppc::Plan& plan = job.plan;
  const int stages = static_cast<int>(plan.layout.stages.size());
  ppc::check_memory_policy(plan.memory, plan.layout, stages, "the plan's \"memory\"");
  ppc::MemoryPolicy policy = plan.memory;
  std::string offloads = plan.memory.uses(ppc::MemoryMode::Offload) ? "the plan's \"memory\"" : "";
  if (!recompute.empty()) {
    const ppc::MemoryPolicy r = ppc::parse_memory_policy(recompute, "--recompute");
    ppc::check_memory_policy(r, plan.layout, stages, "--recompute");
    policy = ppc::combine(policy, r);
    if (r.uses(ppc::MemoryMode::Offload)) offloads = "--recompute";
  }
  if (!offload.empty()) {
    const ppc::MemoryPolicy r = ppc::parse_offload_targets(offload, "--offload");
    ppc::check_memory_policy(r, plan.layout, stages, "--offload");
    policy = ppc::combine(policy, r);
    offloads = "--offload";
  }
  if (policy.uses(ppc::MemoryMode::Offload) && job.device != "cuda" && !host_copy)
    fail(offloads, fmt::format("'{}' offloads activations to host memory, which needs a GPU "
                               "(--device cuda); on the CPU use --recompute full or selective",
                               ppc::format_memory_policy(policy)));
  job.memory = std::move(policy);
  job.offload_host_copy = host_copy && job.device != "cuda";
}

}  // namespace pprt
