#include "compiler/trace_writer.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <iterator>
#include <limits>
#include <nlohmann/json.hpp>
#include <numeric>
#include <string>

#include "compiler/diagnostic.h"
#include "compiler/viz_common.h"

namespace ppc {

namespace {

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

}  // namespace

void nest_comm_slices(const std::vector<Action>& acts, std::span<const double> start,
                      std::span<const double> end, CommNesting nesting, double step_end,
                      std::vector<TraceSlice>& slices) {
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
    std::stable_sort(ops.begin(), ops.end(), [&](size_t a, size_t b) { return end[a] > end[b]; });
    const double n = static_cast<double>(ops.size());
    double post = start[i];
    double limit = std::numeric_limits<double>::infinity();
    if (nesting == CommNesting::AfterPreviousBatch) {
      post = std::max(post, floor);
    } else {
      double next_post = step_end + 1.0;
      for (size_t k = j; k < acts.size(); ++k)
        if (is_comm(acts[k].kind)) {
          next_post = start[k];
          break;
        }
      limit = next_post - (n + 1) * kNestStepUs;
    }
    double batch_end = post;
    for (size_t k = 0; k < ops.size(); ++k) {
      const double kk = static_cast<double>(k);
      TraceSlice& s = slices[ops[k]];
      s.ts = post + kk * kNestStepUs;
      const double shown_end =
          std::max(std::min(end[ops[k]], limit), post + n * kNestStepUs) + (n - kk) * kNestStepUs;
      s.dur = shown_end - s.ts;
      batch_end = std::max(batch_end, shown_end);
    }
    floor = batch_end;
    i = j;
  }
}

