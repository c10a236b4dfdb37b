#include "runtime/train/grad_reducer.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>

#include "compiler/diagnostic.h"

namespace pprt {

namespace {

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

at::Tensor flat_grads(const std::vector<at::Tensor*>& params) {
  std::vector<at::Tensor> parts;
  parts.reserve(params.size());
  for (at::Tensor* p : params)
    parts.push_back(p->grad().defined() ? p->grad().reshape({-1})
                                        : at::zeros({p->numel()}, p->options()));
  return at::cat(parts);
}

void set_grads(const std::vector<at::Tensor*>& params, const at::Tensor& flat) {
  at::NoGradGuard no_grad;
  int64_t at = 0;
  for (at::Tensor* p : params) {
    at::Tensor part = flat.narrow(0, at, p->numel()).view_as(*p);
    at += p->numel();
    if (p->grad().defined())
      p->mutable_grad().copy_(part);
    else
      p->mutable_grad() = part.clone();
  }
}

GradReducer::GradReducer(const ppc::Plan& plan, int pipeline_rank,
                         const std::vector<Stage*>& stages, ParamStore& store, Transport& group,
                         std::chrono::milliseconds timeout, size_t bucket_bytes)
    : group_(group), timeout_(timeout), scale_(1.0 / group.size()) {
  // When each local stage's weight gradients are final: its last B or W in the rank's order.
  const auto& order = plan.order()[static_cast<size_t>(pipeline_rank)];
  std::map<int, size_t> last;  // plan stage -> action index
  for (size_t i = 0; i < order.size(); ++i)
    if (ppc::is_compute(order[i].kind))
      ppc::for_each_part(order[i], [&](const ppc::Action& a) {
        if (a.kind == ppc::ActionKind::B || a.kind == ppc::ActionKind::W) last[a.stage] = i;
      });
  // Each parameter is final after the last of those of the stages that use it.
  const std::vector<int>& mine = plan.placement.rank_stages[static_cast<size_t>(pipeline_rank)];
  PPC_INTERNAL_ASSERT(mine.size() == stages.size(), "a Stage per stage of the rank");
  std::map<std::string, size_t> ready;
  for (size_t k = 0; k < mine.size(); ++k) {
    const int s = mine[k];
    for (const std::string& name : stages[k]->param_names()) {
      PPC_INTERNAL_ASSERT(last.count(s), "a stage with parameters has a backward");
      ready[name] = std::max(ready[name], last[s]);
    }
  }
  // Buckets in the order of readiness (the store's order within one moment: the same on every
  // replica, which runs the same plan rank).
  std::vector<std::pair<size_t, NamedParam*>> order_of;
  for (NamedParam& p : store.params()) {
    if (p.expert) continue;  // reduced over the replicas of its shard (expert_grads.h)
    auto it = ready.find(p.name);
    PPC_INTERNAL_ASSERT(it != ready.end(), "every parameter of the rank belongs to a stage");
    order_of.push_back({it->second, &p});
  }
  std::stable_sort(order_of.begin(), order_of.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  const int64_t cap = static_cast<int64_t>(std::max<size_t>(bucket_bytes / sizeof(float), 1));
  for (const auto& [at, p] : order_of) {
    const int64_t n = p->tensor.numel();
    if (buckets_.empty() || buckets_.back().ready_at != at || buckets_.back().elements + n > cap)
      buckets_.push_back(Bucket{{}, at, 0, {}, nullptr, 0, 0});
    buckets_.back().params.push_back(&p->tensor);
    buckets_.back().elements += n;
  }
}

GradReducer::~GradReducer() = default;

void GradReducer::start(Bucket& b) {
  b.flat = flat_grads(b.params);
  b.started = now_ns();
  b.finished = 0;
  b.work = group_.allreduce_async(b.flat, timeout_);
}

void GradReducer::poll() {
  for (size_t i = 0; i < next_; ++i) {
    Bucket& b = buckets_[i];
    if (b.work && !b.finished && b.work->done()) b.finished = now_ns();
  }
}

void GradReducer::action_done(size_t index) {
  poll();
  while (next_ < buckets_.size() && buckets_[next_].ready_at <= index) start(buckets_[next_++]);
}

ReduceStats GradReducer::finish() {
  while (next_ < buckets_.size()) start(buckets_[next_++]);
  poll();
  ReduceStats st;
  int64_t first = 0, last = 0;
  for (Bucket& b : buckets_) {
    const int64_t w0 = now_ns();
    b.work->wait(timeout_);
    st.exposed_ns += now_ns() - w0;
    if (!b.finished) b.finished = now_ns();
    first = first ? std::min(first, b.started) : b.started;
    last = std::max(last, b.finished);
    b.flat.mul_(scale_);
    set_grads(b.params, b.flat);
    b.work.reset();
    st.bytes += static_cast<uint64_t>(b.elements) * sizeof(float);
  }
  st.span_ns = last - first;
  st.buckets = static_cast<int>(buckets_.size());
  next_ = 0;
  return st;
}

std::vector<SharedNames> shared_names(const std::vector<std::vector<std::string>>& held_by_rank) {
  std::map<std::string, std::vector<int>> holders;  // ranks in increasing order
  for (size_t r = 0; r < held_by_rank.size(); ++r)
    for (const std::string& name : held_by_rank[r]) {
      std::vector<int>& ranks = holders[name];
      if (ranks.empty() || ranks.back() != static_cast<int>(r))
        ranks.push_back(static_cast<int>(r));
    }
  std::map<std::vector<int>, std::vector<std::string>> groups;  // names arrive sorted
  for (auto& [name, ranks] : holders)
    if (ranks.size() > 1) groups[ranks].push_back(name);
  std::vector<SharedNames> out;
  for (auto& [ranks, names] : groups) out.push_back(SharedNames{ranks, std::move(names)});
  return out;
}

std::vector<std::vector<std::string>> gather_param_names(Store& store, int pipeline_rank,
                                                         int replica, int pp,
                                                         const std::vector<std::string>& mine,
                                                         int shard) {
  auto key = [shard](int r) {
    return shard == 0 ? fmt::format("params/{}", r) : fmt::format("params/{}/{}", shard, r);
  };
  if (replica == shard) store.set(key(pipeline_rank), fmt::format("{}", fmt::join(mine, "\n")));
  std::vector<std::vector<std::string>> out(static_cast<size_t>(pp));
  for (int r = 0; r < pp; ++r) {
    if (r == pipeline_rank) {
      out[static_cast<size_t>(r)] = mine;
      continue;
    }
    const std::string text = store.get(key(r));
    std::vector<std::string>& names = out[static_cast<size_t>(r)];
    for (size_t at = 0; at < text.size();) {
      const size_t end = std::min(text.find('\n', at), text.size());
      names.push_back(text.substr(at, end - at));
      at = end + 1;
    }
  }
  return out;
}

SharedGradSum::SharedGradSum(const std::vector<std::vector<std::string>>& held_by_rank,
                             int pipeline_rank, ParamStore& store, Transport& pipeline) {
  for (const SharedNames& g : shared_names(held_by_rank)) {
    if (!std::binary_search(g.ranks.begin(), g.ranks.end(), pipeline_rank)) continue;
    Group group;
    group.transport =
        pipeline.new_group(g.ranks, fmt::format("shared:{}", fmt::join(g.ranks, ",")));
    for (const std::string& name : g.names) {
      NamedParam* p = store.find(name);
      PPC_INTERNAL_ASSERT(p != nullptr, "a shared parameter is held by every rank of its group");
      group.params.push_back(&p->tensor);
      if (g.ranks.front() != pipeline_rank) counted_elsewhere_.insert(name);
    }
    groups_.push_back(std::move(group));
  }
}

void SharedGradSum::sum(std::chrono::milliseconds timeout) {
  for (Group& g : groups_) {
    at::Tensor flat = flat_grads(g.params);
    g.transport->allreduce_sum(flat, timeout);
    set_grads(g.params, flat);
  }
}

}  // namespace pprt
