// A Hugging Face config.json read field by field (hf_mapping.cpp, hf_moe.cpp): each field asked
// for is noted as used, so that the reader can refuse the fields nobody used. Bad values throw
// ppc::UserError naming the file and the field. No LibTorch.
#pragma once

#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>

#include "runtime/fail.h"

namespace pprt {

struct HfConfigReader {
  const std::string& file;
  const nlohmann::json& j;
  std::set<std::string> used;

  bool has(const std::string& k) const { return j.contains(k) && !j.at(k).is_null(); }
  const nlohmann::json& at(const std::string& k) {
    used.insert(k);
    return j.at(k);
  }
  int integer(const std::string& k, std::optional<int> dflt = std::nullopt) {
    used.insert(k);
    if (!has(k)) {
      if (dflt) return *dflt;
      fail(file, fmt::format("{}: missing (a positive integer)", k));
    }
    const nlohmann::json& v = j.at(k);
    if (!v.is_number_integer() || v.get<long long>() < 1 || v.get<long long>() > (1 << 24))
      fail(file, fmt::format("{}: expected a positive integer, got {}", k, v.dump()));
    return v.get<int>();
  }
  double number(const nlohmann::json& v, const std::string& name) {
    if (!v.is_number() || !(v.get<double>() > 0))
      fail(file, fmt::format("{}: expected a positive number, got {}", name, v.dump()));
    return v.get<double>();
  }
  bool boolean(const std::string& k, bool dflt) {
    used.insert(k);
    if (!has(k)) return dflt;
    if (!j.at(k).is_boolean())
      fail(file, fmt::format("{}: expected true or false, got {}", k, j.at(k).dump()));
    return j.at(k).get<bool>();
  }
};

}  // namespace pprt
