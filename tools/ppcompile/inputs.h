// What ppcompile's flags say, checked: the model, the cost model and the memory limit, with the
// checks and notes that the compile pipeline (driver.cpp) and the searches (searches.cpp) share.
#pragma once

#include <optional>
#include <utility>

#include "compiler/cost_model.h"
#include "compiler/layout.h"
#include "tools/ppcompile/options.h"

namespace ppcompile {

// The flags every compile needs: --pp, --microbatches and, unless `schedule` is false, --schedule.
void require_sizes(const Options& o, bool schedule);

// The model from --layout, --layout-file or --stages, and whether it is a model (not generic).
// `also` ends the message that asks for one.
std::pair<ppc::Layout, bool> load_model(const Options& o, const char* also);

// --balance and --autotune (`flag`, which `does` something to the layers) need a model's layout.
void require_layout(const Options& o, const char* flag, const char* does);

// The model whose layers --balance and --autotune split again, checked against --num-layers
// before the search (a split keeps the layers).
ppc::Layout model_to_split(const Options& o);

// Once per run: the model's own symbols that the cost model gives no per-layer cost, which cost
// what a decoder layer 't' costs (docs/cost-model.md).
void note_uncosted(const ppc::CostModel& cost, const ppc::Layout& layout);

// The cost model of --cost FILE or the --cost-* flags; unit costs when neither is given (per
// layer when balancing: per stage, every split would cost the same).
ppc::CostModel cost_model(const Options& o);

// --memory-limit, if given.
std::optional<double> memory_limit(const Options& o);

// --recompute's rules, then --offload's (empty when neither is given).
ppc::MemoryPolicy memory_policy(const Options& o);

}  // namespace ppcompile
