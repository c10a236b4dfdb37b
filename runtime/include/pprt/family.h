// pprt::Family: a model whose sizes its run configures (docs/library.md, "A model configured by
// its run"), and the plain types of the hooks a model may give (pprt::Model's). No LibTorch:
// pprt/pprt.h includes this header.
//
// A family declares command-line options of its own (--hidden, --config FILE, ...), resolves a
// configuration from them (and from a checkpoint's, when a run resumes, or a Hugging Face
// directory's), and makes the pprt::Model of a configuration. pprun's own model is one
// (runtime/models/llama/family.h). A model whose sizes are its code's needs none: pprt::main
// takes it as it is.
//
// Configure a family of your own like this:
//
// clang-format off
//     pprt::Family f("mymodel");
//     f.option("--width", pprt::OptionKind::Integer, "Model width (default 64)")
//      .configure([](const pprt::Config* base, const pprt::OptionValues& given) {
//        pprt::Config c = base ? *base : pprt::Config{{"width", 64}, {"vocab", 256}, {"seq_len", 64}};
//        if (auto w = given.integer("--width")) c["width"] = *w;
//        if (auto v = given.integer("--vocab")) c["vocab"] = *v;
//        if (auto t = given.integer("--seq-len")) c["seq_len"] = *t;
//        return c;
//      })
//      .make([](const pprt::Config& c) { return my_model(c["width"].get<int>()); });
// clang-format on
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "pprt/setup.h"

namespace pprt {

class Model;  // pprt/pprt.h

// A model's configuration: a JSON object of the model's own fields and the run's "vocab" and
// "seq_len" (integers: every model has them; --vocab and --seq-len set them). What pprun's
// --config FILE holds, and what a checkpoint records (trainer_state.json's "model").
using Config = nlohmann::ordered_json;

// --- the model's own command-line options --------------------------------------------------

enum class OptionKind : uint8_t {
  Integer,  // --NAME N (an int)
  Switch,   // --NAME (on when given)
  File,     // --NAME PATH (a string)
};

struct FamilyOption {
  std::string flag;  // "--hidden"
  OptionKind kind = OptionKind::Integer;
  std::string help;  // shown in --help, in the group "model"
};

// What a run's command line gave the family's options and the runtime's own --vocab and
// --seq-len (Integer options every model has).
struct OptionValues {
  std::map<std::string, std::optional<int>> integers;
  std::map<std::string, bool> switches;
  std::map<std::string, std::string> files;

  std::optional<int> integer(const std::string& flag) const;  // nullopt when not given
  bool on(const std::string& flag) const;                     // false when not given
  std::string file(const std::string& flag) const;            // empty when not given
  // Those given, sorted (for messages that refuse them).
  std::vector<std::string> given() const;
};

// --- the hooks a model may give (pprt::Model's, all optional) -------------------------------

// The hooks get the layout the run trains and its ModelSetup (--vocab, --seq-len).
//
// Every parameter of the model laid out as `layout`: global names and shapes (Model::parameters).
using ParamsFn =
    std::function<std::vector<ParamShape>(const LayoutInfo& layout, const ModelSetup& setup)>;
// Checks that the model can be built as `layout` (throws pprt::Error naming the flag or file):
// before anything runs (Model::check).
using CheckFn = std::function<void(const LayoutInfo& layout, const ModelSetup& setup)>;
// The model of a run's first lines, after "model " ("Ett|tL = 3 layers, 0.12M parameters (...)";
// Model::describe). `aux_loss_weight`: --mtp-loss-weight.
using DescribeFn = std::function<std::string(const LayoutInfo& layout, const ModelSetup& setup,
                                             double aux_loss_weight)>;

// A parameter in a Hugging Face directory.
struct HfTensor {
  std::string name;            // the runtime's global name ("h.3.attn.c_attn.weight")
  std::string hf_name;         // Hugging Face's ("transformer.h.3.attn.c_attn.weight")
  std::vector<int64_t> shape;  // the runtime's
  bool transposed = false;     // stored transposed (a matrix; GPT-2's Conv1D weights are)
};

// The model as a Hugging Face directory holds it (Model::hugging_face).
struct HfFormat {
  std::string architecture;       // config.json's "architectures" entry ("LlamaForCausalLM")
  nlohmann::ordered_json config;  // config.json
  std::vector<HfTensor> tensors;  // every parameter, in the order the files hold them
  // Reading (--init-from): tensors a directory may hold that are not parameters (ECMAScript
  // regular expressions of whole names: rotary tables, a tied head's copy).
  std::vector<std::string> leftovers;
  std::string description;  // the model in words, for messages ("hidden 64, heads 4, ...")
  int layers = 0;           // its blocks, for messages
};
// The model laid out as `layout`, its tensors written in `dtype` ("float32" or "bfloat16":
// config.json says it); throws pprt::Error when the model has no Hugging Face form (naming why).
using HfFormatFn = std::function<HfFormat(const LayoutInfo& layout, const ModelSetup& setup,
                                          const std::string& dtype)>;

// --- a family ------------------------------------------------------------------------------

class Family {
 public:
  // Resolves the configuration: `base` (null: the family's defaults; otherwise a checkpoint's
  // configuration, which --resume starts from) with the options the command line gave. Returns
  // a JSON object holding integer "vocab" and "seq_len"; throws pprt::Error naming the flag or
  // file for a bad value. It must accept its own results as `base` with no option given.
  using Configure = std::function<Config(const Config* base, const OptionValues& given)>;
  using Make = std::function<Model(const Config& config)>;
  // --resume: before the parameters are compared, says in words how the checkpoint's model
  // (`theirs`, laid out as `their_layout`) differs from this run's, if it does (throws
  // pprt::Error; `where` names the checkpoint).
  using CheckResume =
      std::function<void(const Config& theirs, const LayoutInfo& their_layout, const Config& mine,
                         const LayoutInfo& layout, const std::string& where)>;
  // --init-from DIR: the configuration of a Hugging Face model (its config.json, read from
  // `file`) for the run's `seq_len` and `layout` (throws pprt::Error naming the file and field).
  using FromHf = std::function<Config(const nlohmann::json& config_json, const std::string& file,
                                      int seq_len, const LayoutInfo& layout)>;

  explicit Family(std::string name);
  // A model whose sizes are its code's: --vocab and --seq-len only.
  explicit Family(Model model);
  Family();  // an empty family (no model yet), to be assigned

  Family& option(std::string flag, OptionKind kind, std::string help);
  Family& configure(Configure fn);
  Family& make(Make fn);
  Family& check_resume(CheckResume fn);
  Family& from_hugging_face(FromHf fn);

  // --- read by the runtime ---
  const std::string& name() const;
  const std::vector<FamilyOption>& options() const;
  Config configured(const Config* base, const OptionValues& given) const;
  Model model(const Config& config) const;
  // Nothing when no check_resume was given.
  void check_same(const Config& theirs, const LayoutInfo& their_layout, const Config& mine,
                  const LayoutInfo& layout, const std::string& where) const;
  bool reads_hugging_face() const;
  Config from_hf(const nlohmann::json& config_json, const std::string& file, int seq_len,
                 const LayoutInfo& layout) const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace pprt