void write_trace(const Plan& plan, const std::vector<TraceRank>& ranks, const TraceInfo& info,
                 std::ostream& os) {
  PPC_INTERNAL_ASSERT(plan.is_lowered() && ranks.size() == plan.lowered.size(),
                      "the trace needs a lowered plan and a part per rank");
  fmt::memory_buffer b;
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
  // The args every slice ends with: its index, and for a measured step the step and what was
  // measured beyond the slice.
  auto end_args = [&](size_t index, const TraceSlice& s) {
    fmt::format_to(out, "\"index\":{}", index);
    if (info.step > 0) fmt::format_to(out, ",\"step\":{}", info.step);
    if (s.wait_us > 0) fmt::format_to(out, ",\"wait_us\":{}", Us(s.wait_us).view());
    if (s.done_us >= 0) fmt::format_to(out, ",\"done_us\":{}", Us(s.done_us).view());
    fmt::format_to(out, "}}}}");
  };
  std::string name;
  for (int r = 0; r < plan.pp(); ++r) {
    const auto& acts = plan.lowered[static_cast<size_t>(r)];
    const TraceRank& part = ranks[static_cast<size_t>(r)];
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
    for (size_t t = 0; t < part.threads.size(); ++t) {
      sep();
      fmt::format_to(out,
                     "{{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":{},\"tid\":{},\"args\":{{"
                     "\"name\":{}}}}}",
                     r, t + 2, nlohmann::json(part.threads[t].name).dump());
    }
    for (size_t t = 0; t < part.threads.size(); ++t)
      for (const TraceExtraSlice& e : part.threads[t].slices) {
        std::string args = e.args;
        if (info.step > 0) args += fmt::format("{}\"step\":{}", args.empty() ? "" : ",", info.step);
        sep();
        fmt::format_to(out,
                       "{{\"name\":{},\"cat\":{},\"ph\":\"X\",\"pid\":{},\"tid\":{},\"ts\":{},"
                       "\"dur\":{},\"args\":{{{}}}}}",
                       nlohmann::json(e.name).dump(), nlohmann::json(e.cat).dump(), r, t + 2,
                       Us(e.ts).view(), Us(e.dur).view(), args);
      }
    if (part.slices.empty()) continue;
    PPC_INTERNAL_ASSERT(part.slices.size() == acts.size(), "a slice per action of the rank");
    for (size_t i = 0; i < acts.size(); ++i) {
      const Action& a = acts[i];
      const TraceSlice& s = part.slices[i];
      name.clear();
      append_to(name, a);
      sep();
      fmt::format_to(
          out,
          "{{\"name\":\"{}\",\"cat\":\"{}\",\"ph\":\"X\",\"pid\":{},\"tid\":{},\"ts\":{},"
          "\"dur\":{},\"args\":{{\"stage\":{},\"microbatch\":{},",
          name, kind_name(a.kind), r, is_comm(a.kind) ? 1 : 0, Us(s.ts).view(), Us(s.dur).view(),
          a.stage, a.microbatch);
      if (is_compound(a.kind))
        fmt::format_to(out, "\"backward\":\"{}\",\"stage2\":{},\"microbatch2\":{},",
                       kind_name(a.sub_kind), a.stage2, a.microbatch2);
      if (is_comm(a.kind))
        fmt::format_to(out, "\"peer\":{},", a.peer);
      else
        fmt::format_to(out, "\"chunk\":{},", viz::chunk_of(plan, a));
      end_args(i, s);
    }
    for (const TraceCounter& p : part.memory) {
      sep();
      fmt::format_to(out,
                     "{{\"name\":\"activation memory\",\"ph\":\"C\",\"pid\":{},\"tid\":0,\"ts\":{},"
                     "\"args\":{{\"{}\":{}}}}}",
                     r, Us(p.ts).view(), info.memory_unit, viz::number(p.value, 6));
    }
  }
  // Flows: SEND -> RECV.
  const auto transfers = viz::transfers(plan);
  for (size_t k = 0; k < transfers.size(); ++k) {
    const viz::Transfer& t = transfers[k];
    const auto& from = ranks[static_cast<size_t>(t.send_rank)].slices;
    const auto& to = ranks[static_cast<size_t>(t.recv_rank)].slices;
    if (from.empty() || to.empty()) continue;
    const Action& send =
        plan.lowered[static_cast<size_t>(t.send_rank)][static_cast<size_t>(t.send_index)];
    const char* what = flow_info(flow_of(send.kind)).what;  // "activation", "gradient"
    sep();
    fmt::format_to(out,
                   "{{\"name\":\"{0}\",\"cat\":\"transfer\",\"ph\":\"s\",\"id\":{1},\"pid\":{2},"
                   "\"tid\":1,\"ts\":{3}}},\n"
                   "{{\"name\":\"{0}\",\"cat\":\"transfer\",\"ph\":\"f\",\"bp\":\"e\",\"id\":{1},"
                   "\"pid\":{4},\"tid\":1,"
                   "\"ts\":{5}}}",
                   what, k, t.send_rank,
                   Us(from[static_cast<size_t>(t.send_index)].ts + kNestStepUs / 2).view(),
                   t.recv_rank,
                   Us(to[static_cast<size_t>(t.recv_index)].ts + kNestStepUs / 2).view());
  }
  fmt::format_to(
      out,
      "\n],\n\"displayTimeUnit\":\"ms\",\n\"otherData\":{{\"generator\":\"{}\",\"schedule\":{},"
      "\"pp\":{},\"vpp\":{},\"microbatches\":{},\"makespan\":{},\"bubble\":{},\"costs\":\"{}\","
      "\"us_per_unit\":{}",
      info.generator, nlohmann::json(plan.schedule).dump(), plan.pp(), plan.vpp(),
      plan.microbatches, viz::number(info.makespan, 6), viz::number(info.bubble, 6), info.costs,
      viz::number(info.us_per_unit, 6));
  if (info.step > 0) fmt::format_to(out, ",\"step\":{}", info.step);
  fmt::format_to(out, "}}\n}}\n");
  os.write(b.data(), static_cast<std::streamsize>(b.size()));
}

}  // namespace ppc
