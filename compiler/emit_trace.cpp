// Chrome trace / Perfetto JSON of a simulated plan (docs/trace-format.md): process = rank,
// thread 0 = compute, thread 1 = comm, an "X" slice per action, a flow ("s" -> "f") per SEND/RECV
// pair, and each rank's activation memory as a counter.
//
// Ops of one communication batch all start when the batch is entered, so their slices nest on the
// comm thread. A flow event binds to the innermost slice open at its timestamp; to bind each flow
// to its own op, op k of a batch (longest first) is shown starting k * kNestStepUs later and ending
// (n - k) * kNestStepUs later than simulated, and its flow event sits inside [start, start + step):
// a shift of nanoseconds, invisible at trace scale.
#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <iterator>
#include <nlohmann/json.hpp>
#include <numeric>
#include <ostream>

#include "compiler/emit.h"
#include "compiler/simulate.h"
#include "compiler/viz_common.h"

namespace ppc {

namespace {

constexpr double kNestStepUs = 0.01;

using Buf = fmt::memory_buffer;

std::string json_string(const std::string& s) {
  return nlohmann::json(s).dump();
}

// Microseconds to the nanosecond, trailing zeros dropped: "1000", "1000.005" (integer formatting:
// the trace of a big plan has millions of timestamps).
class Us {
 public:
  explicit Us(double us) {
    long long ns = std::llround(us * 1000.0);
    char* p = buf_;
    if (ns < 0) {
      *p++ = '-';
      ns = -ns;
    }
    p = std::to_chars(p, buf_ + sizeof buf_, ns / 1000).ptr;
    if (const int frac = static_cast<int>(ns % 1000)) {
      *p++ = '.';
      *p++ = static_cast<char>('0' + frac / 100);
      *p++ = static_cast<char>('0' + frac / 10 % 10);
      *p++ = static_cast<char>('0' + frac % 10);
      while (p[-1] == '0') --p;
    }
    n_ = static_cast<size_t>(p - buf_);
  }
  std::string_view view() const { return {buf_, n_}; }

 private:
  char buf_[32];
  size_t n_ = 0;
};

struct Shown {
  double ts = 0, end = 0;  // display interval of a comm op, in microseconds
};

// Display intervals of every comm op of rank r (see the file comment).
std::vector<Shown> comm_display(const std::vector<Action>& acts, const std::vector<Interval>& times,
                                double us) {
  std::vector<Shown> shown(acts.size());
  double floor = 0;
  size_t i = 0;
  while (i < acts.size()) {
    if (!is_comm(acts[i].kind)) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < acts.size() && is_comm(acts[j].kind)) ++j;
    std::vector<size_t> ops(j - i);
    std::iota(ops.begin(), ops.end(), i);
    std::stable_sort(ops.begin(), ops.end(),
                     [&](size_t a, size_t b) { return times[a].end > times[b].end; });
    const double n = static_cast<double>(ops.size());
    const double start = std::max(times[i].start * us, floor);
    double batch_end = start;
    for (size_t k = 0; k < ops.size(); ++k) {
      const double kk = static_cast<double>(k);
      Shown& s = shown[ops[k]];
      s.ts = start + kk * kNestStepUs;
      s.end = std::max(times[ops[k]].end * us, start + n * kNestStepUs) + (n - kk) * kNestStepUs;
      batch_end = std::max(batch_end, s.end);
    }
    floor = batch_end;
    i = j;
  }
  return shown;
}

}  // namespace

