// The NCCL transport: ncclSend/ncclRecv grouped per batch, for CUDA tensors. Compiled only when
// CMake finds the CUDA toolkit and NCCL (PPRT_HAVE_NCCL); it includes no LibTorch CUDA header
// (the caller's stream comes through LibTorch's device-generic interface), so it builds against a
// CPU-only LibTorch too (it then never runs: pprun refuses --device cuda before creating it).
//
// Streams: the operations run on a communication stream of our own, a non-blocking one, so that
// transfers overlap the computation (the executor's compute stream, or LibTorch's default stream).
// The ordering is explicit, with events:
//  - each batch, all-reduce and barrier first makes the communication stream wait for an event
//    recorded on the caller's current stream: its transfers start after the kernels queued before
//    it (those that made what it sends, and the last reads of a buffer it receives into);
//  - an event recorded after the operations ends each: Work::wait() waits for it on the host
//    (polling, with the communicator's errors and the timeout watched), and
//    Work::wait_on_current_stream() makes the caller's current stream wait for it on the device
//    (cudaStreamWaitEvent), the host going on queuing.
// Memory: the caller keeps every tensor until its Work has been waited for on the host
// (transport.h), so the caching allocator never reuses a block a transfer still uses.
//
// Failures: the communicator is non-blocking (ncclConfig_t::blocking = 0), so every wait polls
// ncclCommGetAsyncError and gives up after its timeout with ncclCommAbort: no wait can hang.
#include <cuda_runtime.h>
#include <fmt/format.h>
#include <nccl.h>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/Stream.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "compiler/diagnostic.h"
#include "runtime/transport/transport.h"

namespace pprt {

namespace {

using Clock = std::chrono::steady_clock;

void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    throw TransportError(
        fmt::format("{}: CUDA error {}: {}", what, static_cast<int>(e), cudaGetErrorString(e)));
}

ncclDataType_t nccl_type(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kFloat:
      return ncclFloat32;
    case at::kDouble:
      return ncclFloat64;
    case at::kHalf:
      return ncclFloat16;
    case at::kBFloat16:
      return ncclBfloat16;
    case at::kLong:
      return ncclInt64;
    case at::kInt:
      return ncclInt32;
    default:
      throw TransportError(fmt::format("the NCCL transport cannot send tensors of type {}",
                                       std::string(t.dtype().name())));
  }
}

// The calling thread's current CUDA stream on `device` (LibTorch's; its default stream when no
// stream guard is set), or the legacy default stream when LibTorch has no CUDA.
cudaStream_t current_stream(int device) {
  if (!c10::impl::hasDeviceGuardImpl(c10::DeviceType::CUDA)) return cudaStreamLegacy;
  const c10::Stream s =
      c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)
          ->getStream(c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(device)));
  return static_cast<cudaStream_t>(s.native_handle());
}

class Comm {
 public:
  // `key`: the communicator's name in the store ("" for the world, else a group's key).
  Comm(Store& store, int rank, int size, int device, std::chrono::milliseconds timeout,
       const std::string& key)
      : rank_(rank), size_(size), timeout_(timeout) {
    int count = 0;
    check_cuda(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
    if (count < 1) throw TransportError("no CUDA device is visible");
    device_ = device % count;
    check_cuda(cudaSetDevice(device_), "cudaSetDevice");
    check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    check_cuda(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming), "cudaEventCreate");
    ncclUniqueId id;
    if (rank == 0) {
      check(ncclGetUniqueId(&id), "ncclGetUniqueId");
      store.set("nccl/" + key + "id", std::string(reinterpret_cast<const char*>(&id), sizeof id));
    } else {
      const std::string b = store.get("nccl/" + key + "id");
      if (b.size() != sizeof id)
        throw TransportError("malformed NCCL unique id in the rendezvous store");
      std::memcpy(&id, b.data(), sizeof id);
    }
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclResult_t r = ncclCommInitRankConfig(&comm_, size, id, rank, &config);
    if (r != ncclSuccess && r != ncclInProgress) check(r, "ncclCommInitRankConfig");
    settle("joining the NCCL communicator", timeout);
  }
  ~Comm() {
    if (comm_) {
      if (failed_)
        ncclCommAbort(comm_);
      else
        ncclCommDestroy(comm_);
    }
    if (ready_) cudaEventDestroy(ready_);
    if (stream_) cudaStreamDestroy(stream_);
  }
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;

