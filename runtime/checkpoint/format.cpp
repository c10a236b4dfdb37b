#include "runtime/checkpoint/format.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "compiler/atomic_file.h"
#include "compiler/diagnostic.h"
#include "compiler/read_file.h"
#include "runtime/fail.h"

namespace pprt {

namespace fs = std::filesystem;
using nlohmann::ordered_json;

namespace {

constexpr const char* kFormat = "pprun-checkpoint";
constexpr const char* kState = "trainer_state.json";
constexpr const char* kModelIndex = "model.safetensors.index.json";
constexpr const char* kOptimizerIndex = "optimizer.safetensors.index.json";
constexpr const char* kLatest = "latest";

std::string read_text(const std::string& path) {
  try {
    return ppc::read_file(path);
  } catch (const ppc::UserError&) {
    fail(path, "cannot read the file (the checkpoint is incomplete or damaged)");
  }
}

// Writes `text` to `path` durably: fsynced, then renamed into place.
void write_durably(const std::string& path, const std::string& text) {
  ppc::write_file_atomically(path, text, "", ppc::AtomicFile::Sync::Fsync);
}

// Step directories of DIR, by step.
std::vector<std::pair<int64_t, std::string>> step_dirs(const std::string& dir) {
  std::vector<std::pair<int64_t, std::string>> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("step-", 0) != 0 || name.size() != 13 || !e.is_directory()) continue;
    if (name.find_first_not_of("0123456789", 5) != std::string::npos) continue;
    out.push_back({std::stoll(name.substr(5)), e.path().string()});
  }
  std::sort(out.begin(), out.end());
  return out;
}

// An index file: {"metadata": {"total_size": N, ...}, "weight_map": {name: file}}.
std::string index_json(const std::map<std::string, std::string>& weight_map, uint64_t total,
                       int64_t step) {
  ordered_json j;
  j["metadata"] = ordered_json{{"total_size", total}, {"format", kFormat}, {"step", step}};
  j["weight_map"] = ordered_json::object();
  for (const auto& [name, file] : weight_map) j["weight_map"][name] = file;
  return j.dump(1) + "\n";
}

std::map<std::string, std::string> parse_index(const std::string& path) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_text(path));
  } catch (const nlohmann::json::exception& e) {  // syntax, or a number too large to hold
    fail(path, fmt::format("not valid JSON: {}", e.what()));
  }
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
    fail(path, "weight_map: missing (expected an object of tensor name -> file)");
  std::map<std::string, std::string> out;
  for (const auto& [name, file] : j["weight_map"].items()) {
    if (!file.is_string()) fail(path, fmt::format("weight_map.{}: expected a file name", name));
    const std::string f = file.get<std::string>();
    if (f.empty() || f.find('/') != std::string::npos || f == "." || f == "..")
      fail(path, fmt::format("weight_map.{}: '{}' is not a file of this directory", name, f));
    out[name] = f;
  }
  return out;
}

}  // namespace

std::string checkpoint_state_json(const CheckpointState& s) {
  const TrainOptions& t = s.train;
  ordered_json j;
  j["format"] = kFormat;
  j["version"] = kCheckpointVersion;
  j["step"] = s.step;
  j["model"] = s.model;
  j["layout"] = s.layout;
  j["pp"] = s.pp;
  j["dp"] = s.dp;
  j["training"] = ordered_json{{"steps", t.steps},
                               {"global_batch", t.global_batch},
                               {"lr", t.lr},
                               {"min_lr_ratio", t.min_lr_ratio},
                               {"warmup", t.warmup_steps()},
                               {"weight_decay", t.weight_decay},
                               {"beta1", t.beta1},
                               {"beta2", t.beta2},
                               {"eps", t.eps},
                               {"clip", t.clip},
                               {"mtp_loss_weight", t.mtp_loss_weight},
                               {"seed", t.seed},
                               {"dtype", precision_name(t.dtype)}};
  j["data"] = ordered_json{{"format", s.data.format},
                           {"path", s.data.path},
                           {"index_path", s.data.index_path},
                           {"token_type", s.data.token_type},
                           {"bytes", s.data.bytes},
                           {"tokens", s.data.tokens},
                           {"fingerprint", s.data.fingerprint},
                           {"position", s.step}};
  j["rng_state"] = s.rng_state;
  j["plan"] = nlohmann::json::parse(s.plan_json);
  return j.dump(1) + "\n";
}

