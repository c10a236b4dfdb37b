// The versioned JSON plan (docs/plan-format.md).
#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <ostream>
#include <sstream>

#include "compiler/block_writer.h"
#include "compiler/dependencies.h"
#include "compiler/diagnostic.h"
#include "compiler/plan_json.h"

namespace ppc {

namespace {

using nlohmann::json;
using ojson = nlohmann::ordered_json;

// Actions as a JSON array of strings, byte for byte as nlohmann's dump() writes it
// (["0F0","0SEND_F0"]): action text needs no escaping.
void write_actions(BlockWriter& out, const std::vector<Action>& actions) {
  out.put('[');
  for (size_t i = 0; i < actions.size(); ++i) {
    out.put(i ? std::string_view(",\"") : std::string_view("\""));
    out.put(actions[i]);
    out.put('"');
  }
  out.put(']');
}

// Field access with messages naming the field path.
class Reader {
 public:
  explicit Reader(std::string input) : input_(std::move(input)) {}

  [[noreturn]] void fail(const std::string& path, const std::string& what) const {
    throw UserError(path.empty() ? what : fmt::format("{}: {}", path, what),
                    input_location(input_));
  }
  const json& field(const json& obj, const std::string& path, const char* name) const {
    if (!obj.is_object()) fail(path, "expected an object");
    auto it = obj.find(name);
    if (it == obj.end()) fail(path, fmt::format("missing field '{}'", name));
    return *it;
  }
  int integer(const json& obj, const std::string& path, const char* name, int lo, int hi) const {
    const json& v = field(obj, path, name);
    const std::string p = path.empty() ? name : path + "." + name;
    if (!v.is_number_integer()) fail(p, "expected an integer");
    const auto x = v.get<long long>();
    if (x < lo || x > hi) fail(p, fmt::format("{} is out of range {}..{}", x, lo, hi));
    return static_cast<int>(x);
  }
  std::string string(const json& obj, const std::string& path, const char* name) const {
    const json& v = field(obj, path, name);
    if (!v.is_string()) fail(path.empty() ? name : path + "." + name, "expected a string");
    return v.get<std::string>();
  }
  const json& array(const json& obj, const std::string& path, const char* name) const {
    const json& v = field(obj, path, name);
    if (!v.is_array()) fail(path.empty() ? name : path + "." + name, "expected an array");
    return v;
  }

