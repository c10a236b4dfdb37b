// A rank's parameters and stages, built from a pprt::Model (stage.h).
#include "runtime/model/stage.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/autocast_mode.h>
#include <ATen/core/grad_mode.h>
#include <c10/util/Exception.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <mutex>

#include "compiler/diagnostic.h"
#include "runtime/data/token_source.h"
#include "runtime/fail.h"
#include "runtime/model/autograd_split.h"
#include "runtime/model/layer_probe.h"
#include "runtime/model/layer_shapes.h"
#include "runtime/model/model_facts.h"
#include "runtime/model/offload.h"
#include "runtime/model/recompute.h"

namespace pprt {

using detail::declared_out;
using detail::shape_text;

namespace {

uint64_t name_hash(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

// Layers are made one at a time in a process (ranks run as threads in tests): torch's default
// generator is the process's.
std::mutex& build_mutex() {
  static std::mutex m;
  return m;
}

// Torch's default CPU generator seeded with `seed` while it lives, then restored.
class SeededGenerator {
 public:
  explicit SeededGenerator(uint64_t seed) : gen_(at::detail::getDefaultCPUGenerator()) {
    std::lock_guard<std::mutex> lock(gen_.mutex());
    saved_ = gen_.get_state();
    gen_.set_current_seed(seed);
  }
  ~SeededGenerator() {
    std::lock_guard<std::mutex> lock(gen_.mutex());
    gen_.set_state(saved_);
  }
  SeededGenerator(const SeededGenerator&) = delete;
  SeededGenerator& operator=(const SeededGenerator&) = delete;

 private:
  at::Generator gen_;
  at::Tensor saved_;
};

std::string first_line(const std::string& s) {
  return s.substr(0, s.find('\n'));
}

// LibTorch's autocast in `dtype` on `device` while it lives (MixedPrecision::Autocast), as
// torch.autocast enters and leaves it: its cache of cast weights is emptied when the outermost
// one ends.
class Autocast {
 public:
  Autocast(const at::Device& device, at::ScalarType dtype) : type_(device.type()) {
    was_ = at::autocast::is_autocast_enabled(type_);
    dtype_was_ = at::autocast::get_autocast_dtype(type_);
    at::autocast::set_autocast_enabled(type_, true);
    at::autocast::set_autocast_dtype(type_, dtype);
    at::autocast::increment_nesting();
  }
  ~Autocast() {
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    at::autocast::set_autocast_enabled(type_, was_);
    at::autocast::set_autocast_dtype(type_, dtype_was_);
  }
  Autocast(const Autocast&) = delete;
  Autocast& operator=(const Autocast&) = delete;

 private:
  at::DeviceType type_;
  bool was_;
  at::ScalarType dtype_was_;
};

// "[2, 8, 8]" for one unnamed tensor, "h [2, 8, 8], mtp.1 [2, 8, 8]" otherwise.
std::string shapes_text(const std::vector<TensorShape>& ts) {
  if (ts.size() == 1 && ts.front().name.empty()) return shape_text(ts.front().shape);
  std::vector<std::string> parts;
  for (const TensorShape& t : ts)
    parts.push_back(fmt::format("{}{}", t.name.empty() ? "" : t.name + " ", shape_text(t.shape)));
  return parts.empty() ? "nothing" : fmt::format("{}", fmt::join(parts, ", "));
}

std::vector<TensorShape> shapes_of(const Tensors& ts) {
  std::vector<TensorShape> out;
  for (const NamedTensor& t : ts)
    out.push_back(
        TensorShape{t.name, t.tensor.defined() ? t.tensor.sizes().vec() : std::vector<int64_t>{}});
  return out;
}

}  // namespace

NamedParam& ParamStore::add(const std::string& name, const at::Tensor& tensor) {
  PPC_INTERNAL_ASSERT(!index_.count(name), fmt::format("parameter '{}' added twice", name));
  index_.emplace(name, params_.size());
  params_.push_back(NamedParam{name, tensor, tensor.dim() >= 2});
  return params_.back();
}

NamedParam* ParamStore::find(const std::string& name) {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &params_[it->second];
}

int64_t ParamStore::numel() const {
  int64_t n = 0;
  for (const NamedParam& p : params_) n += p.tensor.numel();
  return n;
}

namespace detail {

at::Tensor SharedParams::get(const std::string& name, const std::vector<int64_t>& shape,
                             const std::function<void(at::Tensor&)>& init) {
  if (auto it = made_.find(name); it != made_.end()) {
    if (it->second.sizes().vec() != shape)
      fail("shared parameter '" + name + "'",
           fmt::format("asked for with shape {}, but it was made with shape {}", shape_text(shape),
                       shape_text(it->second.sizes())));
    return it->second;
  }
  if (store_.find(name))
    fail("shared parameter '" + name + "'",
         "a layer holds a parameter of that name that is not shared (LayerInfo::shared)");
  at::Tensor t = at::empty(shape, at::TensorOptions().dtype(at::kFloat));
  {
    SeededGenerator gen(mix64(seed_, name_hash(name)));
    at::NoGradGuard no_grad;
    init(t);
  }
  t.set_requires_grad(true);
  made_.emplace(name, t);
  names_.emplace(t.unsafeGetTensorImpl(), name);
  return t;
}

const std::string* SharedParams::name_of(const at::Tensor& t) const {
  auto it = names_.find(t.unsafeGetTensorImpl());
  return it == names_.end() ? nullptr : &it->second;
}

}  // namespace detail
std::vector<LayerPlace> layer_places(const ppc::Layout& layout) {
  std::vector<LayerPlace> out;
  std::unordered_map<char, int> seen;
  for (size_t s = 0; s < layout.stages.size(); ++s)
    for (ppc::LayerKind k : layout.stages[s]) {
      const char c = ppc::layer_symbol(k);
      out.push_back(
          LayerPlace{c, seen[c]++, 0, static_cast<int>(out.size()), 0, static_cast<int>(s)});
    }
  for (LayerPlace& p : out) {
    p.count = seen[p.symbol];
    p.layers = static_cast<int>(out.size());
  }
  return out;
}

// --- Stage --------------------------------------------------------------------------------------

struct Stage::Impl {
  struct Built {
    LayerPlace place;
    const Model::Symbol* symbol;
    Layer layer;
    ppc::MemoryMode mode = ppc::MemoryMode::None;  // ModelContext::memory's for it
  };
  ModelContext ctx;
  int stage = -1;
  std::vector<Built> layers;
  bool first = false, last = false, split = true;
  std::vector<std::string> names;
  std::vector<Reported> reported;  // what the model declares it reports, for this layout
  int64_t runs = 0;                // layers' forwards run (Stage::layer_runs)