CheckpointState parse_checkpoint_state(const std::string& text, const std::string& file) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {  // syntax, or a number too large to hold
    fail(file, fmt::format("not valid JSON: {}", e.what()));
  }
  if (!j.is_object()) fail(file, "expected a JSON object");
  if (!j.contains("format") || j["format"] != kFormat)  // (value() throws on another type)
    fail(file, fmt::format("format: expected \"{}\" (not a pprun checkpoint)", kFormat));
  if (!j.contains("version") || !j["version"].is_number_integer())
    fail(file, "version: missing or not an integer");
  if (j["version"].get<int64_t>() != kCheckpointVersion)
    fail(file,
         fmt::format("version: unsupported checkpoint version {} (this build reads version {})",
                     j["version"].dump(), kCheckpointVersion));
  CheckpointState s;
  auto need = [&](const nlohmann::json& obj, const std::string& key,
                  const std::string& path) -> const nlohmann::json& {
    if (!obj.is_object() || !obj.contains(key)) fail(file, fmt::format("{}: missing", path));
    return obj[key];
  };
  auto integer = [&](const nlohmann::json& obj, const std::string& key, const std::string& path,
                     int64_t lo) {
    const auto& v = need(obj, key, path);
    if (!v.is_number_integer() || v.get<int64_t>() < lo)
      fail(file, fmt::format("{}: expected an integer of at least {}, got {}", path, lo, v.dump()));
    return v.get<int64_t>();
  };
  auto number = [&](const nlohmann::json& obj, const std::string& key, const std::string& path) {
    const auto& v = need(obj, key, path);
    if (!v.is_number()) fail(file, fmt::format("{}: expected a number, got {}", path, v.dump()));
    return v.get<double>();
  };
  auto text_of = [&](const nlohmann::json& obj, const std::string& key, const std::string& path) {
    const auto& v = need(obj, key, path);
    if (!v.is_string()) fail(file, fmt::format("{}: expected a string, got {}", path, v.dump()));
    return v.get<std::string>();
  };
  s.step = integer(j, "step", "step", 0);
  // The model's configuration: the family reads it when the run resumes.
  if (!need(j, "model", "model").is_object()) fail(file, "model: expected a JSON object");
  s.model = Config::parse(text).at("model");  // its fields in the order written
  s.layout = text_of(j, "layout", "layout");
  s.pp = static_cast<int>(integer(j, "pp", "pp", 1));
  s.dp = static_cast<int>(integer(j, "dp", "dp", 1));
  const auto& t = need(j, "training", "training");
  s.train.steps = static_cast<int>(integer(t, "steps", "training.steps", 1));
  s.train.global_batch = static_cast<int>(integer(t, "global_batch", "training.global_batch", 1));
  s.train.lr = number(t, "lr", "training.lr");
  s.train.min_lr_ratio = number(t, "min_lr_ratio", "training.min_lr_ratio");
  s.train.warmup = static_cast<int>(integer(t, "warmup", "training.warmup", 0));
  s.train.weight_decay = number(t, "weight_decay", "training.weight_decay");
  s.train.beta1 = number(t, "beta1", "training.beta1");
  s.train.beta2 = number(t, "beta2", "training.beta2");
  s.train.eps = number(t, "eps", "training.eps");
  s.train.clip = number(t, "clip", "training.clip");
  s.train.mtp_loss_weight = number(t, "mtp_loss_weight", "training.mtp_loss_weight");
  const auto& seed = need(t, "seed", "training.seed");
  if (!seed.is_number_unsigned() && !(seed.is_number_integer() && seed.get<int64_t>() >= 0))
    fail(file, fmt::format("training.seed: expected a non-negative integer, got {}", seed.dump()));
  s.train.seed = seed.get<uint64_t>();
  // The precision it was trained in (informational: the weights and AdamW's state are fp32 either
  // way, so a run of any --dtype resumes it); absent before --dtype trained: fp32.
  if (t.contains("dtype")) {
    const std::string dtype = text_of(t, "dtype", "training.dtype");
    if (dtype != "fp32" && dtype != "bf16")
      fail(file, fmt::format("training.dtype: expected \"fp32\" or \"bf16\", got \"{}\"", dtype));
    s.train.dtype = dtype == "bf16" ? Precision::Bf16 : Precision::Fp32;
  }
  const auto& d = need(j, "data", "data");
  s.data.format = text_of(d, "format", "data.format");
  s.data.path = text_of(d, "path", "data.path");
  s.data.index_path = text_of(d, "index_path", "data.index_path");
  s.data.token_type = text_of(d, "token_type", "data.token_type");
  s.data.bytes = static_cast<uint64_t>(integer(d, "bytes", "data.bytes", 0));
  s.data.tokens = static_cast<uint64_t>(integer(d, "tokens", "data.tokens", 0));
  s.data.fingerprint = text_of(d, "fingerprint", "data.fingerprint");
  s.rng_state = text_of(j, "rng_state", "rng_state");
  s.plan_json = need(j, "plan", "plan").dump();
  return s;
}

