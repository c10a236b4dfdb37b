// pprt's plain types (no LibTorch): what the runtime needs to know of a configured model, and the
// error a model's own code raises for bad input. pprt/pprt.h includes this header.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace pprt {

// A mistake in what the user gave (an option, a file, a layout the model cannot build), raised
// by a model's own code (a layer factory, a forward, the loss, a hook): pprun prints
// "<program>: error: WHERE: MESSAGE" and exits with code 2.
class Error : public std::runtime_error {
 public:
  Error(std::string where, const std::string& message)
      : std::runtime_error(message), where_(std::move(where)) {}
  const std::string& where() const { return where_; }

 private:
  std::string where_;
};

// A configured model as the runtime sees it.
struct ModelSetup {
  int vocab = 256;   // token ids lie in [0, vocab)
  int seq_len = 64;  // tokens per sequence (a microbatch's rows hold seq_len + 1)
};

// --dtype: the precision of activations and matrix products. Bf16 is mixed precision (Megatron-LM's
// --bf16): the parameters stay fp32 (the master weights), and so do their gradients, accumulated
// over the microbatches, and AdamW's state. How a model takes part: Model::mixed_precision.
enum class Precision : uint8_t { Fp32, Bf16 };
const char* precision_name(Precision p);  // "fp32", "bf16"

// How a model runs under --dtype bf16 (Model::mixed_precision; docs/library.md, "Mixed
// precision"). In both ways the parameters stay fp32 leaves (the master weights), the tensors
// crossing stage boundaries are bf16 (half the bytes) and the loss is fp32.
enum class MixedPrecision : uint8_t {
  None,      // fp32 only: --dtype bf16 is refused
  Layers,    // the model's layers cast themselves: LayerInfo::dtype is the activations' dtype
             // (pprun's own model: bf16 products with fp32 statistics, runtime/model/precision.h)
  Autocast,  // the runtime runs each layer's forward under LibTorch's autocast in that dtype
             // (matrix products in bf16, reductions and norms in fp32, as torch.autocast does);
             // the first layer's output should be cast to LayerInfo::dtype
};

// A layout as the model's hooks see it: its text and each stage's symbols ("Ett", "", "tL").
struct LayoutInfo {
  std::string text;
  std::vector<std::string> stages;
  int count(char symbol) const {
    int n = 0;
    for (const auto& s : stages)
      for (char c : s) n += c == symbol;
    return n;
  }
};

// An auxiliary loss or a metric a model reports (Model::aux_loss, Model::metric), by name.
struct Reported {
  std::string name;
  bool loss = false;  // an auxiliary loss: logged as "<name>_loss"; a metric: as "<name>"
  std::string field() const { return loss ? name + "_loss" : name; }
  bool operator==(const Reported&) const = default;
};

// A parameter by its global name (Model::parameters).
struct ParamShape {
  std::string name;
  std::vector<int64_t> shape;
  bool operator==(const ParamShape&) const = default;
};

}  // namespace pprt