  ncclComm_t comm() const { return comm_; }
  cudaStream_t stream() const { return stream_; }
  int rank() const { return rank_; }
  int size() const { return size_; }
  int device() const { return device_; }

  // Makes the communication stream wait for the work queued so far on the caller's current
  // stream (cudaStreamWaitEvent takes the event's state now: `ready_` can be recorded again).
  void follow_caller() {
    check_cuda(cudaEventRecord(ready_, current_stream(device_)), "cudaEventRecord");
    check_cuda(cudaStreamWaitEvent(stream_, ready_, 0), "cudaStreamWaitEvent");
  }

  void check(ncclResult_t r, const char* what) {
    if (r == ncclSuccess || r == ncclInProgress) return;
    fail(fmt::format("{}: {} ({})", what, ncclGetErrorString(r),
                     ncclGetLastError(comm_) ? ncclGetLastError(comm_) : ""));
  }

  // Polls a non-blocking call until it has been issued (for a group with a peer it has not
  // exchanged with yet, until NCCL has connected to it, which needs the peer's matching calls).
  void settle(const char* what, std::chrono::milliseconds timeout) {
    const auto deadline = Clock::now() + timeout;
    for (;;) {
      ncclResult_t st = ncclSuccess;
      ncclCommGetAsyncError(comm_, &st);
      if (st == ncclSuccess) return;
      if (st != ncclInProgress) check(st, what);
      if (Clock::now() > deadline)
        fail(
            fmt::format("{}: timed out after {} ms (NCCL had not issued it: a peer did not make "
                        "its matching call)",
                        what, timeout.count()));
      // (a sleep, not a spin: with several ranks per machine, NCCL's proxy threads, which move
      // the network transport's data, need the cores)
      std::this_thread::sleep_for(std::chrono::microseconds(10));
    }
  }

  // Waits for `event` (recorded after a group), watching the communicator for errors.
  void wait_event(cudaEvent_t event, const std::string& what, std::chrono::milliseconds timeout) {
    const auto deadline = Clock::now() + timeout;
    for (;;) {
      const cudaError_t e = cudaEventQuery(event);
      if (e == cudaSuccess) return;
      if (e != cudaErrorNotReady) {
        failed_ = true;
        check_cuda(e, what.c_str());
      }
      ncclResult_t st = ncclSuccess;
      ncclCommGetAsyncError(comm_, &st);
      if (st != ncclSuccess && st != ncclInProgress) check(st, what.c_str());
      if (Clock::now() > deadline)
        fail(fmt::format("{}: timed out after {} ms (a peer rank was lost or stopped)", what,
                         timeout.count()));
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }

  std::chrono::milliseconds timeout() const { return timeout_; }

 private:
  [[noreturn]] void fail(const std::string& msg) {
    failed_ = true;
    if (comm_) {
      ncclCommAbort(comm_);
      comm_ = nullptr;
    }
    throw TransportError(msg);
  }

  int rank_, size_, device_ = 0;
  std::chrono::milliseconds timeout_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t ready_ = nullptr;
  bool failed_ = false;
};

// One event per batch, shared by the batch's Works.
struct Event {
  cudaEvent_t ev = nullptr;
  Event() { check_cuda(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "cudaEventCreate"); }
  ~Event() { cudaEventDestroy(ev); }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
};

class NcclWork final : public Work {
 public:
  NcclWork(Comm& comm, std::shared_ptr<Event> ev, std::string what)
      : comm_(comm), ev_(std::move(ev)), what_(std::move(what)) {}
  void wait(std::chrono::milliseconds timeout) override {
    comm_.wait_event(ev_->ev, what_, timeout);
  }
  bool done() override { return cudaEventQuery(ev_->ev) == cudaSuccess; }
  bool wait_on_current_stream() override {
    check_cuda(cudaStreamWaitEvent(current_stream(comm_.device()), ev_->ev, 0),
               "cudaStreamWaitEvent");
    return true;
  }

