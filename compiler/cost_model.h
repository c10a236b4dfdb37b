// Building a CostModel (simulate.h): from a JSON file (docs/cost-model.md), from the simple
// command-line flags, or the unit-per-layer model that --compare uses by default.
//
// Every reader throws UserError with one self-contained line: "cost.json: layers.t.f: expected
// a non-negative number, got -1", "--cost-b: 1 is less than --cost-w 2".
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "compiler/simulate.h"

namespace ppc {

CostModel parse_cost_model(std::string_view json_text, const std::string& input_name);
CostModel read_cost_model(const std::string& path);

// The simple case on the command line: one set of costs for every layer, whatever its kind, and
// for every generic stage (--stages N). Unset fields take the defaults of docs/cost-model.md.
struct CostFlags {
  std::optional<double> f, b, i, w;     // --cost-f, --cost-b, --cost-i, --cost-w
  std::optional<double> activation;     // --cost-activation (bytes per microbatch per layer)
  std::optional<double> params;         // --cost-params (bytes per layer)
  std::optional<double> latency;        // --cost-latency (time per message)
  std::optional<double> bandwidth;      // --cost-bandwidth (bytes per time unit)
  std::optional<double> message_bytes;  // --cost-message (bytes per activation/gradient message)
  std::optional<double> overlap;        // --cost-overlap (0..1)
  bool any() const {
    return f || b || i || w || activation || params || latency || bandwidth || message_bytes ||
           overlap;
  }
};
CostModel cost_model_from_flags(const CostFlags& flags);

// Every layer (E, t, m, L) and every generic stage: F = I = W = 1, B = 2, one unit of activation
// per in-flight microbatch, no parameters, free communication.
CostModel unit_layer_costs();

// The symbols of the model's own that `layout` uses and `model` gives no per-layer cost for (they
// cost what 't' costs); empty under unit or measured per-stage costs, where per-layer costs do not
// apply. ppcompile says so once on stderr.
std::string uncosted_own_symbols(const CostModel& model, const Layout& layout);

// "80GiB", "80GB", "8e10", "512M": a memory size in bytes (K/M/G/T = powers of 1000 with or
// without B, KiB/MiB/GiB/TiB = powers of 1024). UserError naming `flag` otherwise.
double parse_memory_size(const std::string& text, const char* flag);

// "memory limit  80.0 GiB: fits (peak 45.2 GiB on rank 0: activations 31.7 GiB, parameters 13.5
// GiB)" or
// "... exceeded on ranks 0, 1 (...)": peak activation plus parameters of each rank vs the limit.
std::string memory_check(const Simulation& sim, double limit, bool in_bytes);

// A one-line description for --emit stats: "unit (per stage ...)" or "cost model (...)".
std::string describe(const CostModel& model);

}  // namespace ppc
