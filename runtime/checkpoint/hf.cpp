// Hugging Face model directories in and out (hf.h): the files, for any model's Hugging Face form.
#include "runtime/checkpoint/hf.h"

#include <fmt/format.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>

#include "compiler/atomic_file.h"
#include "compiler/diagnostic.h"
#include "compiler/read_file.h"
#include "runtime/checkpoint/format.h"
#include "runtime/checkpoint/hf_internal.h"
#include "runtime/fail.h"

namespace pprt {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace hf_internal;

namespace {

std::string dtype_word(TensorDtype t) {
  return t == TensorDtype::BF16 ? "bf16" : t == TensorDtype::F16 ? "fp16" : "fp32";
}

// The shape a tensor is stored with: its own, or a matrix's transposed.
std::vector<int64_t> stored_shape(const HfTensor& t) {
  if (!t.transposed) return t.shape;
  PPC_INTERNAL_ASSERT(t.shape.size() == 2, "only a matrix is stored transposed");
  return {t.shape[1], t.shape[0]};
}

// `src` ([rows, cols] row-major) transposed into `dst` ([cols, rows]).
template <class T>
void transpose(const T* src, T* dst, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) dst[c * rows + r] = src[r * cols + c];
}

}  // namespace

// --- in ---------------------------------------------------------------------------------------

HfDirectory::HfDirectory(const std::string& dir) : dir_(dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    fail("--init-from", fmt::format("'{}' is not a directory (a Hugging Face model directory: "
                                    "config.json and model.safetensors)",
                                    dir));
  config_file_ = (fs::path(dir) / "config.json").string();
  if (!fs::exists(config_file_, ec))
    fail(config_file_, "no such file (a Hugging Face model's config)");
  try {
    config_ = json::parse(ppc::read_file(config_file_));
  } catch (const json::exception& e) {
    fail(config_file_, fmt::format("not valid JSON: {}", e.what()));
  }
  if (!config_.is_object())
    fail(config_file_, "expected a JSON object (a Hugging Face config.json)");
}

HfDirectory::~HfDirectory() = default;
HfDirectory::HfDirectory(HfDirectory&&) noexcept = default;
HfDirectory& HfDirectory::operator=(HfDirectory&&) noexcept = default;

void HfDirectory::open_weights() {
  std::error_code ec;
  const std::string single = (fs::path(dir_) / "model.safetensors").string();
  const std::string index = (fs::path(dir_) / "model.safetensors.index.json").string();
  std::vector<std::string> names;  // the files
  std::map<std::string, std::string> weight_map;
  if (fs::exists(single, ec)) {
    names.push_back("model.safetensors");
  } else if (fs::exists(index, ec)) {
    json j;
    try {
      j = json::parse(ppc::read_file(index));
    } catch (const json::exception& e) {
      fail(index, fmt::format("not valid JSON: {}", e.what()));
    }
    if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
      fail(index, "weight_map: missing (expected {\"weight_map\": {tensor: file}})");
    std::set<std::string> seen;
    for (const auto& item : j["weight_map"].items()) {
      if (!item.value().is_string() ||
          item.value().get<std::string>().find('/') != std::string::npos)
        fail(index, fmt::format("weight_map: tensor '{}': expected a file name in {}, got {}",
                                ppc::printable(item.key()), dir_, item.value().dump()));
      const std::string f = item.value().get<std::string>();
      weight_map[item.key()] = f;
      if (seen.insert(f).second) names.push_back(f);
    }
  } else {
    fail(dir_,
         "no model.safetensors or model.safetensors.index.json (pprun reads safetensors "
         "weights only)");
  }
  std::map<std::string, std::string> found;  // tensor -> file
  files_.reserve(names.size());              // tensors_ points into the files
  for (const std::string& n : names) {
    const std::string path = (fs::path(dir_) / n).string();
    if (!fs::exists(path, ec))
      fail(index, fmt::format("names the shard {}, which does not exist", n));
    files_.emplace_back(path);  // validates the header against the file's size
    const SafetensorsFile& f = files_.back();
    for (const TensorInfo& t : f.tensors()) {
      if (auto [it, fresh] = found.emplace(t.name, path); !fresh)
        fail(path, fmt::format("tensor '{}' is also in {}", ppc::printable(t.name), it->second));
      if (!weight_map.empty() && weight_map.count(t.name) && weight_map.at(t.name) != n)
        fail(path, fmt::format("tensor '{}': the index says it is in {}", ppc::printable(t.name),
                               weight_map.at(t.name)));
      tensors_[t.name] = Where{files_.size() - 1, &t};
    }
  }
  for (const auto& [name, file] : weight_map)
    if (!tensors_.count(name))
      fail((fs::path(dir_) / file).string(),
           fmt::format("no tensor '{}' (the index {} names it)", ppc::printable(name), index));
}