 private:
  Comm& comm_;
  std::shared_ptr<Event> ev_;
  std::string what_;
};

class NcclTransport final : public Transport {
 public:
  NcclTransport(Store& store, int rank, int size, int device, std::chrono::milliseconds timeout,
                const std::string& key = "")
      : store_(store), device_(device), key_(key), comm_(store, rank, size, device, timeout, key) {
    check_cuda(cudaMalloc(&scratch_, sizeof(float)), "cudaMalloc");
  }
  ~NcclTransport() override { cudaFree(scratch_); }

  int rank() const override { return comm_.rank(); }
  int size() const override { return comm_.size(); }
  const char* name() const override { return "nccl"; }

  std::vector<std::unique_ptr<Work>> post(const std::vector<P2POp>& ops,
                                          std::chrono::milliseconds timeout) override {
    auto ev = std::make_shared<Event>();
    comm_.follow_caller();
    comm_.check(ncclGroupStart(), "ncclGroupStart");
    for (const P2POp& op : ops) {
      at::Tensor& t = *op.tensor;
      if (!t.is_cuda()) throw TransportError("the NCCL transport needs CUDA tensors");
      if (op.kind == P2POp::Kind::Send)
        comm_.check(ncclSend(t.data_ptr(), static_cast<size_t>(t.numel()), nccl_type(t), op.peer,
                             comm_.comm(), comm_.stream()),
                    "ncclSend");
      else
        comm_.check(ncclRecv(t.data_ptr(), static_cast<size_t>(t.numel()), nccl_type(t), op.peer,
                             comm_.comm(), comm_.stream()),
                    "ncclRecv");
    }
    comm_.check(ncclGroupEnd(), "ncclGroupEnd");
    comm_.settle("posting a batch", timeout);
    check_cuda(cudaEventRecord(ev->ev, comm_.stream()), "cudaEventRecord");
    std::vector<std::unique_ptr<Work>> works;
    for (const P2POp& op : ops)
      works.push_back(std::make_unique<NcclWork>(
          comm_, ev,
          fmt::format("{} rank {}", op.kind == P2POp::Kind::Send ? "send to" : "receive from",
                      op.peer)));
    return works;
  }

  void allreduce_sum(at::Tensor& t, std::chrono::milliseconds timeout) override {
    if (!t.is_cuda()) throw TransportError("the NCCL transport needs CUDA tensors");
    Event ev;
    comm_.follow_caller();
    comm_.check(ncclAllReduce(t.data_ptr(), t.data_ptr(), static_cast<size_t>(t.numel()),
                              nccl_type(t), ncclSum, comm_.comm(), comm_.stream()),
                "ncclAllReduce");
    comm_.settle("all-reduce", timeout);
    check_cuda(cudaEventRecord(ev.ev, comm_.stream()), "cudaEventRecord");
    comm_.wait_event(ev.ev, "all-reduce", timeout);
  }

  std::unique_ptr<Work> allreduce_async(at::Tensor& t, std::chrono::milliseconds timeout) override {
    if (!t.is_cuda()) throw TransportError("the NCCL transport needs CUDA tensors");
    auto ev = std::make_shared<Event>();
    comm_.follow_caller();
    comm_.check(ncclAllReduce(t.data_ptr(), t.data_ptr(), static_cast<size_t>(t.numel()),
                              nccl_type(t), ncclSum, comm_.comm(), comm_.stream()),
                "ncclAllReduce");
    comm_.settle("all-reduce", timeout);
    check_cuda(cudaEventRecord(ev->ev, comm_.stream()), "cudaEventRecord");
    return std::make_unique<NcclWork>(comm_, ev, "all-reduce");
  }

