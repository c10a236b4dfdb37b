// pprt::Model (pprt/pprt.h): a model family's registrations.
#include <fmt/format.h>

#include "compiler/diagnostic.h"
#include "pprt/main.h"
#include "pprt/pprt.h"
#include "runtime/launch/cli.h"
#include "runtime/model/stage.h"

namespace pprt {

struct Model::Impl {
  std::string family;
  std::vector<Symbol> symbols;
  LossFn loss;
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
  PPC_INTERNAL_ASSERT(make != nullptr, "a layer needs a factory");
  for (Symbol& s : impl_->symbols)
    if (s.symbol == symbol) {  // registered again: the later registration wins
      s = Symbol{symbol, std::move(name), std::move(make), std::move(shape)};
      return *this;
    }
  impl_->symbols.push_back(Symbol{symbol, std::move(name), std::move(make), std::move(shape)});
  return *this;
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

at::Tensor LayerInfo::shared(const std::string& shared_name, const std::vector<int64_t>& shape,
                             const std::function<void(at::Tensor&)>& init) const {
  if (params) return params->get(shared_name, shape, init);
  // Outside a runtime (a factory called by hand): a parameter of its own.
  at::Tensor t = at::empty(shape, at::TensorOptions().dtype(at::kFloat));
  init(t);
  return t.set_requires_grad(true);
}

int main(int argc, char** argv, Model model) {
  ModelSource source;
  source.family = model.family();
  source.sized = false;  // its sizes are its code's
  for (char c : model.symbols()) source.symbols += c;
  source.make = [model](const ModelConfig&, Precision) { return model; };  // --dtype: fp32 only
  return main_of(argc, argv, std::move(source));
}

}  // namespace pprt
