// Expert parallelism's all-to-alls, timed (timed_transport.h).
#include "runtime/train/timed_transport.h"

#include <ATen/core/Tensor.h>

#include <algorithm>
#include <numeric>
#include <string>

#include "runtime/train/replay_times.h"  // now_ns: the executor's clock

namespace pprt {

void AllToAllLog::add(const AllToAllSpan& span) {
  std::lock_guard<std::mutex> lock(m_);
  spans_.push_back(span);
}

void AllToAllLog::take(int64_t begin_ns, std::vector<AllToAllSpan>& out) {
  std::lock_guard<std::mutex> lock(m_);
  for (AllToAllSpan s : spans_)
    if (s.start >= begin_ns) {
      s.start -= begin_ns;
      s.end -= begin_ns;
      out.push_back(s);
    }
  spans_.clear();
  std::stable_sort(out.begin(), out.end(), [](const AllToAllSpan& a, const AllToAllSpan& b) {
    return a.start < b.start;
  });
}

namespace {

class TimedTransport final : public Transport {
 public:
  TimedTransport(Transport& inner, AllToAllLog& log, bool backward)
      : inner_(inner), log_(log), backward_(backward) {}

  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  const char* name() const override { return inner_.name(); }
  std::vector<std::unique_ptr<Work>> post(const std::vector<P2POp>& ops,
                                          std::chrono::milliseconds timeout) override {
    return inner_.post(ops, timeout);
  }
  void allreduce_sum(at::Tensor& tensor, std::chrono::milliseconds timeout) override {
    inner_.allreduce_sum(tensor, timeout);
  }
  std::unique_ptr<Work> allreduce_async(at::Tensor& tensor,
                                        std::chrono::milliseconds timeout) override {
    return inner_.allreduce_async(tensor, timeout);
  }
  void all_to_all(at::Tensor& output, const at::Tensor& input,
                  const std::vector<int64_t>& recv_rows, const std::vector<int64_t>& send_rows,
                  std::chrono::milliseconds timeout) override {
    AllToAllSpan s;
    s.backward = backward_;
    s.counts = send_rows.empty();
    // The bytes that cross to other ranks: every row but this rank's own share.
    const int me = inner_.rank(), n = inner_.size();
    const int64_t in_rows = input.dim() > 0 ? input.size(0) : 0;
    const int64_t out_rows = output.dim() > 0 ? output.size(0) : 0;
    const int64_t in_row_bytes = in_rows > 0 ? input.nbytes() / in_rows : 0;
    const int64_t out_row_bytes = out_rows > 0 ? output.nbytes() / out_rows : 0;
    auto own = [&](const std::vector<int64_t>& rows, int64_t all) {
      return rows.empty() ? all / std::max(n, 1) : rows[static_cast<size_t>(me)];
    };
    s.sent_rows = in_rows;
    s.sent_bytes = (in_rows - own(send_rows, in_rows)) * in_row_bytes;
    s.received_bytes = (out_rows - own(recv_rows, out_rows)) * out_row_bytes;
    s.start = now_ns();
    inner_.all_to_all(output, input, recv_rows, send_rows, timeout);
    s.end = now_ns();
    log_.add(s);
  }
  void barrier(std::chrono::milliseconds timeout) override { inner_.barrier(timeout); }
  std::unique_ptr<Transport> new_group(const std::vector<int>& ranks,
                                       const std::string& key) override {
    return inner_.new_group(ranks, key);
  }

 private:
  Transport& inner_;
  AllToAllLog& log_;
  bool backward_;
};

}  // namespace

TimedExperts::TimedExperts(Transport* forward, Transport* backward)
    : forward_(std::make_unique<TimedTransport>(*forward, log_, false)),
      backward_(std::make_unique<TimedTransport>(*backward, log_, true)) {}

TimedExperts::~TimedExperts() = default;

}  // namespace pprt
