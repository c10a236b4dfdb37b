#include "runtime/output/param_dump.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "compiler/diagnostic.h"
#include "runtime/fail.h"

namespace pprt {

std::string param_dump_line(const std::string& name, const std::vector<int64_t>& shape,
                            const float* data, size_t n) {
  std::string out = fmt::format("{{\"name\":{},\"shape\":[{}],\"data\":[",
                                nlohmann::json(name).dump(), fmt::join(shape, ","));
  out.reserve(out.size() + n * 12);
  for (size_t i = 0; i < n; ++i) {
    if (i) out += ',';
    fmt::format_to(std::back_inserter(out), "{}",
                   data[i]);  // shortest text that reads back exactly
  }
  out += "]}\n";
  return out;
}

std::map<int, std::map<std::string, DumpedParam>> read_param_dump_by_rank(const std::string& dir) {
  namespace fs = std::filesystem;
  std::map<int, std::map<std::string, DumpedParam>> by_rank;
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    fail(dir, fmt::format("'{}' is not a directory of parameter dumps", dir));
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string file = entry.path().filename().string();
    if (file.rfind("params.rank", 0) != 0 || entry.path().extension() != ".jsonl") continue;
    const std::string number = file.substr(11, file.size() - 11 - 6);
    if (number.empty() || number.find_first_not_of("0123456789") != std::string::npos ||
        number.size() > 6)
      continue;
    std::map<std::string, DumpedParam>& out = by_rank[std::stoi(number)];
    std::ifstream in(entry.path());
    std::string line;
    int lineno = 0;
    while (std::getline(in, line)) {
      ++lineno;
      const ppc::SourceLocation where{entry.path().string(), lineno, 0, ""};
      nlohmann::json j;
      try {
        j = nlohmann::json::parse(line);
      } catch (const nlohmann::json::exception& e) {
        throw ppc::UserError(fmt::format("not a parameter record: {}", e.what()), where);
      }
      try {
        const std::string name = j.at("name").get<std::string>();
        DumpedParam p{j.at("shape").get<std::vector<int64_t>>(),
                      j.at("data").get<std::vector<float>>()};
        if (!out.emplace(name, std::move(p)).second)
          throw ppc::UserError(fmt::format("parameter '{}' appears twice", name), where);
      } catch (const nlohmann::json::exception& e) {
        throw ppc::UserError(fmt::format("not a parameter record: {}", e.what()), where);
      }
    }
  }
  return by_rank;
}

std::map<std::string, DumpedParam> read_param_dump(const std::string& dir) {
  std::map<std::string, DumpedParam> out;
  std::map<std::string, int> first_rank;
  for (auto& [rank, params] : read_param_dump_by_rank(dir))
    for (auto& [name, p] : params) {
      auto [it, fresh] = out.emplace(name, p);
      if (fresh) {
        first_rank[name] = rank;
        continue;
      }
      const DumpedParam& q = it->second;
      const bool same =
          p.shape == q.shape && p.data.size() == q.data.size() &&
          std::memcmp(p.data.data(), q.data.data(), p.data.size() * sizeof(float)) == 0;
      if (!same)
        fail(dir,
             fmt::format("the copies of shared parameter '{}' differ between params.rank{}.jsonl "
                         "and params.rank{}.jsonl",
                         name, first_rank[name], rank));
    }
  return out;
}

DumpComparison compare_param_dumps(const std::map<std::string, DumpedParam>& a,
                                   const std::map<std::string, DumpedParam>& b) {
  DumpComparison c;
  for (const auto& [name, pa] : a) {
    auto it = b.find(name);
    if (it == b.end()) {
      c.only_in_a.push_back(name);
      continue;
    }
    const DumpedParam& pb = it->second;
    if (pa.shape != pb.shape || pa.data.size() != pb.data.size()) {
      c.shape_differs.push_back(name);
      continue;
    }
    ++c.compared;
    for (size_t i = 0; i < pa.data.size(); ++i) {
      const double d = std::fabs(static_cast<double>(pa.data[i]) - static_cast<double>(pb.data[i]));
      if (d > c.max_abs_diff || std::isnan(d)) {
        c.max_abs_diff = std::isnan(d) ? INFINITY : d;
        c.worst = name;
      }
    }
  }
  for (const auto& [name, pb] : b)
    if (!a.count(name)) c.only_in_b.push_back(name);
  return c;
}

}  // namespace pprt