  // One group of a send and a receive per peer (NCCL's own all-to-all is this), rows as bytes of
  // the rows' element type.
  void all_to_all(at::Tensor& output, const at::Tensor& input,
                  const std::vector<int64_t>& recv_rows, const std::vector<int64_t>& send_rows,
                  std::chrono::milliseconds timeout) override {
    if (!output.is_cuda() || !input.is_cuda())
      throw TransportError("the NCCL transport needs CUDA tensors");
    const int n = comm_.size();
    const std::vector<int64_t> recv = all_to_all_counts(recv_rows, output.size(0), n, "receive");
    const std::vector<int64_t> send = all_to_all_counts(send_rows, input.size(0), n, "send");
    const int64_t out_row = output.size(0) ? output.numel() / output.size(0) : 0;
    const int64_t in_row = input.size(0) ? input.numel() / input.size(0) : 0;
    auto* out = static_cast<char*>(output.data_ptr());
    const auto* in = static_cast<const char*>(input.data_ptr());
    const auto bytes = static_cast<int64_t>(input.element_size());
    Event ev;
    comm_.follow_caller();
    comm_.check(ncclGroupStart(), "ncclGroupStart");
    int64_t sent = 0, received = 0;  // rows
    for (int peer = 0; peer < n; ++peer) {
      const size_t p = static_cast<size_t>(peer);
      comm_.check(ncclSend(in + sent * in_row * bytes, static_cast<size_t>(send[p] * in_row),
                           nccl_type(input), peer, comm_.comm(), comm_.stream()),
                  "ncclSend");
      comm_.check(ncclRecv(out + received * out_row * bytes, static_cast<size_t>(recv[p] * out_row),
                           nccl_type(output), peer, comm_.comm(), comm_.stream()),
                  "ncclRecv");
      sent += send[p];
      received += recv[p];
    }
    comm_.check(ncclGroupEnd(), "ncclGroupEnd");
    comm_.settle("all-to-all", timeout);
    check_cuda(cudaEventRecord(ev.ev, comm_.stream()), "cudaEventRecord");
    comm_.wait_event(ev.ev, "all-to-all", timeout);
  }

  std::unique_ptr<Transport> new_group(const std::vector<int>& ranks,
                                       const std::string& key) override {
    const auto it = std::find(ranks.begin(), ranks.end(), comm_.rank());
    if (it == ranks.end())
      throw TransportError(fmt::format("rank {} is not in group {}", comm_.rank(), key));
    return std::make_unique<NcclTransport>(store_, static_cast<int>(it - ranks.begin()),
                                           static_cast<int>(ranks.size()), device_, comm_.timeout(),
                                           key_ + "group/" + key + "/");
  }

  void barrier(std::chrono::milliseconds timeout) override {
    Event ev;
    comm_.follow_caller();
    comm_.check(
        ncclAllReduce(scratch_, scratch_, 1, ncclFloat32, ncclSum, comm_.comm(), comm_.stream()),
        "ncclAllReduce");
    comm_.settle("barrier", timeout);
    check_cuda(cudaEventRecord(ev.ev, comm_.stream()), "cudaEventRecord");
    comm_.wait_event(ev.ev, "barrier", timeout);
  }

 private:
  Store& store_;
  int device_;
  std::string key_;  // nested groups' keys extend it
  Comm comm_;
  void* scratch_ = nullptr;
};

}  // namespace

bool nccl_available() {
  return true;
}

std::unique_ptr<Transport> make_nccl_transport(Store& store, int rank, int size, int device_index,
                                               std::chrono::milliseconds timeout) {
  return std::make_unique<NcclTransport>(store, rank, size, device_index, timeout);
}

}  // namespace pprt
