// The per-parameter dump (--dump-params DIR): each rank writes DIR/params.rank<R>.jsonl, one JSON
// object per line {"name": ..., "shape": [...], "data": [...]} keyed by the parameter's global
// name, so dumps of any layout, pp and vpp (and of --reference) compare name by name. No LibTorch.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace pprt {

struct DumpedParam {
  std::vector<int64_t> shape;
  std::vector<float> data;
};

// One line of a dump (floats written so that they read back exactly).
std::string param_dump_line(const std::string& name, const std::vector<int64_t>& shape,
                            const float* data, size_t n);

// Reads every params.rank<R>.jsonl of `dir`, by rank. Throws ppc::UserError naming the file on
// malformed input or a name found twice in one file.
std::map<int, std::map<std::string, DumpedParam>> read_param_dump_by_rank(const std::string& dir);

// Reads and merges the ranks' dumps. A parameter held by several ranks (a shared weight) must be
// identical, bit for bit, in each of them; else ppc::UserError names it and the two files.
std::map<std::string, DumpedParam> read_param_dump(const std::string& dir);

struct DumpComparison {
  std::vector<std::string> only_in_a, only_in_b, shape_differs;
  double max_abs_diff = 0;  // over the parameters in both
  std::string worst;        // the parameter with the largest difference
  size_t compared = 0;      // parameters compared
};
DumpComparison compare_param_dumps(const std::map<std::string, DumpedParam>& a,
                                   const std::map<std::string, DumpedParam>& b);

}  // namespace pprt
