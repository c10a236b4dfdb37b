// pprt::Model (pprt/pprt.h) and pprt::Family (pprt/family.h): a model's registrations and hooks,
// a family's options and configuration, and pprt::main.
#include <fmt/format.h>

#include "compiler/diagnostic.h"
#include "pprt/main.h"
#include "pprt/pprt.h"
#include "runtime/fail.h"
#include "runtime/launch/cli.h"
#include "runtime/model/model_facts.h"
#include "runtime/model/stage.h"

namespace pprt {

struct Model::Impl {
  std::string family;
  std::vector<Symbol> symbols;
  LossFn loss;
  MixedPrecision precision = MixedPrecision::None;
  ParamsFn parameters;
  CheckFn check;
  DescribeFn describe;
  HfFormatFn hugging_face;
  std::function<int(const LayoutInfo&)> routed_experts;  // --ep
  struct Declared {
    Reported value;
    std::function<bool(const LayoutInfo&)> present;
  };
  std::vector<Declared> reports;
  std::vector<std::pair<std::string, DimensionFn>> dimensions;

  Model& add(Model& m, Symbol sym) {
    PPC_INTERNAL_ASSERT(sym.make != nullptr, "a layer needs a factory");
    for (Symbol& s : symbols)
      if (s.symbol == sym.symbol) {  // registered again: the later registration wins
        s = std::move(sym);
        return m;
      }
    symbols.push_back(std::move(sym));
    return m;
  }

