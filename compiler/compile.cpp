#include "compiler/compile.h"

#include <fmt/format.h>

#include "compiler/all_to_all.h"
#include "compiler/diagnostic.h"

namespace ppc {

const ScheduleInfo& resolve_schedule(const std::string& name) {
  const ScheduleInfo* info = find_schedule(name);
  if (!info)
    throw UserError(fmt::format("unknown schedule '{}' (known: {}; see --list-schedules)", name,
                                schedule_names()),
                    input_location("--schedule"));
  return *info;
}

Plan plan_skeleton(const CompileOptions& opts, const ScheduleInfo& info) {
  if (opts.pp < 1 || opts.pp > kMaxPp)
    throw UserError(fmt::format("--pp must be between 1 and {}, got {}", kMaxPp, opts.pp));
  if (opts.microbatches < 1 || opts.microbatches > kMaxMicrobatches)
    throw UserError(fmt::format("--microbatches must be between 1 and {}, got {}", kMaxMicrobatches,
                                opts.microbatches));
  if (opts.vpp && *opts.vpp < 1)
    throw UserError(fmt::format("--vpp must be at least 1, got {}", *opts.vpp));
  if (opts.has_model) check_model(opts.layout, opts.num_layers);

  const int stages = opts.layout.num_stages();
  const int copies = info.copies;
  // With several model copies (DualPipe) the layout is placed once per copy: check it as a layout
  // of its own (loop placement), then place the copies' stages together.
  Placement placement = place_layout(opts.layout, opts.pp, opts.vpp,
                                     copies == 1 ? info.placement : PlacementStyle::Loop);
  const int vpp = placement.vpp;  // layout stages per rank
  switch (info.vpp_rule) {
    case VppRule::One:
      if (vpp != 1)
        throw UserError(fmt::format(
            "{} runs one stage per rank, but {} stages on --pp {} give {} per rank; use "
            "Interleaved1F1B or LoopedBFS, or --pp {}",
            info.name, stages, opts.pp, vpp, stages));
      break;
    case VppRule::Two:
      if (vpp != 2)
        throw UserError(
            fmt::format("{} needs exactly two stages per rank, but {} stages on --pp {} give {}",
                        info.name, stages, opts.pp, vpp));
      break;
    case VppRule::Any:
      break;
  }
  if (copies > 1) placement = make_placement(copies * stages, opts.pp, info.placement);
  if (info.check) info.check(ScheduleParams{opts.pp, placement.vpp, opts.microbatches, &placement});
  const long long actions = 2LL * stages * copies * opts.microbatches;
  if (actions > kMaxComputeActions)
    throw UserError(fmt::format(
        "{} stages x {} microbatches would make {} compute actions, more than the limit of {}",
        stages, opts.microbatches, actions, kMaxComputeActions));
  Plan plan;
  plan.layout = opts.layout;
  plan.has_model = opts.has_model;
  plan.placement = std::move(placement);
  plan.schedule = info.name;
  plan.microbatches = opts.microbatches;
  plan.copies = copies;
  check_memory_policy(opts.memory, plan.layout, plan.num_stages(), opts.memory_input);
  plan.memory = opts.memory;
  plan.expert_parallel = opts.expert_parallel;
  if (std::string bad = check_expert_parallel(plan); !bad.empty())
    throw UserError(bad, input_location("--ep"));
  return plan;
}

Plan generate(Plan skeleton, const CompileOptions& opts, const ScheduleInfo& info) {
  if (info.synthesize) return info.synthesize(opts);  // Auto: from the costs and the limit
  ScheduleParams params{skeleton.pp(), skeleton.vpp(), skeleton.microbatches, &skeleton.placement};
  skeleton.compute = info.generate(params);
  return skeleton;
}

Plan compile(const CompileOptions& opts) {
  const ScheduleInfo& info = resolve_schedule(opts.schedule);
  return generate(plan_skeleton(opts, info), opts, info);
}

}  // namespace ppc
