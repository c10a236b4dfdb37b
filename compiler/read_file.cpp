#include "compiler/read_file.h"

#include <fmt/format.h>

#include <fstream>
#include <sstream>

#include "compiler/diagnostic.h"

namespace ppc {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UserError(fmt::format("cannot open '{}' for reading", path), input_location(path));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw UserError(fmt::format("error reading '{}'", path), input_location(path));
  return ss.str();
}

}  // namespace ppc