  static Tensors call(const Built& b, const Tensors& x, const Microbatch& mb) {
    if (b.layer.forward_tensors) return b.layer.forward_tensors(x, mb);
    return Tensors{NamedTensor{"", b.layer.forward(x.front().tensor, mb)}};
  }

  // Layer `b` on `x` (run_mode), and under --profile with a probe current (layer_probe.h) its
  // time, what it leaves allocated and its mode, as which what it recomputes reports too (a
  // layer told to recompute fully whose inputs need no gradient keeps everything: none).
  Tensors run_layer(const Built& b, const Tensors& x, const Microbatch& mb, LossReport* losses) {
    LayerProbe* probe = LayerProbe::current();
    if (!probe || !at::GradMode::is_enabled()) return run_mode(b, x, mb, losses);
    const bool rerunnable = std::any_of(x.begin(), x.end(), [](const NamedTensor& t) {
      return t.tensor.defined() && t.tensor.requires_grad();
    });
    const ppc::MemoryMode mode =
        b.mode == ppc::MemoryMode::Full && !rerunnable ? ppc::MemoryMode::None : b.mode;
    const LayerProbe::Layer layer(b.place.symbol, mode, b.place.position);
    const int64_t live = probe->live();
    const auto t0 = std::chrono::steady_clock::now();
    Tensors y = run_mode(b, x, mb, losses);
    const auto ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0)
            .count();
    int64_t output = 0;
    for (const NamedTensor& t : y)
      if (t.tensor.defined()) output += static_cast<int64_t>(t.tensor.nbytes());
    probe->add(LayerSample{b.place.symbol, mode, false, b.place.position, ns,
                           probe->live() - live, output});
    return y;
  }

