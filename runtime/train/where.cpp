#include "runtime/train/where.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <tuple>

#include "compiler/dependencies.h"

namespace pprt {

namespace {

double seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

}  // namespace

Where::Where(const ppc::Plan& plan, int rank, std::vector<int> names, bool device)
    : device_(device) {
  auto name = [&](int r) {
    return static_cast<size_t>(r) < names.size() ? names[static_cast<size_t>(r)] : r;
  };
  const auto& order = plan.order();
  const auto& mine = order[static_cast<size_t>(rank)];
  texts_.reserve(mine.size());
  comm_.reserve(mine.size());
  for (const ppc::Action& a : mine) {
    texts_.push_back(ppc::to_string(a));
    comm_.push_back(ppc::is_comm(a.kind));
  }
  // Each peer's comm actions towards this rank, by (kind, stage, microbatch).
  using Key = std::tuple<ppc::ActionKind, int, int>;
  std::map<int, std::map<Key, size_t>> theirs;
  for (const ppc::Action& a : mine)
    if (ppc::is_comm(a.kind)) theirs.emplace(a.peer, std::map<Key, size_t>{});
  for (auto& [peer, index] : theirs) {
    if (peer < 0 || static_cast<size_t>(peer) >= order.size()) continue;
    const auto& other = order[static_cast<size_t>(peer)];
    for (size_t j = 0; j < other.size(); ++j)
      if (ppc::is_comm(other[j].kind) && other[j].peer == rank)
        index.emplace(Key{other[j].kind, other[j].stage, other[j].microbatch}, j);
  }
  partner_.resize(mine.size());
  for (size_t i = 0; i < mine.size(); ++i) {
    const ppc::Action& a = mine[i];
    if (!ppc::is_comm(a.kind)) continue;
    const ppc::CommMatch m = ppc::comm_match(plan, a);
    Partner& p = partner_[i];
    p.rank = name(a.peer);
    const auto& index = theirs[a.peer];
    const auto it = index.find(Key{m.kind, m.stage, a.microbatch});
    if (it == index.end()) continue;
    p.action = static_cast<int64_t>(it->second);
    p.text = ppc::to_string(order[static_cast<size_t>(a.peer)][it->second]);
  }
}

void Where::start_step(int64_t step, std::chrono::milliseconds timeout) {
  std::lock_guard<std::mutex> lock(m_);
  step_ = step;
  timeout_ = timeout;
  call_ = Call::None;
  outside_.clear();
  watched_ = false;
  device_waits_.clear();
  since_ = Clock::now();
}

void Where::at(size_t action, Call call) {
  std::lock_guard<std::mutex> lock(m_);
  action_ = action;
  call_ = call;
  outside_.clear();
  watched_ = false;
  since_ = Clock::now();
}

void Where::outside(const std::string& what, bool watched) {
  std::lock_guard<std::mutex> lock(m_);
  call_ = Call::None;
  outside_ = what;
  watched_ = watched;
  since_ = Clock::now();
}

void Where::device_waits(size_t action) {
  std::lock_guard<std::mutex> lock(m_);
  device_waits_.push_back(action);
}

void Where::device_done(size_t action) {
  std::lock_guard<std::mutex> lock(m_);
  const auto it = std::find(device_waits_.begin(), device_waits_.end(), action);
  if (it != device_waits_.end()) device_waits_.erase(it);
}

size_t Where::batch_end(size_t begin) const {
  size_t end = begin;
  while (end < comm_.size() && comm_[end]) ++end;
  return end;
}

std::string Where::partner_text(size_t action) const {
  const Partner& p = partner_[action];
  if (p.action < 0) return fmt::format("rank {}", p.rank);
  return fmt::format("rank {}'s action {} ({})", p.rank, p.action, p.text);
}

std::string Where::partners(size_t begin, size_t end) const {
  std::string out;
  for (size_t i = begin; i < end && i < comm_.size(); ++i)
    if (comm_[i]) out += (out.empty() ? "" : ", ") + partner_text(i);
  return out;
}

std::string Where::describe_locked(Clock::time_point now) const {
  const double for_s = seconds(now - since_);
  if (call_ == Call::None || texts_.empty()) {
    const std::string when = step_ < 0 ? std::string("before the first step")
                                       : fmt::format("step {}, outside the replay", step_ + 1);
    if (outside_.empty()) return when;
    return fmt::format("{}: in a host call ({}), for {:.1f} s", when, outside_, for_s);
  }
  const size_t a = std::min(action_, texts_.size() - 1);
  std::string what = texts_[a];
  const size_t end = call_ == Call::Post ? batch_end(a) : a + 1;
  for (size_t i = a + 1; i < end; ++i) what += ", " + texts_[i];
  std::string call;
  switch (call_) {
    case Call::Compute:
      call = device_ ? "in a host call, queuing its kernels" : "computing it";
      break;
    case Call::Post:
      call = "in a host call, posting the batch";
      break;
    case Call::WaitHost:
      call = "waiting on the host for its transfer";
      break;
    case Call::WaitDevice:
      call = "at the end of the step, waiting on the host for the device to finish its transfer";
      break;
    case Call::Drain:
      call =
          "at the end of the step, waiting on the host for the device to finish the step's "
          "kernels";
      break;
    case Call::Hang:
      call = "in a host call that does not return (fault injection: --fault-kill R:S:hang)";
      break;
    case Call::None:
      break;
  }
  std::string out =
      fmt::format("step {}, action {} ({}): {}, for {:.1f} s", step_ + 1, a, what, call, for_s);
  if (call_ == Call::Post || call_ == Call::WaitHost || call_ == Call::WaitDevice)
    out += fmt::format("; it waits for {}", partners(a, end));
  if (!device_waits_.empty()) {
    const size_t r = device_waits_.front();
    out += fmt::format("; its device waits for action {} ({}){}: {}", r, texts_[r],
                       device_waits_.size() > 1
                           ? fmt::format(" and {} later receive{}", device_waits_.size() - 1,
                                         device_waits_.size() > 2 ? "s" : "")
                           : "",
                       partner_text(r));
  }
  return out;
}

std::string Where::describe() const {
  std::lock_guard<std::mutex> lock(m_);
  return describe_locked(Clock::now());
}

std::string Where::overdue(std::chrono::milliseconds grace) const {
  std::lock_guard<std::mutex> lock(m_);
  const auto now = Clock::now();
  if ((call_ == Call::None && !watched_) || now - since_ <= timeout_ + grace) return "";
  return describe_locked(now);
}

}  // namespace pprt
