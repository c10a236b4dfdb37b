// ppcompile's flags, as parsed (main.cpp defines them; docs/ppcompile.md explains them).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "compiler/cost_model.h"

namespace ppcompile {

struct Options {
  std::string layout, layout_file, from_csv, from_json;
  std::string symbols;  // --symbols: the model's own layer symbols besides E, t, m, L
  // -1 = not given.
  int stages = -1;
  int pp = -1;
  int vpp = -1;
  int num_layers = -1;
  std::string schedule;
  int microbatches = -1;
  std::string emit = "table";
  bool compute_only = false;
  std::string output;
  std::string color = "auto";
  bool compact = false;
  bool list_schedules = false;
  bool compare = false;
  std::string cost_file;           // --cost FILE
  ppc::CostFlags cost_flags;       // --cost-f, --cost-b, ...
  std::string memory_limit;        // --memory-limit BYTES
  std::string recompute, offload;  // --recompute SPEC, --offload TARGETS (issue 42)
  std::string engine = "timeline";
  std::string arrows = "auto";
  double width = 1800;
  std::string microbatches_text;        // --microbatches as given: a list or range with --autotune
  bool balance = false;                 // --balance
  bool autotune = false;                // --autotune
  long long balance_budget = 0;         // --balance-budget (0 = automatic)
  size_t top = 15;                      // --top
  std::vector<std::string> dump_after;  // --dump-after: passes whose IR goes to stderr
  std::string lengths_file;             // --lengths FILE: each microbatch's length
  std::string microbatch_order;         // --microbatch-order data|lengths (default: by schedule)
  int ep = 1;                           // --ep: expert parallelism (issue 40)
  int first_dense = 0;                  // --first-dense: the decoder layers before it stay dense
  std::vector<std::string> replica_plans;  // --replica-plans: other dp replicas' JSON plans
};

}  // namespace ppcompile