  // Layer `b` on `x`: at once, or (its mode full, under autograd, with an input that requires
  // grad) keeping only `x` and rerunning it in its backward (recompute.h). The auxiliary losses'
  // terms it adds to `losses` are outputs of the recomputed piece too, so that their gradients
  // flow through the rerun; what it reports is recorded by its first run only.
  Tensors run_mode(const Built& b, const Tensors& x, const Microbatch& mb, LossReport* losses) {
    bool full = b.mode == ppc::MemoryMode::Full && at::GradMode::is_enabled();
    if (full)
      full = std::any_of(x.begin(), x.end(), [](const NamedTensor& t) {
        return t.tensor.defined() && t.tensor.requires_grad();
      });
    if (!full) {
      ++runs;
      const OffloadPacking packing(b.mode == ppc::MemoryMode::Offload);  // (offload.h)
      return call(b, x, mb);
    }
    struct Shared {
      bool first = true;
      std::vector<std::string> names;  // of the layer's outputs
    };
    auto shared = std::make_shared<Shared>();
    std::vector<std::string> in_names;
    std::vector<at::Tensor> in;
    for (const NamedTensor& t : x) {
      in_names.push_back(t.name);
      in.push_back(t.tensor);
    }
    const Built* layer = &b;
    TensorFn f = [layer, shared, in_names, losses, tokens = mb.tokens(), shape = mb.shape(),
                  index = mb.index(), work = mb.weight_work()](const std::vector<at::Tensor>& in) {
      LossReport scratch;  // a rerun's reports are the first run's again
      LossReport* report = shared->first ? losses : &scratch;
      const size_t before = report->terms.size();
      const Microbatch m(tokens, shape, index, work, report);
      Tensors xs;
      for (size_t i = 0; i < in.size(); ++i) xs.push_back(NamedTensor{in_names[i], in[i]});
      Tensors y = call(*layer, xs, m);
      std::vector<at::Tensor> out;
      shared->names.clear();
      for (NamedTensor& t : y) {
        shared->names.push_back(t.name);
        out.push_back(std::move(t.tensor));
      }
      for (size_t k = before; k < report->terms.size(); ++k) out.push_back(report->terms[k]);
      report->terms.resize(before);  // they come back as the piece's outputs
      shared->first = false;
      return out;
    };
    const size_t terms = losses->terms.size();
    std::vector<at::Tensor> out = recomputed(std::move(f), in, &runs);
    PPC_INTERNAL_ASSERT(out.size() >= shared->names.size(), "a recomputed layer's outputs");
    Tensors y;
    for (size_t k = 0; k < shared->names.size(); ++k)
      y.push_back(NamedTensor{shared->names[k], out[k]});
    for (size_t k = shared->names.size(); k < out.size(); ++k) losses->terms.push_back(out[k]);
    PPC_INTERNAL_ASSERT(losses->terms.size() >= terms, "a recomputed layer's terms");
    return y;
  }

  // What `where` (a layer, the loss) reported from entry `from` of `r` on must be declared.
  void check_reported(const LossReport& r, size_t from, const std::string& where) const {
    for (size_t i = from; i < r.values.size(); ++i) {
      const LossReport::Value& v = r.values[i];
      if (std::find(reported.begin(), reported.end(), Reported{v.name, v.loss}) == reported.end())
        fail(where, fmt::format("it reports the {} '{}', which the model does not declare for "
                                "this layout ({})",
                                v.loss ? "auxiliary loss" : "metric", v.name,
                                v.loss ? "Model::aux_loss" : "Model::metric"));
    }
  }