void emit_trace(const Plan& plan, const Simulation& sim, std::ostream& os,
                const TraceOptions& opts) {
  PPC_INTERNAL_ASSERT(plan.is_lowered() && sim.times.size() == plan.lowered.size(),
                      "the trace needs a lowered plan and its simulation");
  const double us = opts.us_per_unit;
  Buf b;
  auto out = std::back_inserter(b);
  fmt::format_to(out, "{{\"traceEvents\":[\n");
  bool first = true;
  auto sep = [&] {  // between events; hands the buffer to the stream every megabyte
    if (b.size() > (1u << 20)) {
      os.write(b.data(), static_cast<std::streamsize>(b.size()));
      b.clear();
    }
    if (!first) fmt::format_to(out, ",\n");
    first = false;
  };
  std::string name;
  std::vector<std::vector<Shown>> shown(static_cast<size_t>(plan.pp()));
  for (int r = 0; r < plan.pp(); ++r) {
    const size_t ru = static_cast<size_t>(r);
    const auto& acts = plan.lowered[ru];
    const auto& times = sim.times[ru];
    sep();
    fmt::format_to(out,
                   "{{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":{0},\"tid\":0,\"args\":{{"
                   "\"name\":\"rank {0}\"}}}},\n"
                   "{{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":{0},\"tid\":0,\"args\":{"
                   "{\"sort_index\":{0}}}}},\n"
                   "{{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":{0},\"tid\":0,\"args\":{{"
                   "\"name\":\"compute\"}}}},\n"
                   "{{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":{0},\"tid\":1,\"args\":{{"
                   "\"name\":\"comm\"}}}}",
                   r);
    shown[ru] = comm_display(acts, times, us);
    for (size_t i = 0; i < acts.size(); ++i) {
      const Action& a = acts[i];
      name.clear();
      append_to(name, a);
      sep();
      if (a.kind == ActionKind::OverlapFB) {
        fmt::format_to(
            out,
            "{{\"name\":\"{}\",\"cat\":\"OVERLAP_F_B\",\"ph\":\"X\",\"pid\":{},\"tid\":0,\"ts\":{},"
            "\"dur\":{},\"args\":{{\"stage\":{},\"microbatch\":{},\"backward\":\"{}\",\"stage2\":{}"
            ","
            "\"microbatch2\":{},\"chunk\":{},\"index\":{}}}}}",
            name, r, Us(times[i].start * us).view(),
            Us((times[i].end - times[i].start) * us).view(), a.stage, a.microbatch,
            kind_name(a.sub_kind), a.stage2, a.microbatch2, viz::chunk_of(plan, a), i);
      } else if (is_compute(a.kind)) {
        fmt::format_to(out,
                       "{{\"name\":\"{}\",\"cat\":\"{}\",\"ph\":\"X\",\"pid\":{},\"tid\":0,\"ts\":{"
                       "},\"dur\":{},"
                       "\"args\":{{\"stage\":{},\"microbatch\":{},\"chunk\":{},\"index\":{}}}}}",
                       name, kind_name(a.kind), r, Us(times[i].start * us).view(),
                       Us((times[i].end - times[i].start) * us).view(), a.stage, a.microbatch,
                       viz::chunk_of(plan, a), i);
      } else {
        const Shown& s = shown[ru][i];
        fmt::format_to(out,
                       "{{\"name\":\"{}\",\"cat\":\"{}\",\"ph\":\"X\",\"pid\":{},\"tid\":1,\"ts\":{"
                       "},\"dur\":{},"
                       "\"args\":{{\"stage\":{},\"microbatch\":{},\"peer\":{},\"index\":{}}}}}",
                       name, kind_name(a.kind), r, Us(s.ts).view(), Us(s.end - s.ts).view(),
                       a.stage, a.microbatch, a.peer, i);
      }
    }
    const char* unit = !sim.unit && opts.memory_in_bytes ? "bytes" : "activations";
    for (const MemoryPoint& p : sim.memory[ru]) {
      sep();
      fmt::format_to(out,
                     "{{\"name\":\"activation memory\",\"ph\":\"C\",\"pid\":{},\"tid\":0,\"ts\":{},"
                     "\"args\":{{\"{}\":{}}}}}",
                     r, Us(p.time * us).view(), unit, viz::number(p.value, 6));
    }
  }
  // Flows: SEND -> RECV.
  const auto transfers = viz::transfers(plan);
  for (size_t k = 0; k < transfers.size(); ++k) {
    const viz::Transfer& t = transfers[k];
    const Action& send =
        plan.lowered[static_cast<size_t>(t.send_rank)][static_cast<size_t>(t.send_index)];
    const char* what = send.kind == ActionKind::SendF ? "activation" : "gradient";
    const Shown& s = shown[static_cast<size_t>(t.send_rank)][static_cast<size_t>(t.send_index)];
    const Shown& d = shown[static_cast<size_t>(t.recv_rank)][static_cast<size_t>(t.recv_index)];
    sep();
    fmt::format_to(out,
                   "{{\"name\":\"{0}\",\"cat\":\"transfer\",\"ph\":\"s\",\"id\":{1},\"pid\":{2},"
                   "\"tid\":1,\"ts\":{3}}},\n"
                   "{{\"name\":\"{0}\",\"cat\":\"transfer\",\"ph\":\"f\",\"bp\":\"e\",\"id\":{1},"
                   "\"pid\":{4},\"tid\":1,"
                   "\"ts\":{5}}}",
                   what, k, t.send_rank, Us(s.ts + kNestStepUs / 2).view(), t.recv_rank,
                   Us(d.ts + kNestStepUs / 2).view());
  }
  fmt::format_to(
      out,
      "\n],\n\"displayTimeUnit\":\"ms\",\n\"otherData\":{{\"generator\":\"ppcompile\",\"schedule\":"
      "{},"
      "\"pp\":{},\"vpp\":{},\"microbatches\":{},\"makespan\":{},\"bubble\":{},\"costs\":\"{}\","
      "\"us_per_unit\":{}}}\n}}\n",
      json_string(plan.schedule), plan.pp(), plan.vpp(), plan.microbatches,
      viz::number(sim.makespan, 6), viz::number(sim.bubble, 6), sim.unit ? "unit" : "model",
      viz::number(us, 6));
  os.write(b.data(), static_cast<std::streamsize>(b.size()));
}

}  // namespace ppc