 private:
  std::string input_;
};

std::vector<LayerKind> parse_stage_symbols(const std::string& text, std::string_view own,
                                           const Reader& rd, const std::string& path) {
  std::vector<LayerKind> out;
  if (text == "(empty)") return out;
  for (char c : text) {
    if (c == ' ') continue;
    const LayerKind k = own_layer(c);
    if (!is_layer_symbol(c) || (!is_builtin(k) && own.find(c) == std::string_view::npos))
      rd.fail(path,
              fmt::format(
                  "unknown layer symbol '{}' in \"{}\"{}", c, text,
                  is_layer_symbol(c) ? " (a model's own symbol is listed in layout.symbols)" : ""));
    out.push_back(k);
  }
  return out;
}

}  // namespace

std::vector<std::string> json_compute_arrays(const Plan& plan) {
  std::vector<std::string> out(plan.compute.size());
  for (size_t r = 0; r < plan.compute.size(); ++r) {
    std::ostringstream text;
    {
      BlockWriter w(text);
      write_actions(w, plan.compute[r]);
    }
    out[r] = std::move(text).str();
  }
  return out;
}

void emit_json_plan(const Plan& plan, std::ostream& os,
                    const std::vector<std::string>* compute_arrays) {
  // Written by hand around nlohmann's dump so that each rank's action lists stay on one line.
  ojson layout;
  layout["source"] = plan.layout.source;
  layout["has_model"] = plan.has_model;
  ojson stages = ojson::array();
  for (const auto& s : plan.layout.stages) stages.push_back(stage_symbols(s));
  layout["stages"] = std::move(stages);
  // Only a layout with symbols of its model's own has the field (plans of E, t, m, L are as
  // before).
  if (const std::string own = own_symbols(plan.layout); !own.empty()) layout["symbols"] = own;

  os << "{\n";
  os << "  \"format\": \"ppcompile-plan\",\n";
  os << "  \"version\": " << Plan::kFormatVersion << ",\n";
  os << "  \"schedule\": " << ojson(plan.schedule).dump() << ",\n";
  os << "  \"pp\": " << plan.pp() << ",\n";
  os << "  \"vpp\": " << plan.vpp() << ",\n";
  os << "  \"microbatches\": " << plan.microbatches << ",\n";
  os << "  \"copies\": " << plan.copies << ",\n";
  if (!plan.memory.empty())
    os << "  \"memory\": " << ojson(format_memory_policy(plan.memory)).dump() << ",\n";
  // Only a plan with expert parallelism has the field (issue 40, docs/plan-format.md).
  if (plan.expert_parallel.on())
    os << "  \"expert_parallel\": {\"ep\": " << plan.expert_parallel.ep
       << ", \"first_dense\": " << plan.expert_parallel.first_dense << "},\n";
  // Only a plan ordered for its microbatches' lengths has the field (docs/plan-format.md).
  if (!plan.microbatch_order.empty())
    os << "  \"microbatch_order\": " << ojson(plan.microbatch_order).dump() << ",\n";
  os << "  \"placement\": " << ojson(placement_name(plan.placement.style)).dump() << ",\n";
  os << "  \"stage_ranks\": " << ojson(plan.placement.stage_rank).dump() << ",\n";
  os << "  \"layout\": " << layout.dump() << ",\n";
  os << "  \"ranks\": [\n";
  for (int r = 0; r < plan.pp(); ++r) {
    os << "    {\"rank\": " << r
       << ", \"stages\": " << ojson(plan.placement.rank_stages[static_cast<size_t>(r)]).dump();
    BlockWriter out(os);
    out.put(",\n     \"compute\": ");
    if (compute_arrays)
      out.put((*compute_arrays)[static_cast<size_t>(r)]);
    else
      write_actions(out, plan.compute[static_cast<size_t>(r)]);
    if (plan.is_lowered()) {
      out.put(",\n     \"actions\": ");
      write_actions(out, plan.lowered[static_cast<size_t>(r)]);
    }
    out.flush();
    os << "}" << (r + 1 < plan.pp() ? "," : "") << "\n";
  }
  os << "  ],\n";
}

void emit_json_verification(const VerifyReport& report, std::ostream& os) {
  ojson v;
  v["ok"] = report.ok();
  v["deadlock_model_checked"] = report.checked_lowered;
  v["peak_inflight"] = report.peak_inflight;
  v["compute_actions"] = report.compute_actions;
  v["comm_actions"] = report.comm_actions;
  v["batches"] = report.batches;
  if (!report.ok()) v["errors"] = report.errors;
  os << "  \"verification\": " << v.dump() << "\n";
  os << "}\n";
}

void emit_json(const Plan& plan, const VerifyReport& report, std::ostream& os) {
  emit_json_plan(plan, os);
  emit_json_verification(report, os);
}

Plan read_plan_json(std::string_view text, const std::string& input_name) {
  Reader rd(input_name);
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {  // a syntax error, or a number too large (out_of_range)
    throw UserError(fmt::format("not valid JSON: {}", e.what()), input_location(input_name));
  }
  if (!j.is_object()) rd.fail("(top level)", "expected an object");
  if (rd.string(j, "", "format") != "ppcompile-plan")
    rd.fail("format", "expected \"ppcompile-plan\" (is this a ppcompile --emit json plan?)");
  const int version = rd.integer(j, "", "version", 0, 1 << 30);
  if (version != Plan::kFormatVersion)
    rd.fail("version", fmt::format("unsupported plan version {} (this build reads version {})",
                                   version, Plan::kFormatVersion));
  Plan plan;
  plan.schedule = rd.string(j, "", "schedule");
  const int pp = rd.integer(j, "", "pp", 1, 4096);
  plan.microbatches = rd.integer(j, "", "microbatches", 1, 1 << 20);
  plan.copies = rd.integer(j, "", "copies", 1, 2);
  if (j.contains("microbatch_order")) {  // absent: data order
    const json& order = rd.array(j, "", "microbatch_order");
    std::vector<char> seen(static_cast<size_t>(plan.microbatches), 0);
    if (order.size() != seen.size())
      rd.fail("microbatch_order", fmt::format("has {} entries, expected one per microbatch ({})",
                                              order.size(), plan.microbatches));
    for (size_t k = 0; k < order.size(); ++k) {
      const long long d = order[k].is_number_integer() ? order[k].get<long long>() : -1;
      if (d < 0 || d >= plan.microbatches || seen[static_cast<size_t>(d)]++)
        rd.fail(fmt::format("microbatch_order[{}]", k),
                fmt::format("expected a permutation of 0 .. {}, got {}", plan.microbatches - 1,
                            order[k].dump()));
      plan.microbatch_order.push_back(static_cast<int>(d));
    }
  }
  const std::string placement = rd.string(j, "", "placement");
  PlacementStyle style;
  if (placement == "loop")
    style = PlacementStyle::Loop;
  else if (placement == "v")
    style = PlacementStyle::V;
  else
    rd.fail("placement",
            fmt::format("unknown placement \"{}\" (expected \"loop\" or \"v\")", placement));

  const json& layout = rd.field(j, "", "layout");
  plan.layout.source = rd.string(layout, "layout", "source");
  const json& lstages = rd.array(layout, "layout", "stages");
  const json& hm = rd.field(layout, "layout", "has_model");
  if (!hm.is_boolean()) rd.fail("layout.has_model", "expected true or false");
  plan.has_model = hm.get<bool>();
  std::string own;  // absent in plans of E, t, m and L only (and in plans older than the field)
  if (layout.contains("symbols")) {
    own = rd.string(layout, "layout", "symbols");
    try {
      check_own_symbols(own, "");
    } catch (const UserError& e) {
      rd.fail("layout.symbols", e.message());
    }
  }
  for (size_t i = 0; i < lstages.size(); ++i) {
    const std::string path = fmt::format("layout.stages[{}]", i);
    if (!lstages[i].is_string()) rd.fail(path, "expected a string");
    plan.layout.stages.push_back(parse_stage_symbols(lstages[i].get<std::string>(), own, rd, path));
  }
  const int num_stages = static_cast<int>(plan.layout.stages.size()) * plan.copies;
  if (num_stages < 1 || num_stages % pp != 0)
    rd.fail("layout.stages", fmt::format("{} stages cannot be placed on pp {}", num_stages, pp));
  if (style == PlacementStyle::V && num_stages != 2 * pp)
    rd.fail("placement", fmt::format("V placement needs 2 * pp = {} stages, the plan has {}",
                                     2 * pp, num_stages));
  plan.placement = make_placement(num_stages, pp, style);
  const json& sr = rd.array(j, "", "stage_ranks");
  if (sr.size() != static_cast<size_t>(num_stages))
    rd.fail("stage_ranks", fmt::format("has {} entries, expected {}", sr.size(), num_stages));
  for (size_t s = 0; s < sr.size(); ++s)
    if (!sr[s].is_number_integer() || sr[s].get<long long>() != plan.placement.stage_rank[s])
      rd.fail(fmt::format("stage_ranks[{}]", s),
              fmt::format("expected rank {} for {} placement", plan.placement.stage_rank[s],
                          placement));
  const int vpp = rd.integer(j, "", "vpp", 1, 1 << 20);
  if (vpp != plan.placement.vpp)
    rd.fail("vpp", fmt::format("is {}, but {} stages on pp {} give {}", vpp, num_stages, pp,
                               plan.placement.vpp));

  if (j.contains("memory")) {  // absent in plans that keep every activation
    const std::string text = rd.string(j, "", "memory");
    try {
      plan.memory = parse_memory_policy(text, "memory");
      check_memory_policy(plan.memory, plan.layout, num_stages, "memory");
    } catch (const UserError& e) {
      rd.fail("memory", e.message());
    }
  }

  if (j.contains("expert_parallel")) {  // absent in plans without expert parallelism
    const json& e = j["expert_parallel"];
    if (!e.is_object())
      rd.fail("expert_parallel", "expected an object {\"ep\": N, \"first_dense\": K}");
    plan.expert_parallel.ep = rd.integer(e, "expert_parallel", "ep", 1, 1 << 20);
    if (e.contains("first_dense"))
      plan.expert_parallel.first_dense =
          rd.integer(e, "expert_parallel", "first_dense", 0, 1 << 24);
  }

  const json& ranks = rd.array(j, "", "ranks");
  if (ranks.size() != static_cast<size_t>(pp))
    rd.fail("ranks", fmt::format("has {} entries, expected pp = {}", ranks.size(), pp));
  bool lowered = !ranks.empty() && ranks[0].is_object() && ranks[0].contains("actions");
  plan.compute.assign(static_cast<size_t>(pp), {});
  if (lowered) plan.lowered.assign(static_cast<size_t>(pp), {});
  auto read_actions = [&](const json& arr, const std::string& path, std::vector<Action>& out) {
    out.reserve(arr.size());
    std::string err;
    for (size_t i = 0; i < arr.size(); ++i) {
      const std::string p = fmt::format("{}[{}]", path, i);
      if (!arr[i].is_string()) rd.fail(p, "expected an action string such as \"0F1\"");
      auto a = parse_action(arr[i].get_ref<const std::string&>(), &err);
      if (!a) rd.fail(p, fmt::format("\"{}\": {}", arr[i].get<std::string>(), err));
      if (is_comm(a->kind) && a->stage >= 0 && a->stage < num_stages)
        a->peer = comm_match(plan, *a).rank;
      out.push_back(*a);
    }
  };
  for (size_t r = 0; r < ranks.size(); ++r) {
    const std::string path = fmt::format("ranks[{}]", r);
    if (rd.integer(ranks[r], path, "rank", 0, pp - 1) != static_cast<int>(r))
      rd.fail(path + ".rank", fmt::format("expected {}", r));
    read_actions(rd.array(ranks[r], path, "compute"), path + ".compute", plan.compute[r]);
    if (lowered)
      read_actions(rd.array(ranks[r], path, "actions"), path + ".actions", plan.lowered[r]);
  }
  return plan;
}

}  // namespace ppc