  std::string where(const Built& b) const {
    std::string prefix = b.layer.prefix;
    if (!prefix.empty() && prefix.back() == '.') prefix.pop_back();
    return fmt::format("{}, layer '{}' #{} ({})",
                       stage < 0 ? std::string("the model") : fmt::format("stage {}", stage),
                       b.place.symbol, b.place.index, prefix);
  }

  // Runs `f`, turning what a model's code throws into a located user error.
  template <class F>
  auto located(const std::string& where, const char* what, F&& f) {
    try {
      return f();
    } catch (const ppc::UserError&) {
      throw;
    } catch (const pprt::Error& e) {
      fail(e.where(), e.what());
    } catch (const c10::Error& e) {
      fail(where, fmt::format("{}: {}", what, first_line(e.what_without_backtrace())));
    } catch (const std::exception& e) {
      fail(where, fmt::format("{}: {}", what, first_line(e.what())));
    }
  }
};

Stage::Stage(const ModelContext& ctx, const ppc::Layout& layout, int stage,
             detail::SharedParams& params)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.ctx = ctx;
  m.stage = stage;
  const Model& model = *ctx.model;
  m.reported = model.reported(layout_info(layout));
  const std::vector<LayerPlace> places = layer_places(layout);
  ParamStore& store = params.store();
  for (const LayerPlace& p : places) {
    if (stage >= 0 && p.stage != stage) continue;
    const Model::Symbol* sym = model.symbol(p.symbol);
    if (!sym)
      fail("layout", fmt::format("symbol '{}' (stage {}) has no layer in the model '{}'", p.symbol,
                                 p.stage, model.family()));
    LayerInfo info;
    info.symbol = p.symbol;
    info.name = sym->name;
    info.index = p.index;
    info.count = p.count;
    info.position = p.position;
    info.layers = p.layers;
    info.stage = p.stage;
    info.vocab = ctx.setup.vocab;
    info.seq_len = ctx.setup.seq_len;
    info.seed = ctx.seed;
    info.aux_loss_weight = ctx.aux_loss_weight;
    info.dtype = ctx.dtype;
    info.params = &params;
    info.layout = layout_info(layout);
    const ppc::MemoryMode mode = ctx.memory.mode_of(p.stage, ppc::own_layer(p.symbol));
    info.selective_recompute = mode == ppc::MemoryMode::Selective;
    info.experts = ctx.experts;
    Impl::Built b{p, sym, Layer{}, mode};
    b.layer.prefix = fmt::format("{}.{}.", sym->name, p.index);
    const std::string where = m.where(b);
    {
      std::lock_guard<std::mutex> lock(build_mutex());
      SeededGenerator gen(
          mix64(ctx.seed, mix64(static_cast<uint64_t>(p.symbol), static_cast<uint64_t>(p.index))));
      b.layer = m.located(where, "its factory failed", [&] { return sym->make(info); });
    }
    if (b.layer.prefix.empty()) b.layer.prefix = fmt::format("{}.{}.", sym->name, p.index);
    if (!b.layer.forward == !b.layer.forward_tensors)
      fail(m.where(b), b.layer.forward
                           ? "the factory made a layer with both forwards (Layer::forward "
                             "and Layer::forward_tensors)"
                           : "the factory made a layer without a forward");
    // Its parameters, by global name.
    auto hold = [&](const std::string& name, const at::Tensor& t) {
      if (NamedParam* have = store.find(name)) {
        if (have->tensor.unsafeGetTensorImpl() != t.unsafeGetTensorImpl())
          fail(m.where(b),
               fmt::format("parameter '{}' exists already on this rank (another layer made one "
                           "of that name); a parameter used by several layers must come from "
                           "LayerInfo::shared",
                           name));
      } else {
        store.add(name, t);
      }
      if (std::find(m.names.begin(), m.names.end(), name) == m.names.end()) m.names.push_back(name);
    };
    if (b.layer.module)
      for (const auto& item : b.layer.module->named_parameters(/*recurse=*/true)) {
        const at::Tensor& t = item.value();
        if (!t.requires_grad()) continue;  // frozen: not trained
        const std::string* shared = params.name_of(t);
        hold(shared ? *shared : b.layer.prefix + item.key(), t);
      }
    for (const std::string& name : b.layer.expert_params)
      if (NamedParam* e = store.find(name)) e->expert = true;
    m.split = m.split && b.layer.splits_backward;
    m.layers.push_back(std::move(b));
  }
  if (!m.layers.empty()) {
    m.first = m.layers.front().place.position == 0;
    m.last = m.layers.back().place.position == m.layers.back().place.layers - 1;
    if (ctx.generic_split || generic_split_forced()) m.split = false;
  } else {
    m.split = true;  // nothing to split
  }
  // The device: every module (parameters and buffers), and the parameters held otherwise.
  at::NoGradGuard no_grad;
  for (Impl::Built& b : m.layers)
    if (b.layer.module) b.layer.module->to(ctx.device);
  for (const std::string& name : m.names) {
    at::Tensor& t = store.find(name)->tensor;
    if (t.device() != ctx.device) t.set_data(t.to(ctx.device));
  }
}

