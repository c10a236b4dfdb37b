#include "runtime/output/profile.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <nlohmann/json.hpp>
#include <set>
#include <tuple>

#include "compiler/diagnostic.h"
#include "compiler/layout.h"
#include "runtime/output/all_to_all_stats.h"
#include "runtime/output/median.h"

namespace pprt {

using nlohmann::json;
using ppc::Action;
using ppc::ActionKind;

namespace {

json opt(const std::optional<double>& v) {
  return v ? json(*v) : json(nullptr);
}
std::optional<double> opt_from(const json& j, const char* key) {
  if (!j.contains(key) || j.at(key).is_null()) return std::nullopt;
  return j.at(key).get<double>();
}

// A number as the cost file shows it: six significant digits.
json rounded(double v) {
  return json::parse(fmt::format("{:.6g}", v));
}

json layers_json(const std::vector<LayerMedians>& layers) {
  json j = json::array();
  for (const LayerMedians& l : layers)
    j.push_back({{"symbol", std::string(1, l.symbol)},
                 {"mode", ppc::memory_mode_name(l.mode)},
                 {"count", l.count},
                 {"f", l.f},
                 {"bytes", l.bytes},
                 {"recompute", l.recompute},
                 {"output", l.output}});
  return j;
}
std::vector<LayerMedians> layers_from(const json& j) {
  std::vector<LayerMedians> out;
  for (const json& e : j)
    out.push_back(LayerMedians{e.at("symbol").get<std::string>().at(0),
                               *ppc::parse_memory_mode(e.at("mode").get<std::string>()),
                               e.at("count").get<int>(), e.at("f").get<double>(),
                               e.at("bytes").get<double>(), e.at("recompute").get<double>(),
                               e.at("output").get<double>()});
  return out;
}

// Issue 42's memory modes, per layer symbol and mode: one layer's forward time, the bytes it keeps
// until its backward and its recomputation's time, the means over the stages' layers.
struct ModeMeans {
  double f = 0, bytes = 0, recompute = 0, output = 0;
  int n = 0;
};
struct LayerModes {
  std::map<std::pair<char, ppc::MemoryMode>, ModeMeans> means;
  bool any = false;  // some layer ran under a mode other than none
  const ModeMeans* find(char symbol, ppc::MemoryMode mode) const {
    auto it = means.find({symbol, mode});
    return it == means.end() ? nullptr : &it->second;
  }
};

LayerModes layer_modes(const std::vector<StageMedians>& medians) {
  LayerModes out;
  for (const StageMedians& m : medians)
    for (const LayerMedians& l : m.layers) {
      ModeMeans& e = out.means[{l.symbol, l.mode}];
      e.f += l.f * l.count;
      e.bytes += l.bytes * l.count;
      e.recompute += l.recompute * l.count;
      e.output += l.output * l.count;
      e.n += l.count;
      out.any |= l.mode != ppc::MemoryMode::None;
    }
  for (auto& [key, e] : out.means)
    if (e.n > 0) e.f /= e.n, e.bytes /= e.n, e.recompute /= e.n, e.output /= e.n;
  return out;
}

// The stages as if they had kept everything: a recomputing layer's forward (which builds no
// graph) and what it kept replaced by a layer of its symbol that kept everything, where the run
// had one (the B's and I's recomputation is left out already: ProfileRecorder).
std::vector<StageMedians> keeping_everything(std::vector<StageMedians> medians,
                                             const LayerModes& modes) {
  for (StageMedians& m : medians)
    for (const LayerMedians& l : m.layers) {
      if (l.mode != ppc::MemoryMode::Selective && l.mode != ppc::MemoryMode::Full) continue;
      const ModeMeans* none = modes.find(l.symbol, ppc::MemoryMode::None);
      if (!none) continue;
      if (m.activation) *m.activation += l.count * (none->bytes - l.bytes);
      if (m.f) *m.f = std::max(0.0, *m.f + l.count * (none->f - l.f));
    }
  return medians;
}

// The file's `layers` (docs/cost-model.md): per symbol that kept everything somewhere, its
// forward time and activation, and per recomputation mode it ran, the bytes kept (at most the
// activation) and the recomputation's time. Nothing when no layer ran under a mode.
json layers_entries(const LayerModes& modes) {
  json out = json::object();
  if (!modes.any) return out;
  for (const auto& [key, e] : modes.means) {
    const auto [symbol, mode] = key;
    if (mode != ppc::MemoryMode::None) continue;
    json entry = {{"f", rounded(e.f)}, {"activation", rounded(std::round(e.bytes))}};
    const std::pair<ppc::MemoryMode, const char*> kModes[] = {
        {ppc::MemoryMode::Selective, "selective"}, {ppc::MemoryMode::Full, "full"}};
    for (const auto& [m, name] : kModes)
      if (const ModeMeans* r = modes.find(symbol, m)) {
        entry[fmt::format("activation_{}", name)] =
            rounded(std::round(std::clamp(r->bytes, 0.0, e.bytes)));
        entry[fmt::format("recompute_{}", name)] = rounded(std::max(r->recompute, 0.0));
      }
    // A kind that never recomputed fully (the output head, on one stage): what full would keep of
    // its own, its output (its input is the layer before's output).
    if (!entry.contains("activation_full"))
      entry["activation_full"] = rounded(std::round(std::clamp(e.output, 0.0, e.bytes)));
    out[std::string(1, symbol)] = entry;
  }
  // A symbol that ran under recomputation only: its forward time (what it keeps is unknown).
  for (const auto& [key, e] : modes.means)
    if (!out.contains(std::string(1, key.first)))
      out[std::string(1, key.first)] = {{"f", rounded(e.f)}};
  return out;
}

}  // namespace

void ProfileRecorder::add(int64_t step, const PartSample& s) {
  by_step_[step][Key{s.stage, s.kind}].push_back(s);
}

std::map<int64_t, int64_t> ProfileRecorder::lengths() const {
  auto first = by_step_.begin();
  if (by_step_.size() > 1) ++first;
  std::map<int64_t, int64_t> out;
  for (auto it = first; it != by_step_.end(); ++it)
    for (const auto& [key, samples] : it->second)
      for (const PartSample& s : samples) ++out[s.length];
  return out;
}

std::vector<StageMedians> ProfileRecorder::medians(std::optional<int64_t> length) const {
  // Every step but the first, when there are several. Per step the mean of a (stage, kind)'s
  // parts (the fill and drain of a pipeline run faster than its steady state: a step's mean keeps
  // its total), then the median over the steps.
  auto first = by_step_.begin();
  if (by_step_.size() > 1) ++first;
  std::map<Key, std::vector<double>> times;
  std::map<int, std::vector<double>> activation, held;
  // Per (stage, symbol, mode): per step, one layer's forward ms, bytes and rerun ms, and the
  // layers' positions.
  using LayerKey = std::tuple<int, char, ppc::MemoryMode>;
  struct LayerSteps {
    std::vector<double> f, bytes, recompute, output;
    std::set<int> positions;
  };
  std::map<LayerKey, LayerSteps> layers;
  for (auto it = first; it != by_step_.end(); ++it) {
    struct Sum {
      double ns = 0, bytes = 0, rerun_ns = 0, output = 0;
      int n = 0;
    };
    std::map<LayerKey, Sum> step_layers;
    for (const auto& [key, samples] : it->second)
      for (const PartSample& s : samples)
        for (const LayerSample& l : s.layers) {
          const LayerKey k{key.first, l.symbol, l.mode};
          Sum& sum = step_layers[k];
          if (l.rerun) {
            sum.rerun_ns += static_cast<double>(l.ns);
            continue;
          }
          sum.ns += static_cast<double>(l.ns);
          sum.bytes += static_cast<double>(l.bytes);
          sum.output += static_cast<double>(l.output);
          ++sum.n;
          layers[k].positions.insert(l.position);
        }
    for (const auto& [k, sum] : step_layers) {
      if (sum.n == 0) continue;
      LayerSteps& ls = layers[k];
      ls.f.push_back(sum.ns / sum.n / 1e6);
      ls.bytes.push_back(sum.bytes / sum.n);
      ls.recompute.push_back(sum.rerun_ns / sum.n / 1e6);
      ls.output.push_back(sum.output / sum.n);
    }
    for (const auto& [key, samples] : it->second) {
      double ns = 0, bytes = 0;
      std::vector<double> freed;
      for (const PartSample& s : samples) {
        if (length && s.length != *length) continue;
        // A B's or I's recomputation left out: the file holds what keeping everything costs
        // (the compiler adds what the plan's modes cost, memory_costs.h).
        ns += static_cast<double>(s.ns - s.recompute_ns);
        bytes += static_cast<double>(std::max<int64_t>(s.bytes, 0));
        freed.push_back(static_cast<double>(std::max<int64_t>(-s.bytes, 0)));
      }
      if (freed.empty()) continue;  // (none of that length)
      const auto n = static_cast<double>(freed.size());
      times[key].push_back(ns / n / 1e6);
      if (key.second == ActionKind::F) activation[key.first].push_back(bytes / n);
      // What a W frees: the median of the step's (its first W on a stage also allocates the
      // parameters' gradients, which stay).
      if (key.second == ActionKind::W) held[key.first].push_back(median(freed));
    }
  }
  std::map<int, StageMedians> out;
  for (const auto& [key, v] : times) {
    StageMedians& m = out[key.first];
    m.stage = key.first;
    const double t = median(v);
    switch (key.second) {
      case ActionKind::F:
        m.f = t;
        break;
      case ActionKind::B:
        m.b = t;
        break;
      case ActionKind::I:
        m.i = t;
        break;
      case ActionKind::W:
        m.w = t;
        break;
      default:
        break;
    }
  }
  for (const auto& [stage, v] : activation) out[stage].activation = median(v);
  for (const auto& [stage, v] : held) out[stage].held = median(v);
  for (const auto& [k, ls] : layers) {
    if (ls.f.empty()) continue;
    const auto& [stage, symbol, mode] = k;
    out[stage].layers.push_back(LayerMedians{symbol, mode, static_cast<int>(ls.positions.size()),
                                             median(ls.f), median(ls.bytes), median(ls.recompute),
                                             median(ls.output)});
  }
  std::vector<StageMedians> list;
  for (auto& [stage, m] : out) list.push_back(m);
  return list;
}

namespace {

json medians_json(const std::vector<StageMedians>& medians) {
  json j = json::array();
  for (const StageMedians& m : medians)
    j.push_back({{"stage", m.stage},
                 {"f", opt(m.f)},
                 {"b", opt(m.b)},
                 {"i", opt(m.i)},
                 {"w", opt(m.w)},
                 {"activation", opt(m.activation)},
                 {"held", opt(m.held)},
                 {"params", m.params},
                 {"layers", layers_json(m.layers)}});
  return j;
}

void medians_from(const json& j, std::vector<StageMedians>& out) {
  for (const json& e : j)
    out.push_back(StageMedians{e.at("stage").get<int>(), opt_from(e, "f"), opt_from(e, "b"),
                               opt_from(e, "i"), opt_from(e, "w"), opt_from(e, "activation"),
                               opt_from(e, "held"), e.at("params").get<int64_t>(),
                               layers_from(e.at("layers"))});
}

}  // namespace

void publish_profile(Store& store, int rank, const std::vector<StageMedians>& medians) {
  store.set(fmt::format("profile/{}", rank), medians_json(medians).dump());
}

std::vector<StageMedians> gather_profiles(Store& store, const Topology& topology) {
  std::vector<StageMedians> out;
  for (int r = 0; r < topology.pp(); ++r)
    medians_from(json::parse(store.get(fmt::format("profile/{}", topology.global(r, 0)))), out);
  return out;
}

void publish_length_profiles(Store& store, int rank, const ProfileRecorder& recorder) {
  json j = json::array();
  const std::map<int64_t, int64_t> lengths = recorder.lengths();
  if (lengths.size() > 1)
    for (const auto& [length, parts] : lengths)
      j.push_back({{"length", length},
                   {"parts", parts},
                   {"stages", medians_json(recorder.medians(length))}});
  store.set(fmt::format("profile-lengths/{}", rank), j.dump());
}

LengthProfiles gather_length_profiles(Store& store, const Topology& topology) {
  LengthProfiles out;
  for (int r = 0; r < topology.pp(); ++r)
    for (const json& e :
         json::parse(store.get(fmt::format("profile-lengths/{}", topology.global(r, 0))))) {
      LengthMedians& m = out.per_length[e.at("length").get<int64_t>()];
      m.parts += e.at("parts").get<int64_t>();
      medians_from(e.at("stages"), m.stages);
    }
  return out;
}

std::string profile_json(const ppc::Plan& plan, int64_t microbatch_rows,
                         const std::vector<int64_t>& boundary_elements,
                         const std::vector<StageMedians>& measured_medians,
                         const std::vector<RankReport>& ranks, int activation_bytes,
                         const std::string& transport, int64_t seq_len,
                         const LengthProfiles& by_length) {
  const int S = plan.stages_per_copy();
  const LayerModes modes = layer_modes(measured_medians);
  const std::vector<StageMedians> medians = keeping_everything(measured_medians, modes);
  PPC_INTERNAL_ASSERT(static_cast<int>(boundary_elements.size()) >= S - 1,
                      "a message size per boundary");
  // The fraction of a microbatch's activation kept from its I until its W, over the stages that
  // ran both.
  double held = 0, act = 0;
  for (const StageMedians& m : medians)
    if (m.held && m.activation) held += *m.held, act += *m.activation;
  // Parameters (elements) per layout stage (DualPipe's two copies of a stage hold the same).
  std::vector<int64_t> numel(static_cast<size_t>(S), 0);
  for (const StageMedians& m : medians)
    numel[static_cast<size_t>(plan.layout_stage(m.stage))] = m.params;
  const std::vector<std::optional<double>> optimizer = optimizer_ms(plan, numel, ranks);
  // The "stages" entries of `of` (per rank and plan stage).
  auto stage_entries = [&](const std::vector<StageMedians>& of) {
    // DualPipe: both copies of a layout stage pooled (their mean).
    struct Sum {
      double v = 0;
      int n = 0;
      void add(const std::optional<double>& x) {
        if (x) v += *x, ++n;
      }
      json get() const { return n ? rounded(v / n) : json(nullptr); }
    };
    std::vector<std::array<Sum, 5>> sums(static_cast<size_t>(S));
    for (const StageMedians& m : of) {
      auto& s = sums[static_cast<size_t>(plan.layout_stage(m.stage))];
      s[0].add(m.f);
      s[1].add(m.b);
      s[2].add(m.i);
      s[3].add(m.w);
      s[4].add(m.activation);
    }
    json stages = json::array();
    for (int k = 0; k < S; ++k) {
      const auto& s = sums[static_cast<size_t>(k)];
      if (s[0].n == 0) {
        stages.push_back(nullptr);
        continue;
      }
      json e = {{"f", s[0].get()}};
      if (s[1].n) e["b"] = s[1].get();
      if (s[2].n && s[3].n) e["i"] = s[2].get(), e["w"] = s[3].get();
      if (s[4].n) e["activation"] = rounded(std::round(s[4].v / s[4].n));
      e["params"] = numel[static_cast<size_t>(k)] * 4;  // float32
      if (k < static_cast<int>(optimizer.size()) && optimizer[static_cast<size_t>(k)])
        e["optimizer"] = rounded(*optimizer[static_cast<size_t>(k)]);
      stages.push_back(e);
    }
    return stages;
  };
  // Microbatches of several lengths: the file's own entries at the length most parts ran at.
  std::optional<int64_t> own_length;
  if (by_length.per_length.size() > 1)
    for (const auto& [length, m] : by_length.per_length)
      if (!own_length || m.parts >= by_length.per_length.at(*own_length).parts) own_length = length;
  const json stages =
      stage_entries(own_length ? by_length.per_length.at(*own_length).stages : medians);
  // A message's elements grow with the length.
  const double message_scale =
      own_length && by_length.boundary_length > 0
          ? static_cast<double>(*own_length) / static_cast<double>(by_length.boundary_length)
          : 1.0;
  std::vector<std::optional<double>> times = transfer_times(plan, ranks);
  // A message costs its ranks its posting too (the runtime's, per operation). Under the eager
  // model (Gloo) the file says so ("post", charged to the posting rank); the rendezvous model has
  // no other place for it than the message's time.
  const double post = post_ms_per_op(plan, ranks);
  const bool eager = transport == "gloo";
  if (!eager)
    for (auto& t : times)
      if (t) *t += post;
  std::vector<double> measured;
  for (const auto& t : times)
    if (t) measured.push_back(*t);
  json boundaries = json::array();
  for (int k = 0; k + 1 < S; ++k) {
    json e = {{"message_bytes",
               std::llround(static_cast<double>(boundary_elements[static_cast<size_t>(k)]) *
                            message_scale) *
                   activation_bytes}};
    const auto& t = k < static_cast<int>(times.size()) ? times[static_cast<size_t>(k)]
                                                       : std::optional<double>{};
    if (t)
      e["time"] = rounded(*t);
    else if (!measured.empty())
      e["time"] = rounded(median(measured));
    boundaries.push_back(e);
  }
  json out = {
      {"comment",
       fmt::format("pprun --profile: {} at pp {}, {} microbatches of {} sequences; times in ms "
                   "(per step means, medians over the steps after the first), bytes",
                   plan.schedule.empty() ? "a plan" : plan.schedule, plan.pp(), plan.microbatches,
                   microbatch_rows)},
      {"layout", ppc::layout_string(plan.layout)},
      {"stages", stages},
      {"boundaries", boundaries}};
  if (act > 0) out["weight_grad_memory"] = rounded(std::clamp(held / act, 0.0, 1.0));
  if (own_length) {
    json measured = json::array();
    for (const auto& [length, m] : by_length.per_length)
      if (length != *own_length)
        measured.push_back({{"seq_len", length}, {"stages", stage_entries(m.stages)}});
    out["lengths"] = {{"seq_len", *own_length}, {"measured", measured}};
  }
  if (const json layers = layers_entries(modes); !layers.empty()) out["layers"] = layers;
  // How the transport that ran the plan moves messages (the simulator's message model: Gloo's
  // sends are posted and forgotten).
  if (transport == "gloo" || transport == "nccl") out["transport"] = transport;
  if (eager) out["post"] = rounded(post);
  // Expert parallelism: one all-to-all as measured, and the experts per token it carried.
  const AllToAllProfile a2a = profile_all_to_all(ranks, microbatch_rows * seq_len);
  if (a2a.ms > 0) {
    out["layers"] = {{"t", {{"f", 0}, {"all_to_all", rounded(a2a.ms)}}}};
    if (a2a.top_k >= 1) out["top_k"] = rounded(a2a.top_k);
  }
  return out.dump(1) + "\n";
}

}  // namespace pprt
