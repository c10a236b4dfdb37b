#include "compiler/cost_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "compiler/all_to_all_costs.h"
#include "compiler/diagnostic.h"
#include "compiler/lengths.h"
#include "compiler/measured_costs.h"
#include "compiler/memory_costs.h"
#include "compiler/read_file.h"
#include "compiler/simulate.h"

namespace ppc {

namespace {

using nlohmann::json;

// F, and whichever of B, I, W were given, resolved to a LayerCost (docs/cost-model.md):
// I and W given: B = I + W unless given too; B and one of I/W: the other is the rest; B alone:
// I = W = B/2; none: B = 2F, I = W = F.
struct RawCost {
  double f = 0;
  std::optional<double> b, i, w;
  double activation = 0, params = 0, optimizer = 0;
};

template <class Fail>
LayerCost resolve(const RawCost& raw, Fail&& fail) {
  LayerCost c;
  c.f = raw.f;
  c.activation = raw.activation;
  c.params = raw.params;
  c.optimizer = raw.optimizer;
  if (raw.i && raw.w) {
    c.i = *raw.i;
    c.w = *raw.w;
    if (raw.b) c.b = *raw.b;
  } else if (raw.b && (raw.i || raw.w)) {
    const double given = raw.i ? *raw.i : *raw.w;
    if (given > *raw.b)
      fail(raw.i ? "i" : "w",
           fmt::format("{:g} is more than the full backward time {:g}", given, *raw.b));
    c.i = raw.i ? given : *raw.b - given;
    c.w = raw.w ? given : *raw.b - given;
  } else if (raw.b) {
    c.i = c.w = *raw.b / 2;
  } else if (raw.i || raw.w) {
    fail(raw.i ? "i" : "w", "give both i and w, or b");
  } else {
    c.i = c.w = raw.f;
  }
  return c;
}

class JsonReader {
 public:
  explicit JsonReader(std::string input) : input_(std::move(input)) {}

  [[noreturn]] void fail(const std::string& path, const std::string& what) const {
    throw UserError(path.empty() ? what : path + ": " + what, SourceLocation{input_, 0, 0, ""});
  }

  double number(const json& v, const std::string& path, double lo, double hi) const {
    if (!v.is_number()) fail(path, fmt::format("expected a number, got {}", v.dump()));
    const double x = v.get<double>();
    if (!std::isfinite(x) || x < lo || x > hi) {
      if (hi == HUGE_VAL)
        fail(path, fmt::format("expected a non-negative number, got {}", v.dump()));
      fail(path, fmt::format("expected a number between {:g} and {:g}, got {}", lo, hi, v.dump()));
    }
    return x;
  }

  void only_keys(const json& obj, const std::string& path,
                 std::initializer_list<const char*> keys) const {
    for (auto it = obj.begin(); it != obj.end(); ++it) {
      bool known = false;
      std::string list;
      for (const char* k : keys) {
        known |= it.key() == k;
        list += (list.empty() ? "" : ", ") + std::string(k);
      }
      if (!known)
        fail(printable(path.empty() ? it.key() : path + "." + it.key()),
             "unknown field (known: " + list + ")");
    }
  }