std::string step_dir_name(int64_t step) {
  return fmt::format("step-{:08}", step);
}

std::string shard_file_name(const std::string& kind, int index, int count) {
  return fmt::format("{}-{:05}-of-{:05}.safetensors", kind, index + 1, count);
}

std::string find_checkpoint(const std::string& path) {
  std::error_code ec;
  if (!fs::is_directory(path, ec)) fail(path, "no such checkpoint directory");
  if (fs::exists(fs::path(path) / kState, ec)) return path;  // a step directory
  const fs::path latest = fs::path(path) / kLatest;
  if (fs::exists(latest, ec)) {
    std::string name = read_text(latest.string());
    while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
    if (name.rfind("step-", 0) != 0 || name.find('/') != std::string::npos)
      fail(latest.string(), fmt::format("'{}' does not name a step directory", name));
    const fs::path dir = fs::path(path) / name;
    if (!fs::exists(dir / kState, ec))
      fail(latest.string(), fmt::format("names {}, which holds no checkpoint", dir.string()));
    return dir.string();
  }
  // No `latest` (a crash before the first one was written): the newest complete step directory.
  auto dirs = step_dirs(path);
  for (auto it = dirs.rbegin(); it != dirs.rend(); ++it)
    if (fs::exists(fs::path(it->second) / kState, ec)) return it->second;
  fail(path, "holds no checkpoint (no 'latest' and no step-* directory)");
}

bool holds_checkpoint(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return false;
  if (fs::exists(fs::path(dir) / kLatest, ec)) return true;  // (find_checkpoint judges it)
  for (const auto& [step, path] : step_dirs(dir))
    if (fs::exists(fs::path(path) / kState, ec)) return true;
  return false;
}

Checkpoint::Checkpoint(const std::string& path) : dir_(find_checkpoint(path)) {
  const std::string state_file = (fs::path(dir_) / kState).string();
  state_ = parse_checkpoint_state(read_text(state_file), state_file);
  std::map<std::string, size_t> opened;  // file name -> index in files_
  auto load = [&](const char* index_name, std::unordered_map<std::string, Where>& into) {
    const std::string index = (fs::path(dir_) / index_name).string();
    for (const auto& [name, file] : parse_index(index)) {
      auto [it, fresh] = opened.emplace(file, files_.size());
      if (fresh) files_.emplace_back((fs::path(dir_) / file).string());
      const SafetensorsFile& f = files_[it->second];
      const TensorInfo* info = f.find(name);
      if (!info) fail(index, fmt::format("weight_map.{}: {} has no tensor '{}'", name, file, name));
      if (info->dtype != TensorDtype::F32)
        fail(f.path(),
             fmt::format("tensor '{}': dtype {}, expected F32", name, dtype_name(info->dtype)));
      into[name] = Where{it->second, info};
    }
  };
  load(kModelIndex, model_);
  load(kOptimizerIndex, optimizer_);
  // Every tensor of a shard is in an index (a shard with unknown tensors is not ours).
  for (const SafetensorsFile& f : files_)
    for (const TensorInfo& t : f.tensors())
      if (!model_.count(t.name) && !optimizer_.count(t.name))
        fail(f.path(), fmt::format("tensor '{}' is in no index of the checkpoint", t.name));
}

