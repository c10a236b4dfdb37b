// The step's statistics over the ranks, and validation (step_stats.h).
#include "runtime/train/step_stats.h"

#include <ATen/ATen.h>
#include <c10/core/Event.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include <cmath>
#include <vector>

#include "runtime/data/token_source.h"
#include "runtime/job.h"
#include "runtime/train/executor.h"
#include "runtime/train/fused_step.h"
#include "runtime/train/gradients.h"

namespace pprt {

namespace {

using Clock = std::chrono::steady_clock;

// `t` (on the CPU) on `device`; on a GPU copied from pinned memory without waiting for the copy.
at::Tensor to_device_async(const at::Tensor& t, const at::Device& device) {
  if (!device.is_cuda()) return t.to(device);
  return t.pin_memory().to(device, /*non_blocking=*/true);
}

}  // namespace

// The squared gradient norm (shared parameters counted once), each microbatch's loss (computed on
// one rank; averaged over the replicas) and reported values (each a sum and a count over the
// layers, ranks and replicas that added it), and every rank's compute time (each in its own slot),
// summed over every rank in one all-reduce. `own_ns`: the time spent before the all-reduce (the
// rank's own work, --profile's "optimizer"; on a GPU what the host saw).
// With `fused` the norm is fused_step.h's, and its update (clipping, AdamW) is queued after the
// all-reduce and before the statistics are read back: on a GPU the host then waits for the norm
// and the all-reduce only (the one synchronisation between replays), while AdamW runs; the
// queuing counts in `own_ns`.
StepStats gather_stats(ParamStore& store, const StepReport& rep, const Job& job,
                       const TrainerPlace& place, const at::Device& device,
                       std::chrono::milliseconds timeout, int64_t& own_ns,
                       std::optional<FusedUpdate> fused) {
  const auto t0 = Clock::now();
  const auto mbs = static_cast<size_t>(job.plan.microbatches);
  const int ranks = place.world ? place.world->size() : 0;
  std::vector<at::Tensor> counted;  // the gradients in the norm
  for (NamedParam& p : store.params())
    if ((p.expert ? place.counts_expert_norm : place.counts_norm) && p.tensor.grad().defined() &&
        !(place.counted_elsewhere && place.counted_elsewhere->count(p.name)))
      counted.push_back(p.tensor.grad());
  at::Tensor sq;
  if (fused) {
    sq = squared_norm(counted, device);
  } else {
    sq = at::zeros({1}, at::TensorOptions().dtype(at::kDouble).device(device));
    for (const at::Tensor& g : counted) sq += g.to(at::kDouble).pow(2).sum();
  }
  // [norm^2, losses, (sums, counts) per reported value, compute per rank]
  const size_t values = rep.reported.size(), at_compute = 1 + mbs + 2 * values * mbs;
  std::vector<double> v(at_compute + static_cast<size_t>(ranks), 0.0);
  if (rep.has_losses) std::copy(rep.losses.begin(), rep.losses.end(), v.begin() + 1);
  for (size_t k = 0; k < values; ++k) {
    std::copy(rep.reported[k].sum.begin(), rep.reported[k].sum.end(),
              v.begin() + static_cast<ptrdiff_t>(1 + mbs + 2 * k * mbs));
    std::copy(rep.reported[k].count.begin(), rep.reported[k].count.end(),
              v.begin() + static_cast<ptrdiff_t>(1 + mbs + (2 * k + 1) * mbs));
  }
  if (ranks > 0) v[at_compute + static_cast<size_t>(place.rank)] = rep.compute_ns / 1e9;
  at::Tensor all = fused ? to_device_async(at::tensor(v, at::kDouble), device)
                         : at::tensor(v, at::kDouble).to(device);
  all.narrow(0, 0, 1).add_(sq);
  own_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count();
  if (place.world && place.world->size() > 1) place.world->allreduce_sum(all, timeout);
  at::Tensor cpu;
  if (fused) {
    const auto q0 = Clock::now();
    std::optional<c10::Event> read;  // on a GPU: the copy back, done before the update
    if (device.is_cuda()) {
      cpu = at::empty_like(all, at::TensorOptions().device(at::kCPU).pinned_memory(true));
      cpu.copy_(all, /*non_blocking=*/true);
      read.emplace(device.type());
      read->record(c10::impl::VirtualGuardImpl(device.type()).getStream(device));
    } else {
      cpu = all.cpu();
    }
    fused->adamw->step(fused->lr, all.narrow(0, 0, 1), fused->clip);
    if (read) read->synchronize();
    own_ns += std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - q0).count();
  } else {
    cpu = all.cpu();
  }
  const double* d = cpu.data_ptr<double>();
  StepStats out;
  out.grad_norm = std::sqrt(d[0]);
  out.losses.assign(d + 1, d + 1 + mbs);
  for (double& x : out.losses) x /= place.replicas;
  for (size_t k = 0; k < values; ++k) {
    auto& per_mb = out.reported.emplace_back(mbs);
    for (size_t mb = 0; mb < mbs; ++mb) {
      const double sum = d[1 + mbs + 2 * k * mbs + mb], count = d[1 + mbs + (2 * k + 1) * mbs + mb];
      if (count > 0) per_mb[mb] = sum / count;
    }
  }
  out.compute_s.assign(d + at_compute, d + at_compute + ranks);
  return out;
}

// Validation (--eval-data): job.eval.batches global batches of held-out sequences (batch k holds
// sequences [k G, (k + 1) G), this replica its share of them), each run forward only; the mean
// of their microbatches' losses over every rank, and of each reported value over what added it
// (one all-reduce).
EvalStats evaluate(const Job& job, const TrainerPlace& place, StepGradients& grads,
                   const TokenSource& data, const at::Device& device) {
  const int mbs = job.plan.microbatches, len = job.setup.seq_len + 1;
  const int share = job.train.global_batch / place.replicas;
  data.check_unchanged();
  // [loss sum, (sum, count) per reported value]
  std::vector<double> sums(1, 0.0);
  std::vector<int64_t> rows;
  for (int k = 0; k < job.eval.batches; ++k) {
    data.sequences(static_cast<int64_t>(k) * job.train.global_batch +
                       static_cast<int64_t>(place.replica) * share,
                   share, len, rows);
    const at::Tensor tokens =
        at::from_blob(rows.data(), {share, len}, at::kLong).clone().to(device);
    const StepReport rep = grads.evaluate(tokens);
    sums.resize(1 + 2 * rep.reported.size(), 0.0);
    if (rep.has_losses)
      for (double x : rep.losses) sums[0] += x;
    for (size_t v = 0; v < rep.reported.size(); ++v) {
      for (double x : rep.reported[v].sum) sums[1 + 2 * v] += x;
      for (double x : rep.reported[v].count) sums[2 + 2 * v] += x;
    }
  }
  at::Tensor all = at::tensor(sums, at::kDouble).to(device);
  if (place.world && place.world->size() > 1) place.world->allreduce_sum(all, job.timeout);
  const at::Tensor cpu = all.cpu();
  const double* d = cpu.data_ptr<double>();
  const double n = static_cast<double>(place.replicas) * job.eval.batches * mbs;
  EvalStats out;
  out.loss = d[0] / n;
  for (size_t v = 0; 1 + 2 * v < sums.size(); ++v)
    out.reported.push_back(d[2 + 2 * v] > 0 ? std::optional<double>(d[1 + 2 * v] / d[2 + 2 * v])
                                            : std::nullopt);
  return out;
}

}  // namespace pprt