  // "layout", "stages", "boundaries": costs measured per stage of a layout (measured_costs.h).
  std::shared_ptr<const MeasuredCosts> measured(const json& j, const std::string& name) const {
    const bool stages = j.contains("stages"), boundaries = j.contains("boundaries");
    if (!stages && !boundaries) {
      if (j.contains("layout") && !j["layout"].is_string())
        fail("layout", fmt::format("expected a layout string, got {}", j["layout"].dump()));
      return nullptr;
    }
    if (!j.contains("layout"))
      fail(stages ? "stages" : "boundaries",
           "per-stage costs need the layout they were measured on: add \"layout\": \"...\"");
    const json& l = j["layout"];
    if (!l.is_string()) fail("layout", fmt::format("expected a layout string, got {}", l.dump()));
    auto mc = std::make_shared<MeasuredCosts>();
    mc->input = name;
    mc->layout = parse_layout(l.get<std::string>(), name + ": layout", kAnySymbols);
    const size_t S = static_cast<size_t>(mc->layout.num_stages());
    mc->stages.assign(S, std::nullopt);
    mc->boundaries.assign(S > 0 ? S - 1 : 0, MeasuredBoundary{});
    if (stages) {
      const json& a = j["stages"];
      if (!a.is_array() || a.size() != S)
        fail("stages",
             fmt::format(
                 "expected an array of {} entries (one per stage of the layout, "
                 "null for one not measured), got {}",
                 S, a.is_array() ? fmt::format("{} entries", a.size()) : a.dump().substr(0, 40)));
      for (size_t k = 0; k < S; ++k) {
        if (a[k].is_null()) continue;
        const LayerCost c = layer(a[k], fmt::format("stages[{}]", k), false);
        mc->stages[k] = StageCost{c.f, c.backward(), c.i, c.w, c.activation, c.params, c.optimizer};
      }
    }
    if (boundaries) {
      const json& a = j["boundaries"];
      if (!a.is_array() || a.size() != mc->boundaries.size())
        fail("boundaries",
             fmt::format(
                 "expected an array of {} entries (one per boundary between stages k and "
                 "k+1, null for one not measured), got {}",
                 mc->boundaries.size(),
                 a.is_array() ? fmt::format("{} entries", a.size()) : a.dump().substr(0, 40)));
      for (size_t k = 0; k < mc->boundaries.size(); ++k) {
        if (a[k].is_null()) continue;
        const std::string path = fmt::format("boundaries[{}]", k);
        if (!a[k].is_object())
          fail(path, "expected an object such as {\"message_bytes\": 58720256, \"time\": 1.2}");
        only_keys(a[k], path, {"message_bytes", "time"});
        if (a[k].contains("message_bytes"))
          mc->boundaries[k].message_bytes =
              number(a[k]["message_bytes"], path + ".message_bytes", 0, HUGE_VAL);
        if (a[k].contains("time"))
          mc->boundaries[k].time = number(a[k]["time"], path + ".time", 0, HUGE_VAL);
      }
    }
    return mc;
  }

  // `modes`: the entry may give issue 42's memory-mode fields (a layer kind's or the empty
  // stage's entry; a measured stage's takes them from the layers, memory_costs.h).
  LayerCost layer(const json& v, const std::string& path, bool modes = true) const {
    if (!v.is_object()) fail(path, "expected an object such as {\"f\": 1, \"b\": 2}");
    if (modes)
      only_keys(v, path,
                {"f", "b", "i", "w", "activation", "params", "optimizer", "activation_selective",
                 "activation_full", "recompute_selective", "recompute_full", "all_to_all"});
    else
      only_keys(v, path, {"f", "b", "i", "w", "activation", "params", "optimizer"});
    if (!v.contains("f")) fail(path, "missing field 'f' (forward time)");
    RawCost raw;
    raw.f = number(v["f"], path + ".f", 0, HUGE_VAL);
    auto opt = [&](const char* k) -> std::optional<double> {
      if (!v.contains(k)) return std::nullopt;
      return number(v[k], path + "." + k, 0, HUGE_VAL);
    };
    raw.b = opt("b");
    raw.i = opt("i");
    raw.w = opt("w");
    raw.activation = opt("activation").value_or(0);
    raw.params = opt("params").value_or(0);
    raw.optimizer = opt("optimizer").value_or(0);
    LayerCost c = resolve(
        raw, [&](const char* field, const std::string& what) { fail(path + "." + field, what); });
    c.recompute_selective = opt("recompute_selective");
    c.recompute_full = opt("recompute_full");
    c.activation_selective = opt("activation_selective");
    c.activation_full = opt("activation_full");
    c.all_to_all = opt("all_to_all");
    for (const char* k : {"activation_selective", "activation_full"})
      if (v.contains(k) && v[k].get<double>() > raw.activation)
        fail(path + "." + k,
             fmt::format("{} is more than the activation {:g} that keeping everything keeps",
                         v[k].dump(), raw.activation));
    return c;
  }

