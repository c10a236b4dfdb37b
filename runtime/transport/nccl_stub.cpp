// Stands in for transport/nccl.cpp in builds without the CUDA toolkit or NCCL.
#include "compiler/diagnostic.h"
#include "runtime/transport/transport.h"

namespace pprt {

bool nccl_available() {
  return false;
}

std::unique_ptr<Transport> make_nccl_transport(Store&, int, int, int, std::chrono::milliseconds) {
  throw ppc::UserError(
      "--device cuda: this pprun was built without the NCCL transport (CMake found no CUDA toolkit "
      "or no NCCL); "
      "rebuild with them, or use --device cpu");
}

}  // namespace pprt
