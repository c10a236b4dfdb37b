// Reading an input file whole.
#pragma once

#include <string>

namespace ppc {

// The contents of the file at `path`; a UserError naming the file if it cannot be read.
std::string read_file(const std::string& path);

}  // namespace ppc