Checkpoint::~Checkpoint() = default;
Checkpoint::Checkpoint(Checkpoint&&) noexcept = default;
Checkpoint& Checkpoint::operator=(Checkpoint&&) noexcept = default;

std::vector<std::string> Checkpoint::model_tensors() const {
  std::vector<std::string> out;
  for (const auto& [name, w] : model_) out.push_back(name);
  std::sort(out.begin(), out.end());
  return out;
}

void Checkpoint::check_params(const std::vector<ParamShape>& params) const {
  for (const ParamShape& p : params) {
    for (const std::string& name : {p.name, p.name + ".exp_avg", p.name + ".exp_avg_sq"}) {
      const bool optimizer = name != p.name;
      const auto& map = optimizer ? optimizer_ : model_;
      auto it = map.find(name);
      if (it == map.end())
        fail(dir_, fmt::format("{} '{}' of this model is not in the checkpoint",
                               optimizer ? "optimizer tensor" : "parameter", name));
      if (it->second.info->shape != p.shape)
        fail(files_[it->second.file].path(),
             fmt::format("tensor '{}': shape {}, this model's is {}", name,
                         shape_string(it->second.info->shape), shape_string(p.shape)));
    }
  }
  if (model_.size() != params.size())
    for (const auto& entry : model_) {  // (clang 14 cannot capture a structured binding)
      const std::string& name = entry.first;
      if (std::none_of(params.begin(), params.end(),
                       [&](const ParamShape& p) { return p.name == name; }))
        fail(files_[entry.second.file].path(),
             fmt::format("tensor '{}' is not a parameter of this model", name));
    }
}

const TensorInfo& Checkpoint::info(const std::string& name, bool optimizer) const {
  const auto& map = optimizer ? optimizer_ : model_;
  auto it = map.find(name);
  if (it == map.end()) fail(dir_, fmt::format("tensor '{}' is not in the checkpoint", name));
  return *it->second.info;
}

void Checkpoint::read(const std::string& name, bool optimizer, std::span<const int64_t> shape,
                      void* dst, size_t bytes) const {
  const auto& map = optimizer ? optimizer_ : model_;
  auto it = map.find(name);
  if (it == map.end()) fail(dir_, fmt::format("tensor '{}' is not in the checkpoint", name));
  files_[it->second.file].read(name, TensorDtype::F32, shape, dst, bytes);
}

std::pair<size_t, uint64_t> Checkpoint::position(const std::string& name, bool optimizer) const {
  const auto& map = optimizer ? optimizer_ : model_;
  auto it = map.find(name);
  if (it == map.end()) fail(dir_, fmt::format("tensor '{}' is not in the checkpoint", name));
  return {it->second.file, it->second.info->begin};
}

std::string prepare_checkpoint(const std::string& dir, int64_t step) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) fail("--save", fmt::format("cannot create directory '{}': {}", dir, ec.message()));
  const fs::path tmp = fs::path(dir) / (".tmp-" + step_dir_name(step));
  fs::remove_all(tmp, ec);
  if (!fs::create_directory(tmp, ec) || ec)
    fail("--save", fmt::format("cannot create directory '{}': {}", tmp.string(),
                               ec ? ec.message() : "it exists"));
  return tmp.string();
}

void write_checkpoint_shard(const std::string& tmp, int index, int count,
                            std::span<const TensorWrite> model,
                            std::span<const TensorWrite> optimizer, void (*between)()) {
  write_safetensors((fs::path(tmp) / shard_file_name("model", index, count)).string(), model,
                    {{"format", "pt"}});
  if (between) between();
  write_safetensors((fs::path(tmp) / shard_file_name("optimizer", index, count)).string(),
                    optimizer, {{"format", "pt"}});
}