 private:
  std::string input_;
};

// Line and column (1-based) of byte offset `pos` in `text`.
std::pair<int, int> line_column(std::string_view text, size_t pos) {
  int line = 1, col = 1;
  for (size_t k = 0; k < pos && k < text.size(); ++k) {
    if (text[k] == '\n') {
      ++line;
      col = 1;
    } else {
      ++col;
    }
  }
  return {line, col};
}

}  // namespace

namespace {

// The stages' costs from the layers (or measured), without all-to-alls or memory modes.
std::vector<StageCost> layer_stage_costs(const Plan& plan, const CostModel& model);

}  // namespace

std::vector<StageCost> stage_costs(const Plan& plan, const CostModel& model) {
  std::vector<StageCost> out = layer_stage_costs(plan, model);
  if (!plan.memory.empty()) apply_memory_policy(plan, model, out);
  add_all_to_alls(plan, model, out, true);
  return out;
}

std::vector<StageCost> stage_costs_keeping_all(const Plan& plan, const CostModel& model) {
  std::vector<StageCost> out = layer_stage_costs(plan, model);
  add_all_to_alls(plan, model, out, false);
  return out;
}

namespace {

std::vector<StageCost> layer_stage_costs(const Plan& plan, const CostModel& model) {
  std::vector<StageCost> out(static_cast<size_t>(plan.num_stages()));
  if (model.unit) return out;
  if (model.measured) return measured_stage_costs(plan, model);
  for (int s = 0; s < plan.num_stages(); ++s) {
    const auto& layers = plan.layout.stages[static_cast<size_t>(plan.layout_stage(s))];
    StageCost c{0, 0, 0, 0, 0, 0, 0};
    if (layers.empty()) {
      const LayerCost& e = model.empty_stage;
      c = StageCost{e.f, e.backward(), e.i, e.w, e.activation, e.params, e.optimizer};
    }
    for (LayerKind k : layers) {
      const LayerCost& l = model.layer(k);
      c.f += l.f;
      c.b += l.backward();
      c.i += l.i;
      c.w += l.w;
      c.activation += l.activation;
      c.params += l.params;
      c.optimizer += l.optimizer;
    }
    out[static_cast<size_t>(s)] = c;
  }
  return out;
}

}  // namespace

std::vector<double> rank_starts(const Plan& plan, const std::vector<StageCost>& costs) {
  std::vector<double> out(static_cast<size_t>(plan.pp()), 0.0);
  bool any = false;
  for (int r = 0; r < plan.pp(); ++r)
    for (int s : plan.placement.rank_stages[static_cast<size_t>(r)]) {
      out[static_cast<size_t>(r)] += costs[static_cast<size_t>(s)].optimizer;
      any |= costs[static_cast<size_t>(s)].optimizer > 0;
    }
  if (!any) out.clear();
  return out;
}

std::string format_memory(double value, bool in_bytes) {
  if (!in_bytes) return fmt::format("{:.4g}", value);
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int u = 0;
  while (value >= 1024 && u < 5) {
    value /= 1024;
    ++u;
  }
  return u == 0 ? fmt::format("{:g} B", value) : fmt::format("{:.1f} {}", value, kUnits[u]);
}

MessageModel message_model_of_transport(const std::string& transport) {
  return transport == "gloo" ? MessageModel::Eager : MessageModel::Rendezvous;
}

std::string uncosted_own_symbols(const CostModel& model, const Layout& layout) {
  std::string out;
  if (model.unit || model.measured) return out;
  for (char c : own_symbols(layout))
    if (model.layers.count(c) == 0) out += c;
  return out;
}

CostModel parse_cost_model(std::string_view text, const std::string& input_name) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::parse_error& e) {
    // nlohmann: "[json.exception.parse_error.101] parse error at line 3, column 7: <what>"
    std::string what = e.what();
    const size_t colon = what.find(": ", what.find("parse error"));
    if (colon != std::string::npos) what = what.substr(colon + 2);
    const auto [line, col] = line_column(text, e.byte > 0 ? e.byte - 1 : 0);
    throw UserError("invalid JSON: " + what, SourceLocation{input_name, line, col, ""});
  } catch (const json::exception& e) {  // a number too large to hold (out_of_range)
    throw UserError(fmt::format("invalid JSON: {}", e.what()), input_location(input_name));
  }
  JsonReader rd(input_name);
  if (!j.is_object()) rd.fail("", "expected a JSON object (see docs/cost-model.md)");
  rd.only_keys(j, "",
               {"comment", "layers", "stage", "latency", "bandwidth", "message_bytes", "overlap",
                "weight_grad_memory", "layout", "stages", "boundaries", "transport", "post",
                "lengths", "host_bandwidth", "top_k"});
  CostModel m;
  m.unit = false;
  if (j.contains("layers")) {
    const json& layers = j["layers"];
    if (!layers.is_object())
      rd.fail("layers", "expected an object with entries E, t, m, L or a model's own symbols");
    for (auto it = layers.begin(); it != layers.end(); ++it) {
      const std::string& key = it.key();
      if (key.size() != 1 || !is_layer_symbol(key[0]))
        rd.fail(printable("layers." + key),
                "unknown field (known: E, t, m, L and a model's own symbols, each one ASCII "
                "letter)");
      m.layers[key[0]] = rd.layer(it.value(), "layers." + key);
    }
  }
  if (j.contains("stage")) {
    m.empty_stage = rd.layer(j["stage"], "stage");
  } else if (j.contains("layers") && j["layers"].contains("t")) {
    m.empty_stage = m.layers.at('t');
  } else {
    m.empty_stage = LayerCost{1, 1, 1, std::nullopt, 1, 0};
  }
  auto gives_memory = [](const json& entry) {
    return entry.contains("activation") || entry.contains("params");
  };
  if (j.contains("layers"))
    for (const json& entry : j["layers"]) m.memory_in_bytes |= gives_memory(entry);
  if (j.contains("stage")) m.memory_in_bytes |= gives_memory(j["stage"]);
  if (j.contains("latency")) m.latency = rd.number(j["latency"], "latency", 0, HUGE_VAL);
  if (j.contains("bandwidth")) m.bandwidth = rd.number(j["bandwidth"], "bandwidth", 0, HUGE_VAL);
  if (j.contains("host_bandwidth"))
    m.host_bandwidth = rd.number(j["host_bandwidth"], "host_bandwidth", 0, HUGE_VAL);
  if (j.contains("message_bytes"))
    m.message_bytes = rd.number(j["message_bytes"], "message_bytes", 0, HUGE_VAL);
  if (j.contains("overlap")) m.overlap = rd.number(j["overlap"], "overlap", 0, 1);
  if (j.contains("top_k")) m.top_k = rd.number(j["top_k"], "top_k", 1, 1 << 20);
  if (j.contains("weight_grad_memory"))
    m.weight_grad_memory = rd.number(j["weight_grad_memory"], "weight_grad_memory", 0, 1);
  if (j.contains("transport")) {
    const json& t = j["transport"];
    if (!t.is_string() || (t != "gloo" && t != "nccl"))
      rd.fail("transport", fmt::format("expected \"gloo\" (eager sends) or \"nccl\" (rendezvous), "
                                       "got {}",
                                       t.dump()));
    m.messages = message_model_of_transport(t.get<std::string>());
  }
  if (j.contains("post")) {
    m.post = rd.number(j["post"], "post", 0, HUGE_VAL);
    if (m.messages != MessageModel::Eager)
      rd.fail("post", "a posting time needs \"transport\": \"gloo\" (the eager message model)");
  }
  m.measured = rd.measured(j, input_name);
  if (m.measured)
    for (const auto& stage : m.measured->stages)
      m.memory_in_bytes |= stage && (stage->activation > 0 || stage->params > 0);
  m.length_model = parse_length_model(text, input_name);  // "lengths" (lengths.h)
  return m;
}