Stage::~Stage() = default;
Stage::Stage(Stage&&) noexcept = default;
Stage& Stage::operator=(Stage&&) noexcept = default;

int Stage::index() const {
  return impl_->stage;
}
bool Stage::has_loss() const {
  return impl_->last;
}
bool Stage::takes_tokens() const {
  return impl_->first;
}
int64_t Stage::layer_runs() const {
  return impl_->runs;
}
bool Stage::splits_backward() const {
  return impl_->split;
}
const std::vector<std::string>& Stage::param_names() const {
  return impl_->names;
}
std::vector<std::pair<std::string, at::Tensor>> Stage::step_sums() const {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const Impl::Built& b : impl_->layers)
    for (size_t i = 0; i < b.layer.step_sums.size(); ++i)
      out.emplace_back(fmt::format("{}{}.{}", b.place.symbol, b.place.index, i),
                       b.layer.step_sums[i]);
  return out;
}

std::string Stage::describe() const {
  const Impl& m = *impl_;
  if (m.stage < 0) return "the whole model";
  if (m.layers.empty()) return fmt::format("stage {} (empty)", m.stage);
  const auto& a = m.layers.front().place;
  const auto& b = m.layers.back().place;
  return fmt::format("stage {} (layers '{}' #{} .. '{}' #{})", m.stage, a.symbol, a.index, b.symbol,
                     b.index);
}