void HfDirectory::check_weights(const HfFormat& format) const {
  std::set<std::string> wanted;
  for (const HfTensor& p : format.tensors) {
    const std::string& name = p.hf_name;
    wanted.insert(name);
    auto it = tensors_.find(name);
    if (it == tensors_.end())
      fail(files_.size() == 1 ? files_[0].path()
                              : (fs::path(dir_) / "model.safetensors.index.json").string(),
           fmt::format("no tensor '{}' (the {} of {} needs it)", name, format.architecture,
                       format.description));
    const TensorInfo& t = *it->second.info;
    const std::string& file = files_[it->second.file].path();
    if (t.dtype != TensorDtype::F32 && t.dtype != TensorDtype::BF16 && t.dtype != TensorDtype::F16)
      fail(file, fmt::format("tensor '{}': dtype {} (pprun reads F32, BF16 and F16)", name,
                             dtype_name(t.dtype)));
    if (t.shape != stored_shape(p))
      fail(file, fmt::format("tensor '{}': shape {}, but config.json's model needs {}", name,
                             shape_string(t.shape), shape_string(stored_shape(p))));
  }
  std::vector<std::regex> leftovers;
  for (const std::string& l : format.leftovers) leftovers.emplace_back(l);
  for (const auto& [name, where] : tensors_) {
    if (wanted.count(name)) continue;
    if (std::any_of(leftovers.begin(), leftovers.end(),
                    [&](const std::regex& r) { return std::regex_match(name, r); }))
      continue;
    fail(files_[where.file].path(),
         fmt::format("tensor '{}' is not a parameter of the {} config.json describes ({} layers)",
                     ppc::printable(name), format.architecture, format.layers));
  }
}

void HfDirectory::read(const HfTensor& t, float* dst) const {
  const Where& w = tensors_.at(t.hf_name);
  const size_t numel = w.info->numel();
  std::vector<float> stored;
  float* to = dst;
  if (t.transposed) {
    stored.resize(numel);
    to = stored.data();
  }
  if (w.info->dtype == TensorDtype::F32) {
    files_[w.file].read_bytes(*w.info, to);
  } else {
    std::vector<uint16_t> half(numel);
    files_[w.file].read_bytes(*w.info, half.data());
    const bool bf16 = w.info->dtype == TensorDtype::BF16;
    for (size_t i = 0; i < numel; ++i)
      to[i] = bf16 ? bf16_to_float(half[i]) : f16_to_float(half[i]);
  }
  if (t.transposed) transpose(stored.data(), dst, t.shape[1], t.shape[0]);
}

std::string HfDirectory::describe(const HfFormat& format) const {
  std::set<TensorDtype> dtypes;
  for (const auto& [name, w] : tensors_) dtypes.insert(w.info->dtype);
  std::string ds;
  for (TensorDtype t : dtypes) {
    if (!ds.empty()) ds += '+';
    ds += dtype_word(t);
  }
  return fmt::format("{} from {} ({} layers, {} file{}, {})", format.architecture, dir_,
                     format.layers, files_.size(), files_.size() == 1 ? "" : "s", ds);
}

// --- out --------------------------------------------------------------------------------------

uint64_t parse_byte_size(const std::string& text, const std::string& flag) {
  static const std::regex kSize(R"((\d+)\s*(B|KB|MB|GB|KiB|MiB|GiB)?)", std::regex::icase);
  std::smatch m;
  if (!std::regex_match(text, m, kSize) || m[1].length() > 15)
    fail(flag, fmt::format("'{}' is not a size such as 5GB, 500MB or 2GiB", ppc::printable(text)));
  uint64_t n = std::stoull(m[1].str());
  std::string unit = m[2].str();
  for (char& ch : unit) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  const uint64_t mult = unit == "KB"    ? 1000ull
                        : unit == "MB"  ? 1000ull * 1000
                        : unit == "GB"  ? 1000ull * 1000 * 1000
                        : unit == "KIB" ? 1ull << 10
                        : unit == "MIB" ? 1ull << 20
                        : unit == "GIB" ? 1ull << 30
                                        : 1;
  if (n == 0) fail(flag, "must be positive");
  return n * mult;
}