CostModel read_cost_model(const std::string& path) {
  return parse_cost_model(read_file(path), path);
}

CostModel cost_model_from_flags(const CostFlags& fl) {
  auto check = [](const char* flag, const std::optional<double>& v, double hi = HUGE_VAL) {
    if (v && (!std::isfinite(*v) || *v < 0 || *v > hi))
      throw UserError(hi == HUGE_VAL
                          ? fmt::format("expected a non-negative number, got {:g}", *v)
                          : fmt::format("expected a number between 0 and {:g}, got {:g}", hi, *v),
                      SourceLocation{flag, 0, 0, ""});
  };
  check("--cost-f", fl.f);
  check("--cost-b", fl.b);
  check("--cost-i", fl.i);
  check("--cost-w", fl.w);
  check("--cost-activation", fl.activation);
  check("--cost-params", fl.params);
  check("--cost-latency", fl.latency);
  check("--cost-bandwidth", fl.bandwidth);
  check("--cost-message", fl.message_bytes);
  check("--cost-overlap", fl.overlap, 1);
  RawCost raw;
  raw.f = fl.f.value_or(1);
  raw.b = fl.b;
  raw.i = fl.i;
  raw.w = fl.w;
  raw.activation = fl.activation.value_or(1);
  raw.params = fl.params.value_or(0);
  const LayerCost c = resolve(raw, [](const char* field, const std::string& what) {
    throw UserError(
        what == "give both i and w, or b" ? "give both --cost-i and --cost-w, or --cost-b" : what,
        SourceLocation{std::string("--cost-") + field, 0, 0, ""});
  });
  CostModel m;
  m.unit = false;
  for (char k : {'E', 't', 'm', 'L'}) m.layers[k] = c;  // and a model's own symbols (as 't')
  m.empty_stage = c;
  m.latency = fl.latency.value_or(0);
  m.bandwidth = fl.bandwidth.value_or(0);
  m.message_bytes = fl.message_bytes.value_or(0);
  m.overlap = fl.overlap.value_or(0);
  m.memory_in_bytes = fl.activation || fl.params;
  return m;
}

