// libFuzzer's entry point for a binary that holds one target (fuzz/CMakeLists.txt).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "fuzz/fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const ppfuzz::TargetFn fn = [] {
    if (ppfuzz::targets().size() != 1) {
      std::fprintf(stderr, "a fuzz binary must hold exactly one target\n");
      std::abort();
    }
    return ppfuzz::targets().front().fn;
  }();
  fn(std::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}
