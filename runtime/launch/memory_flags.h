// pprun's --recompute and --offload (issue 42): what each stage keeps between a forward and its
// backward, from the plan's "memory" field overridden by the flags. No LibTorch.
#pragma once

#include <string>

#include "runtime/job.h"

namespace pprt {

// Sets job.memory: the plan's policy (Plan::memory), then --recompute's rules (`recompute`),
// then --offload's (`offload`), later rules overriding earlier ones (ppc::combine); each checked
// against the plan's stages and layer kinds. Needs job.plan and job.device. Bad text, a stage or
// layer kind the plan lacks, or offloading on the CPU (which has no device memory to offload
// from) without `host_copy` (--offload-test-host-copy: a host-to-host copy, for tests) is a
// ppc::UserError naming the flag. Sets job.offload_host_copy.
void resolve_memory(const std::string& recompute, const std::string& offload, bool host_copy,
                    Job& job);

}  // namespace pprt
