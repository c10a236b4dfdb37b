#include "tools/ppcompile/output.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <iostream>

#include "compiler/diagnostic.h"

namespace {

ppc::UserError output_error(std::string message) {
  return ppc::UserError(std::move(message), ppc::SourceLocation{"-o", 0, 0, ""});
}

}  // namespace

Output::Output(std::string path) : path_(std::move(path)) {
  if (path_.empty()) return;
  tmp_ = path_ + ".tmp." + std::to_string(getpid());
  file_.open(tmp_, std::ios::binary);
  if (!file_) throw output_error(fmt::format("cannot open '{}' for writing", path_));
}

Output::~Output() {
  if (!path_.empty() && !committed_) {
    file_.close();
    std::remove(tmp_.c_str());
  }
}

std::ostream& Output::stream() {
  return path_.empty() ? std::cout : file_;
}

void Output::commit() {
  committed_ = true;
  if (path_.empty()) {
    std::cout << std::flush;
    return;
  }
  file_.close();
  if (!file_) {
    std::remove(tmp_.c_str());
    throw output_error(fmt::format("error writing '{}'", path_));
  }
  std::error_code ec;
  std::filesystem::rename(tmp_, path_, ec);
  if (ec) {
    std::remove(tmp_.c_str());
    throw output_error(fmt::format("cannot write '{}': {}", path_, ec.message()));
  }
}
