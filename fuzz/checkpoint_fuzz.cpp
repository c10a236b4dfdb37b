// pprun's checkpoint reader (checkpoint/format.h), as `pprun --resume DIR` and `pprun --export DIR
// OUT` run it before any compute. The input is a checkpoint directory DIR, packed as an archive of
// named files (fuzz/fuzz_files.h): usually `latest` and a step directory's state, indexes and
// safetensors shards; files at the top level make DIR a step directory itself.
//
//  1. Open it: find_checkpoint (latest, or the newest complete step-*), trainer_state.json, both
//     indexes' weight maps, the shards' safetensors headers, and their agreement.
//  2. --resume with pprun's own model: the checkpoint's model (resolve_model_config over it, no
//     flags, as the family's configure does) and, as the plan's layout, its own; check_params
//     against that model's parameters. Accepted, it must read every parameter and both AdamW
//     moments at the parameter's shape, as load_checkpoint does.
//  3. --export: export_checkpoint into a file beside DIR, without a model's parameter list (a
//     program's model) and with pprun's. Accepted, that file must open as a safetensors file
//     holding exactly the checkpoint's model tensors.
// Each step is accepted or rejected with a UserError on its own. Not reached: the RNG state
// (LibTorch parses it when the weights are loaded) and the data identity (compared with the data of
// the run).
#include <algorithm>
#include <string>
#include <vector>

#include "compiler/layout.h"
#include "fuzz/fuzz_files.h"
#include "fuzz/fuzz_target.h"
#include "runtime/checkpoint/format.h"
#include "runtime/checkpoint/safetensors.h"
#include "runtime/models/llama/architecture.h"
#include "runtime/models/llama/config.h"

PP_FUZZ_TARGET(checkpoint) {
  const auto files = ppfuzz::split_files(input);
  if (!files) return;  // not an archive
  const std::string& scratch = ppfuzz::scratch_dir();
  const std::string dir = scratch + "/ckpt";
  ppfuzz::write_files(dir, *files);

  auto ckpt = ppfuzz::accepted([&] { return pprt::Checkpoint(dir); });
  if (!ckpt) return;

  // --resume DIR with a plan of the checkpoint's layout and no model flags.
  struct Resumed {
    pprt::ModelConfig model;
    std::vector<pprt::ParamSpec> params;
  };
  auto resumed = ppfuzz::accepted([&] {
    const pprt::CheckpointState& st = ckpt->state();
    Resumed r;
    r.model = pprt::resolve_model_config(
        "", pprt::ModelOverrides{}, pprt::parse_model_config(st.model.dump(), "checkpoint model"));
    const ppc::Layout layout = ppc::parse_layout(st.layout, "checkpoint layout");
    r.params = pprt::model_params(r.model, layout);
    std::vector<pprt::ParamShape> shapes;
    for (const pprt::ParamSpec& p : r.params) shapes.push_back({p.name, p.shape});
    ckpt->check_params(shapes);
    return r;
  });
  if (resumed)
    ppfuzz::must_succeed("loading the weights of an accepted checkpoint", [&] {
      std::vector<float> buf;
      for (const pprt::ParamSpec& p : resumed->params) {
        buf.assign(static_cast<size_t>(p.numel()), 0.0f);
        for (const char* suffix : {"", ".exp_avg", ".exp_avg_sq"})
          ckpt->read(p.name + suffix, *suffix != '\0', p.shape, buf.data(),
                     buf.size() * sizeof(float));
      }
    });

  // --export DIR OUT, without the model's parameters and with pprun's (when it has them).
  std::optional<std::vector<pprt::ParamShape>> pprun_params = ppfuzz::accepted([&] {
    const pprt::ModelConfig c = pprt::resolve_model_config(
        "", pprt::ModelOverrides{},
        pprt::parse_model_config(ckpt->state().model.dump(), "checkpoint model"));
    std::vector<pprt::ParamShape> out;
    for (const pprt::ParamSpec& p :
         pprt::model_params(c, ppc::parse_layout(ckpt->state().layout, "checkpoint layout")))
      out.push_back({p.name, p.shape});
    return out;
  });
  using Params = const std::vector<pprt::ParamShape>*;
  for (Params params : {Params{nullptr}, pprun_params ? Params{&*pprun_params} : Params{nullptr}}) {
    const std::string out = scratch + "/export.safetensors";
    auto exported = ppfuzz::accepted([&] { return pprt::export_checkpoint(dir, out, params); });
    if (exported)
      ppfuzz::must_succeed("reading an export back", [&] {
        const pprt::SafetensorsFile f(out);
        std::vector<std::string> names;
        for (const pprt::TensorInfo& t : f.tensors()) names.push_back(t.name);
        std::sort(names.begin(), names.end());
        ppfuzz::expect(names == ckpt->model_tensors() && *exported == names.size(),
                       "the export holds other tensors than the checkpoint's model");
      });
  }
}