HfExport export_hf(const std::string& path, const HfFormat& format, const std::string& out_dir,
                   TensorDtype dtype, uint64_t max_shard_bytes) {
  PPC_INTERNAL_ASSERT(dtype == TensorDtype::F32 || dtype == TensorDtype::BF16,
                      "export dtype is F32 or BF16");
  const Checkpoint ckpt(path);
  std::error_code ec;
  if (fs::exists(out_dir, ec) && !(fs::is_directory(out_dir, ec) && fs::is_empty(out_dir, ec)))
    fail("--export", fmt::format("'{}' exists and is not an empty directory (nothing is "
                                 "overwritten)",
                                 out_dir));
  HfExport result;
  result.architecture = format.architecture;

  // The tensors, in the model's order, read as F32 and converted.
  struct Tensor {
    std::string name;
    std::vector<int64_t> shape;
    std::vector<float> f32;
    std::vector<uint16_t> half;
    TensorWrite write() const {
      const void* p = half.empty() ? static_cast<const void*>(f32.data()) : half.data();
      const size_t bytes = half.empty() ? f32.size() * 4 : half.size() * 2;
      return TensorWrite{name, half.empty() ? TensorDtype::F32 : TensorDtype::BF16, shape, p,
                         bytes};
    }
  };
  std::vector<Tensor> tensors;
  for (const HfTensor& p : format.tensors) {
    const TensorInfo& info = ckpt.info(p.name, false);
    if (info.shape != p.shape)
      fail(ckpt.dir(), fmt::format("tensor '{}': shape {} in the checkpoint's shards, but its "
                                   "model (trainer_state.json) has {}",
                                   p.name, shape_string(info.shape), shape_string(p.shape)));
    Tensor& t = tensors.emplace_back();
    t.name = p.hf_name;
    t.shape = stored_shape(p);
    t.f32.resize(static_cast<size_t>(info.numel()));
    ckpt.read(p.name, false, p.shape, t.f32.data(), t.f32.size() * sizeof(float));
    if (p.transposed) {
      std::vector<float> stored(t.f32.size());
      transpose(t.f32.data(), stored.data(), p.shape[0], p.shape[1]);
      t.f32.swap(stored);
    }
    if (dtype == TensorDtype::BF16) {
      t.half.resize(t.f32.size());
      for (size_t i = 0; i < t.f32.size(); ++i) t.half[i] = float_to_bf16(t.f32[i]);
      std::vector<float>().swap(t.f32);
    }
  }
  // Shards: tensors in order, a new shard when the next one would pass the limit.
  std::vector<std::vector<size_t>> shards(1);
  uint64_t size = 0, total = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const uint64_t b = tensors[i].write().bytes;
    if (!shards.back().empty() && size + b > max_shard_bytes) {
      shards.emplace_back();
      size = 0;
    }
    shards.back().push_back(i);
    size += b;
    total += b;
  }

  // Everything into a temporary directory beside OUT_DIR, then one rename.
  const fs::path out = fs::absolute(out_dir, ec);
  const fs::path tmp = out.parent_path() / fmt::format(".{}.tmp-export", out.filename().string());
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp, ec);
  if (ec)
    fail("--export", fmt::format("cannot create the directory {}: {}", tmp.string(), ec.message()));
  try {
    ppc::write_file_atomically((tmp / "config.json").string(), format.config.dump(2) + "\n",
                               "--export");
    const SafetensorsMetadata meta{{"format", "pt"}};
    nlohmann::ordered_json weight_map = nlohmann::ordered_json::object();
    for (size_t s = 0; s < shards.size(); ++s) {
      const std::string name =
          shards.size() == 1
              ? "model.safetensors"
              : fmt::format("model-{:05d}-of-{:05d}.safetensors", s + 1, shards.size());
      std::vector<TensorWrite> writes;
      for (size_t i : shards[s]) {
        writes.push_back(tensors[i].write());
        weight_map[tensors[i].name] = name;
      }
      write_safetensors((tmp / name).string(), writes, meta, "--export");
    }
    if (shards.size() > 1) {
      const nlohmann::ordered_json index{{"metadata", {{"total_size", total}}},
                                         {"weight_map", weight_map}};
      ppc::write_file_atomically((tmp / "model.safetensors.index.json").string(),
                                 index.dump(2) + "\n", "--export");
    }
    if (fs::exists(out, ec)) fs::remove(out, ec);  // empty (checked above)
    fs::rename(tmp, out, ec);
    if (ec)
      fail("--export",
           fmt::format("cannot rename {} to {}: {}", tmp.string(), out.string(), ec.message()));
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
  result.tensors = tensors.size();
  result.shards = shards.size();
  return result;
}

}  // namespace pprt
