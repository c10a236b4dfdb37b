// The transport: how ranks exchange tensors. A narrow interface in the style of c10d's Backend,
// so that the runtime never sees c10d (whose class hierarchy differs between LibTorch 1.13 and
// 2.x) or NCCL.
//
// Ordering contract (every implementation relies on it, every caller keeps it):
//  - post() starts a batch of point-to-point operations and returns, one Work per op, in the
//    order given, without waiting for the transfers. Every rank posts its batches in the order
//    of its plan. (NCCL issues a batch as one group: the first batch with a new peer connects to
//    it, which needs the peer's matching operations; post() waits for that, at most `timeout`.
//    connect_peers() (train/peers.h) makes every connection before the first step.)
//  - A send is matched with the receive of the same tag posted by its peer (Gloo), or, for
//    transports without tags (NCCL), with the peer's receive of the same position among the
//    operations between those two ranks: the k-th send from rank a to rank b meets the k-th
//    receive on b from a. check_fifo_order() (launch/plan_load.h) checks that a plan keeps this.
//  - A tensor given to post() must stay alive and unchanged (send) or untouched (receive) until
//    its Work has been waited for. On a device with streams (NCCL), post(), allreduce_*() and
//    barrier() order their transfers after the work queued on the caller's current stream;
//    wait() blocks the host until the transfer is done, wait_on_current_stream() orders the
//    caller's later work after it without blocking. Every Work is waited for (wait()) before its
//    tensor is freed, so no transfer can outlive its memory, and no caching-allocator
//    recordStream is needed.
//  - allreduce_sum(), allreduce_async(), all_to_all() and barrier() are collective: every rank of
//    the group calls them in the same order, and only when none of its point-to-point Works is
//    pending.
//  - new_group() makes a process group over a subset of the ranks for collectives among them
//    (shared weights, data parallelism). Only its members call it, all with the same ranks and
//    key; a rank in several groups must create them and run their collectives in one order that
//    every rank agrees on (e.g. sorted), or else wait for them together.
//  - Every wait has a timeout. A failure (a lost peer, a timeout) throws TransportError; after
//    one, the transport is unusable and the process should exit.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace at {
class Tensor;
}

namespace pprt {

class TransportError : public std::runtime_error {
 public:
  explicit TransportError(const std::string& what) : std::runtime_error(what) {}
};

// An operation in flight.
class Work {
 public:
  virtual ~Work() = default;
  // Blocks until the operation is done; throws TransportError if it failed or did not finish
  // within `timeout`.
  virtual void wait(std::chrono::milliseconds timeout) = 0;
  // Whether it has finished (without waiting; a failure shows in wait()).
  virtual bool done() = 0;
  // Device-side waiting (NCCL): makes the calling thread's current stream wait for the operation
  // (the CUDA stream-wait-event) without blocking the host, and returns true; wait() must still
  // be called later, before anything reads the result on the host and before the tensor is
  // freed, to see a failure or the timeout. false (Gloo, CPU tensors): the transport cannot;
  // call wait() before using the result.
  virtual bool wait_on_current_stream() { return false; }
};

struct P2POp {
  enum class Kind : uint8_t { Send, Recv };
  Kind kind = Kind::Send;
  int peer = -1;
  uint32_t tag = 0;
  at::Tensor* tensor = nullptr;  // not owned; see the contract above
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual const char* name() const = 0;  // "gloo", "nccl"
  // Starts the operations of one batch (NCCL: one ncclGroupStart/End group); `timeout` limits
  // how long issuing them may take (NCCL: connecting to a new peer).
  virtual std::vector<std::unique_ptr<Work>> post(const std::vector<P2POp>& ops,
                                                  std::chrono::milliseconds timeout) = 0;
  // In-place sum over all ranks; blocking.
  virtual void allreduce_sum(at::Tensor& tensor, std::chrono::milliseconds timeout) = 0;
  // Starts an in-place sum over all ranks; `tensor` must stay alive until the Work is waited for.
  // `timeout` limits how long starting it may take (NCCL: connecting the group's ring).
  virtual std::unique_ptr<Work> allreduce_async(at::Tensor& tensor,
                                                std::chrono::milliseconds timeout) = 0;
  // All-to-all (a mixture of experts' token exchange): `input`'s rows (its first dimension) go out
  // in rank order, `send_rows[j]` of them to rank j, and `output` (the caller's, of the same dtype
  // and row shape) receives in rank order `recv_rows[j]` rows from rank j. Empty counts: equal
  // splits (size(0) / size() rows each). Both tensors contiguous. Blocking.
  virtual void all_to_all(at::Tensor& output, const at::Tensor& input,
                          const std::vector<int64_t>& recv_rows,
                          const std::vector<int64_t>& send_rows,
                          std::chrono::milliseconds timeout) = 0;
  virtual void barrier(std::chrono::milliseconds timeout) = 0;
  // A process group over `ranks` (sorted, distinct, this rank among them); its rank() is this
  // rank's position in `ranks`. `key` names the group in the rendezvous store: unique per group.
  virtual std::unique_ptr<Transport> new_group(const std::vector<int>& ranks,
                                               const std::string& key) = 0;
};

// all_to_all()'s counts made whole: the equal splits of `rows` where `counts` is empty, checked
// against the group's `size` and the tensor's rows (a caller's mistake: TransportError).
std::vector<int64_t> all_to_all_counts(const std::vector<int64_t>& counts, int64_t rows, int size,
                                       const char* which);

// A key-value store shared by all ranks (the rendezvous store): used to set up transports, to
// gather small reports (statistics, traces) and to tell ranks which rank was lost.
class Store {
 public:
  virtual ~Store() = default;
  virtual void set(const std::string& key, const std::string& value) = 0;
  // Blocks until the key exists (or throws TransportError after the store's timeout).
  virtual std::string get(const std::string& key) = 0;
  virtual bool check(const std::string& key) = 0;
  // Sets the key if it does not exist; returns the value the key holds afterwards.
  virtual std::string set_if_absent(const std::string& key, const std::string& value) = 0;
};

struct StoreOptions {
  std::string host = "127.0.0.1";
  int port = 0;  // server: 0 = any free port
  bool is_server = false;
  int world_size = 1;
  std::string prefix;  // prepended to every key (keeps runs sharing a store apart)
  std::chrono::milliseconds timeout{300'000};
};

// c10d's TCPStore. A server listens on `port` (0: a free one, see store_port()).
std::unique_ptr<Store> make_tcp_store(const StoreOptions& opts);
int store_port(const Store& store);  // the port a TCP store listens on / connects to

struct GlooOptions {
  std::string interface;  // GLOO_SOCKET_IFNAME; empty = by host name
  std::string
      hostname;  // address to bind; empty = the machine's host name (or 127.0.0.1 for a local run)
  std::chrono::milliseconds timeout{300'000};
};
// c10d ProcessGroupGloo over `store` (under the key prefix "gloo"). CPU tensors.
std::unique_ptr<Transport> make_gloo_transport(Store& store, int rank, int size,
                                               const GlooOptions& opts);

// NCCL (ncclSend/ncclRecv grouped per batch) for CUDA tensors on device `device_index` modulo the
// visible devices (the local rank; the trainer picks its device the same way); the NCCL
// unique id travels through `store`. Throws ppc::UserError when this build has no NCCL transport
// (nccl_available() is false).
bool nccl_available();
std::unique_ptr<Transport> make_nccl_transport(Store& store, int rank, int size, int device_index,
                                               std::chrono::milliseconds timeout);

}  // namespace pprt