Tensors Stage::forward(const Tensors& state, const at::Tensor& rows, const MicrobatchShape& shape,
                       int microbatch, WeightWork* work, LossReport* losses) {
  Impl& m = *impl_;
  if (m.layers.empty()) {  // an empty stage passes its input on
    Tensors out;
    for (const NamedTensor& t : state)
      out.push_back(NamedTensor{t.name, t.tensor.view_as(t.tensor)});
    if (!out.empty()) return out;
    // The model's first stage, empty, before its first layer: a placeholder for the next stage.
    return {
        NamedTensor{"", at::zeros({1}, at::TensorOptions().dtype(at::kFloat).device(m.ctx.device))
                            .requires_grad_(true)}};
  }
  LossReport own;  // where the caller keeps no report: the auxiliary losses still join the loss
  if (!losses) losses = &own;
  const Microbatch mb(rows, shape, microbatch, work, losses);
  std::optional<Autocast> autocast;  // the layers and the loss of a model that asks for it
  if (m.ctx.model->mixed_precision() == MixedPrecision::Autocast && m.ctx.dtype != at::kFloat)
    autocast.emplace(m.ctx.device, m.ctx.dtype);
  Tensors x = m.first ? Tensors{NamedTensor{"", mb.inputs()}} : state;
  for (const Impl::Built& b : m.layers) {
    const std::vector<TensorShape> in = shapes_of(x);
    const std::string where = m.where(b);
    const size_t reported = losses->values.size();
    if (b.layer.forward_tensors) {
      x = m.located(where, "its forward failed", [&] { return m.run_layer(b, x, mb, losses); });
    } else {
      if (x.size() != 1)
        fail(where, fmt::format("it takes one tensor (Layer::forward), but gets {}: give it "
                                "Layer::forward_tensors",
                                shapes_text(in)));
      x = m.located(where, "its forward failed", [&] { return m.run_layer(b, x, mb, losses); });
    }
    if (x.empty()) fail(where, "its forward returned no tensor");
    for (const NamedTensor& t : x)
      if (!t.tensor.defined())
        fail(where, fmt::format("its forward returned no tensor{}",
                                t.name.empty() ? "" : " '" + t.name + "'"));
    m.check_reported(*losses, reported, where);
    const auto want = m.located(where, "its shape function failed",
                                [&] { return declared_out(*b.symbol, in, shape, m.ctx.setup); });
    if (want && shapes_of(x) != *want)
      fail(where, fmt::format("its output is {}, but its declared shape for an input {} is {}",
                              shapes_text(shapes_of(x)), shapes_text(in), shapes_text(*want)));
  }
  // A stage before the last leaves its auxiliary losses' terms in `losses`: the executor joins
  // them to its backward (aux_loss.h).
  if (!m.last) return x;
  const std::string where =
      m.stage < 0 ? std::string("the model") : fmt::format("stage {}", m.stage);
  if (x.size() != 1)
    fail(where, fmt::format("the loss must be a scalar, but the last layer gives {}",
                            shapes_text(shapes_of(x))));
  at::Tensor loss = std::move(x.front().tensor);
  if (const LossFn& fn = m.ctx.model->loss()) {
    const std::string at_loss = fmt::format("stage {}, the loss", m.stage);
    const size_t reported = losses->values.size();
    loss = m.located(at_loss, "the loss failed", [&] { return fn(loss, mb); });
    m.check_reported(*losses, reported, at_loss);
  }
  if (!loss.defined() || loss.numel() != 1)
    fail(where,
         fmt::format("the loss must be a scalar, but it is {}{}",
                     loss.defined() ? shape_text(loss.sizes()) : "undefined",
                     m.ctx.model->loss() ? "" : " (the last layer's output: give Model::loss)"));
  if (loss.dim() != 0) loss = loss.reshape({});
  if (loss.scalar_type() != at::kFloat) loss = loss.to(at::kFloat);  // fp32 (mixed precision)
  if (!losses->main.defined()) losses->main = loss.detach();
  // The auxiliary losses of every layer of this stage (of the whole model, unpipelined) join it.
  for (const at::Tensor& term : losses->terms) loss = loss + term;
  losses->terms.clear();
  return {NamedTensor{"", std::move(loss)}};
}

at::Tensor Stage::forward(const at::Tensor& state, const at::Tensor& rows, int microbatch,
                          WeightWork* work, LossReport* losses) {
  const Tensors in = state.defined() ? Tensors{NamedTensor{"", state}} : Tensors{};
  Tensors out = forward(in, rows, impl_->ctx.model->shape_of(rows), microbatch, work, losses);
  PPC_INTERNAL_ASSERT(out.size() == 1, fmt::format("{} gives {} tensors: call forward(Tensors)",
                                                   describe(), out.size()));
  return std::move(out.front().tensor);
}
RankModel::RankModel(const ModelContext& c) : ctx(c), shared(store, c.seed) {}

Stage& RankModel::add(const ppc::Layout& layout, int stage) {
  owned.push_back(std::make_unique<Stage>(ctx, layout, stage, shared));
  stages.push_back(owned.back().get());
  return *owned.back();
}

}  // namespace pprt
