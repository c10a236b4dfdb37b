// What the runtime's plain parts (no LibTorch: the launcher, the checkpoint formats, the output)
// know of a configured model: its pprt::Model's name, symbols and hooks (pprt/pprt.h), copied out
// of it by a LibTorch translation unit (model.cpp). Plain data.
#pragma once

#include <string>

#include "compiler/layout.h"
#include "pprt/family.h"
#include "runtime/fail.h"

namespace pprt {

struct ModelFacts {
  std::string family;   // the model's name, for messages
  std::string symbols;  // the layout symbols it has layers for, in registration order
  MixedPrecision precision = MixedPrecision::None;
  ParamsFn parameters;
  CheckFn check;
  DescribeFn describe;
  HfFormatFn hugging_face;
  std::function<int(const LayoutInfo&)> routed_experts;  // Model::routed_experts (may be empty)
  // The auxiliary losses and metrics it reports for a layout (Model::reported).
  std::function<std::vector<Reported>(const LayoutInfo&)> reported;
};

// Runs a hook of the model's (or the family's): what it throws as pprt::Error becomes the
// runtime's located user error (exit code 2).
template <class F>
auto run_hook(F&& f) {
  try {
    return f();
  } catch (const pprt::Error& e) {
    fail(e.where(), e.what());
  }
}

// The model `family` makes of `config` (Family::model), as facts.
ModelFacts model_facts(const Family& family, const Config& config);

// The layout as pprt::Model's hooks see it.
LayoutInfo layout_info(const ppc::Layout& layout);

// The run's ModelSetup from a configuration: its "vocab" and "seq_len". Throws ppc::UserError
// naming the family when they are not positive integers (a family's own mistake).
ModelSetup setup_of(const Config& config, const std::string& family);

}  // namespace pprt