  Model& declare(Model& m, std::string name, bool loss,
                 std::function<bool(const LayoutInfo&)> present) {
    for (Declared& d : reports)
      if (d.value.name == name && d.value.loss == loss) {  // declared again: the later wins
        d.present = std::move(present);
        return m;
      }
    reports.push_back(Declared{Reported{std::move(name), loss}, std::move(present)});
    return m;
  }
};

Model::Model(std::string family) : impl_(std::make_shared<Impl>()) {
  impl_->family = std::move(family);
}

Model& Model::layer(char symbol, std::string name, LayerFactory make, ShapeFn shape) {
  SetupShapeFn sized;
  if (shape)
    sized = [shape = std::move(shape)](const std::vector<int64_t>& in, const ModelSetup&) {
      return shape(in);
    };
  return layer(symbol, std::move(name), std::move(make), std::move(sized));
}

Model& Model::layer(char symbol, std::string name, LayerFactory make, SetupShapeFn shape) {
  return impl_->add(*this, Symbol{symbol, std::move(name), std::move(make), std::move(shape), {}});
}

Model& Model::layer(char symbol, std::string name, LayerFactory make, TensorsShapeFn shape) {
  return impl_->add(*this, Symbol{symbol, std::move(name), std::move(make), {}, std::move(shape)});
}

Model& Model::dimension(std::string name, DimensionFn fn) {
  PPC_INTERNAL_ASSERT(fn != nullptr, "a dimension needs a function");
  impl_->dimensions.emplace_back(std::move(name), std::move(fn));
  return *this;
}

MicrobatchShape Model::shape_of(const at::Tensor& rows) const {
  MicrobatchShape s;
  s.batch = rows.size(0);
  s.length = rows.size(1) - 1;
  for (const auto& [name, fn] : impl_->dimensions) s.sizes.emplace_back(name, fn(rows));
  return s;
}

Model& Model::loss(LossFn fn) {
  impl_->loss = std::move(fn);
  return *this;
}

const std::string& Model::family() const {
  return impl_->family;
}

const Model::Symbol* Model::symbol(char c) const {
  for (const Symbol& s : impl_->symbols)
    if (s.symbol == c) return &s;
  return nullptr;
}

std::vector<char> Model::symbols() const {
  std::vector<char> out;
  for (const Symbol& s : impl_->symbols) out.push_back(s.symbol);
  return out;
}

const LossFn& Model::loss() const {
  return impl_->loss;
}

Model& Model::mixed_precision(MixedPrecision how) {
  impl_->precision = how;
  return *this;
}
Model& Model::parameters(ParamsFn fn) {
  impl_->parameters = std::move(fn);
  return *this;
}
Model& Model::check(CheckFn fn) {
  impl_->check = std::move(fn);
  return *this;
}
Model& Model::describe(DescribeFn fn) {
  impl_->describe = std::move(fn);
  return *this;
}
Model& Model::hugging_face(HfFormatFn fn) {
  impl_->hugging_face = std::move(fn);
  return *this;
}
Model& Model::aux_loss(std::string name, std::function<bool(const LayoutInfo&)> present) {
  return impl_->declare(*this, std::move(name), true, std::move(present));
}
Model& Model::metric(std::string name, std::function<bool(const LayoutInfo&)> present) {
  return impl_->declare(*this, std::move(name), false, std::move(present));
}
std::vector<Reported> Model::reported(const LayoutInfo& layout) const {
  std::vector<Reported> out;
  for (const Impl::Declared& d : impl_->reports)
    if (!d.present || d.present(layout)) out.push_back(d.value);
  return out;
}
MixedPrecision Model::mixed_precision() const {
  return impl_->precision;
}
const ParamsFn& Model::parameters() const {
  return impl_->parameters;
}
const CheckFn& Model::check() const {
  return impl_->check;
}
const DescribeFn& Model::describe() const {
  return impl_->describe;
}
const HfFormatFn& Model::hugging_face() const {
  return impl_->hugging_face;
}
Model& Model::routed_experts(std::function<int(const LayoutInfo&)> fn) {
  impl_->routed_experts = std::move(fn);
  return *this;
}
const std::function<int(const LayoutInfo&)>& Model::routed_experts() const {
  return impl_->routed_experts;
}

// --- Family -------------------------------------------------------------------------------------

struct Family::Impl {
  std::string name;
  std::vector<FamilyOption> options;
  Configure configure;
  Make make;
  CheckResume check_resume;
  FromHf from_hf;
};

Family::Family(std::string name) : impl_(std::make_shared<Impl>()) {
  impl_->name = std::move(name);
}

Family::Family() : Family(std::string()) {}

namespace {

// The configuration of a model whose sizes are its code's: vocab and seq_len, from the base (a
// checkpoint's: any other field it holds, written by an older version, is left out) or the
// defaults, then --vocab and --seq-len; checked as pprun checks its own.
Config plain_config(const Config* base, const OptionValues& given) {
  ModelSetup s;
  if (base) {
    auto field = [&](const char* name, int& out) {
      if (auto it = base->find(name); it != base->end() && it->is_number_integer())
        out = it->get<int>();
    };
    field("vocab", s.vocab);
    field("seq_len", s.seq_len);
  }
  if (auto v = given.integer("--vocab")) s.vocab = *v;
  if (auto t = given.integer("--seq-len")) s.seq_len = *t;
  if (s.vocab < 1 || s.vocab > (1 << 22))
    fail("model", fmt::format("vocab is {}; expected 1..{}", s.vocab, 1 << 22));
  if (s.seq_len < 1 || s.seq_len > (1 << 16))
    fail("model", fmt::format("seq_len is {}; expected 1..{}", s.seq_len, 1 << 16));
  return Config{{"vocab", s.vocab}, {"seq_len", s.seq_len}};
}

}  // namespace

Family::Family(Model model) : Family(model.family()) {
  impl_->configure = plain_config;
  impl_->make = [model](const Config&) { return model; };
}

Family& Family::option(std::string flag, OptionKind kind, std::string help) {
  impl_->options.push_back(FamilyOption{std::move(flag), kind, std::move(help)});
  return *this;
}
Family& Family::configure(Configure fn) {
  impl_->configure = std::move(fn);
  return *this;
}
Family& Family::make(Make fn) {
  impl_->make = std::move(fn);
  return *this;
}
Family& Family::check_resume(CheckResume fn) {
  impl_->check_resume = std::move(fn);
  return *this;
}
Family& Family::from_hugging_face(FromHf fn) {
  impl_->from_hf = std::move(fn);
  return *this;
}

const std::string& Family::name() const {
  return impl_->name;
}
const std::vector<FamilyOption>& Family::options() const {
  return impl_->options;
}

Config Family::configured(const Config* base, const OptionValues& given) const {
  PPC_INTERNAL_ASSERT(impl_->make != nullptr, "a family makes its model (Family::make)");
  Config c = run_hook(
      [&] { return impl_->configure ? impl_->configure(base, given) : plain_config(base, given); });
  setup_of(c, impl_->name);  // it holds vocab and seq_len
  return c;
}

Model Family::model(const Config& config) const {
  PPC_INTERNAL_ASSERT(impl_->make != nullptr, "a family makes its model (Family::make)");
  return run_hook([&] { return impl_->make(config); });
}

void Family::check_same(const Config& theirs, const LayoutInfo& their_layout, const Config& mine,
                        const LayoutInfo& layout, const std::string& where) const {
  if (impl_->check_resume)
    run_hook([&] { impl_->check_resume(theirs, their_layout, mine, layout, where); });
}

bool Family::reads_hugging_face() const {
  return impl_->from_hf != nullptr;
}

Config Family::from_hf(const nlohmann::json& config_json, const std::string& file, int seq_len,
                       const LayoutInfo& layout) const {
  PPC_INTERNAL_ASSERT(impl_->from_hf != nullptr, "--init-from only for a family that reads it");
  Config c = run_hook([&] { return impl_->from_hf(config_json, file, seq_len, layout); });
  setup_of(c, impl_->name);
  return c;
}

ModelFacts model_facts(const Family& family, const Config& config) {
  const Model m = family.model(config);
  ModelFacts f;
  f.family = m.family();
  for (char c : m.symbols()) f.symbols += c;
  f.precision = m.mixed_precision();
  f.parameters = m.parameters();
  f.check = m.check();
  f.describe = m.describe();
  f.hugging_face = m.hugging_face();
  f.routed_experts = m.routed_experts();
  f.reported = [m](const LayoutInfo& layout) { return m.reported(layout); };
  return f;
}

at::Tensor LayerInfo::shared(const std::string& shared_name, const std::vector<int64_t>& shape,
                             const std::function<void(at::Tensor&)>& init) const {
  if (params) return params->get(shared_name, shape, init);
  // Outside a runtime (a factory called by hand): a parameter of its own.
  at::Tensor t = at::empty(shape, at::TensorOptions().dtype(at::kFloat));
  init(t);
  return t.set_requires_grad(true);
}

int main(int argc, char** argv, Family family) {
  return main_of(argc, argv, std::move(family));
}

int main(int argc, char** argv, Model model) {
  return main_of(argc, argv, Family(std::move(model)));
}

}  // namespace pprt