double parse_memory_size(const std::string& text, const char* flag) {
  const char* begin = text.c_str();
  char* end = nullptr;
  const double x = std::strtod(begin, &end);
  std::string unit(end);
  while (!unit.empty() && unit.front() == ' ') unit.erase(0, 1);
  double scale = 0;
  static const std::pair<const char*, double> kUnits[] = {{"", 1},
                                                          {"B", 1},
                                                          {"K", 1e3},
                                                          {"KB", 1e3},
                                                          {"M", 1e6},
                                                          {"MB", 1e6},
                                                          {"G", 1e9},
                                                          {"GB", 1e9},
                                                          {"T", 1e12},
                                                          {"TB", 1e12},
                                                          {"KiB", 1024.0},
                                                          {"MiB", 1048576.0},
                                                          {"GiB", 1073741824.0},
                                                          {"TiB", 1099511627776.0}};
  for (const auto& [name, value] : kUnits)
    if (unit == name) scale = value;
  if (end == begin || scale == 0 || !std::isfinite(x) || x < 0)
    throw UserError(
        fmt::format("expected a memory size such as 80GiB, 80GB or 8e10, got '{}'", text),
        SourceLocation{flag, 0, 0, ""});
  return x * scale;
}

std::string memory_check(const Simulation& sim, double limit, bool in_bytes) {
  std::vector<int> over;
  int worst = 0;
  double peak = -1;
  for (size_t r = 0; r < sim.peak_memory.size(); ++r) {
    const double total =
        sim.peak_memory[r] + (r < sim.param_memory.size() ? sim.param_memory[r] : 0.0);
    if (total > limit) over.push_back(static_cast<int>(r));
    if (total > peak) {
      peak = total;
      worst = static_cast<int>(r);
    }
  }
  const size_t w = static_cast<size_t>(worst);
  auto mem = [&](double v) { return format_memory(v, in_bytes); };
  const std::string detail = fmt::format(
      "peak {} on rank {}: activations {}, parameters {}", mem(peak), worst,
      mem(sim.peak_memory[w]), mem(w < sim.param_memory.size() ? sim.param_memory[w] : 0.0));
  if (over.empty()) return fmt::format("memory limit  {}: fits ({})", mem(limit), detail);
  std::string ranks;
  for (int r : over) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
  return fmt::format("memory limit  {}: exceeded on rank{} {} ({})", mem(limit),
                     over.size() > 1 ? "s" : "", ranks, detail);
}

CostModel unit_layer_costs() {
  return cost_model_from_flags(CostFlags{});
}

std::string describe(const CostModel& m) {
  if (m.unit) return "unit (per stage F=1, B=2, I=1, W=1; no communication cost)";
  const LayerCost& t = m.layer(LayerKind::Decoder);
  std::string s =
      fmt::format("cost model (t: F={:g} B={:g} I={:g} W={:g}", t.f, t.backward(), t.i, t.w);
  const double msg = message_time(m);
  if (msg > 0) s += fmt::format("; {:g} per message", msg);
  if (m.measured) s += fmt::format("; measured per stage of {}", m.measured->layout.source);
  if (m.overlap > 0) s += fmt::format("; overlap {:g}", m.overlap);
  if (m.messages == MessageModel::Eager)
    s += m.post > 0 ? fmt::format("; eager sends (gloo), {:g} per post", m.post)
                    : std::string("; eager sends (gloo)");
  return s + ")";
}

}  // namespace ppc