uint64_t commit_checkpoint(const std::string& dir, const std::string& tmp,
                           const CheckpointState& state, int keep, void (*before_rename)()) {
  // The indexes, from the shards' headers.
  std::map<std::string, std::string> model, optimizer;
  uint64_t model_bytes = 0, optimizer_bytes = 0;
  for (int i = 0; i < state.pp; ++i)
    for (const std::string kind : {"model", "optimizer"}) {
      const std::string file = shard_file_name(kind, i, state.pp);
      const SafetensorsFile f((fs::path(tmp) / file).string());
      for (const TensorInfo& t : f.tensors()) {
        (kind == "model" ? model : optimizer)[t.name] = file;
        (kind == "model" ? model_bytes : optimizer_bytes) += t.bytes();
      }
    }
  write_durably((fs::path(tmp) / kModelIndex).string(), index_json(model, model_bytes, state.step));
  write_durably((fs::path(tmp) / kOptimizerIndex).string(),
                index_json(optimizer, optimizer_bytes, state.step));
  write_durably((fs::path(tmp) / kState).string(), checkpoint_state_json(state));
  ppc::fsync_directory(tmp);
  if (before_rename) before_rename();
  const fs::path final_dir = fs::path(dir) / step_dir_name(state.step);
  std::error_code ec;
  fs::remove_all(final_dir, ec);  // a checkpoint of the same step (a rerun) is replaced
  fs::rename(tmp, final_dir, ec);
  if (ec)
    fail("--save",
         fmt::format("cannot rename '{}' to '{}': {}", tmp, final_dir.string(), ec.message()));
  ppc::fsync_directory(dir);
  write_durably((fs::path(dir) / kLatest).string(), step_dir_name(state.step) + "\n");
  ppc::fsync_directory(dir);
  if (keep > 0) {
    auto dirs = step_dirs(dir);
    for (size_t i = 0; i + static_cast<size_t>(keep) < dirs.size(); ++i)
      if (dirs[i].first != state.step) fs::remove_all(dirs[i].second, ec);
  }
  return model_bytes + optimizer_bytes;
}

size_t export_checkpoint(const std::string& path, const std::string& out,
                         const std::vector<ParamShape>* params) {
  const Checkpoint ckpt(path);
  const std::vector<std::string> names = ckpt.model_tensors();
  std::vector<std::vector<float>> data;
  std::vector<TensorWrite> writes;
  std::map<std::string, std::vector<int64_t>> shapes;  // the model's, with `params`
  if (params)
    for (const ParamShape& p : *params) shapes[p.name] = p.shape;
  data.reserve(names.size());
  for (const std::string& name : names) {
    const TensorInfo& info = ckpt.info(name, false);
    if (params) {
      auto it = shapes.find(name);
      if (it == shapes.end())
        fail(ckpt.dir(),
             fmt::format("tensor '{}' is not a parameter of the checkpoint's model", name));
      // The shard's shape must be the model's before a buffer of the model's size is made: the
      // state's model sizes come from a file too (a damaged one would ask for terabytes).
      if (info.shape != it->second)
        fail(ckpt.dir(), fmt::format("tensor '{}': shape {} in the checkpoint's shards, but its "
                                     "model (trainer_state.json) has {}",
                                     name, shape_string(info.shape), shape_string(it->second)));
    }
    // (Without the model's shapes, the shard's: validated against the file's size when opened.)
    auto& buf = data.emplace_back(static_cast<size_t>(info.numel()));
    ckpt.read(name, false, info.shape, buf.data(), buf.size() * sizeof(float));
    writes.push_back(
        TensorWrite{name, TensorDtype::F32, info.shape, buf.data(), buf.size() * sizeof(float)});
  }
  // Written beside `out`, then renamed: nothing half-written under its name.
  write_safetensors(out, writes,
                    {{"format", "pt"},
                     {"source", "pprun checkpoint " + ckpt.dir()},
                     {"step", std::to_string(ckpt.state().step)}},
                    "--export");
  return names.size();
}

}  // namespace pprt
