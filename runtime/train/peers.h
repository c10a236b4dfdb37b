// Connects a rank to every rank its plan exchanges tensors with, before the first step.
//
// NCCL connects two ranks lazily, in the first group of operations between them, and issues that
// group only once the connection stands, which takes the peer's matching operations of the same
// group. In a replay's first step that ties a batch's every operation to its slowest partner:
// a send that the deadlock model (docs/deadlock-model.md) lets run ahead is held back until the
// peer also posts the batch's receive, while the peer, whose device already waits for that send,
// may be blocked in a host call that waits for its device (the first launch of a kernel waits for
// the device to drain): the two ranks wait for each other (docs/gpu.md, "The hang of issue 38").
// One exchange with every peer before the first step makes every connection at a point where all
// ranks meet: afterwards every operation of a batch runs as soon as its own partner is posted.
// Included only by LibTorch translation units.
#pragma once

#include <chrono>

#include "compiler/plan.h"
#include "runtime/transport/transport.h"

namespace c10 {
struct Device;
}

namespace pprt {

// The tag of the exchange: above any tag of a plan's transfers (executor.cpp: (stage * microbatches
// + microbatch) * 2 + direction).
inline constexpr uint32_t kConnectTag = 0x7fffffff;

// Every rank of the pipeline calls it at the same point, before any other operation between two
// of them: `rank` (its position in `plan`) sends one number to, and receives one from, each rank
// its plan exchanges tensors with, in one batch on `transport`, and checks what it received.
// Throws TransportError on a failure or after `timeout`. No-op when the plan has no transfers.
void connect_peers(Transport& transport, const ppc::Plan& plan, int rank, const c10::Device& device,
                   std::chrono::milliseconds timeout);

}  // namespace pprt
