#include "runtime/checkpoint/save_load.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/grad_mode.h>
#include <fmt/format.h>
#include <torch/optim/adamw.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <tuple>
#include <vector>

#include "compiler/diagnostic.h"
#include "runtime/fail.h"
#include "runtime/transport/transport.h"

namespace pprt {

namespace {

using Clock = std::chrono::steady_clock;

// AdamW's state key for a parameter: its TensorImpl (LibTorch keys the state by pointer since 2.2).
void* state_key(const at::Tensor& param) {
  return param.unsafeGetTensorImpl();
}

torch::optim::AdamWParamState* adam_state(torch::optim::AdamW& opt, const at::Tensor& param) {
  auto it = opt.state().find(state_key(param));
  return it == opt.state().end() ? nullptr
                                 : static_cast<torch::optim::AdamWParamState*>(it->second.get());
}

std::string rng_state_hex() {
  const at::Tensor s = at::detail::getDefaultCPUGenerator().get_state();
  const uint8_t* p = s.data_ptr<uint8_t>();
  std::string out;
  out.reserve(static_cast<size_t>(s.numel()) * 2);
  for (int64_t i = 0; i < s.numel(); ++i) out += fmt::format("{:02x}", p[i]);
  return out;
}

void set_rng_state_hex(const std::string& hex, const std::string& where) {
  if (hex.empty()) return;
  if (hex.size() % 2 != 0 || hex.find_first_not_of("0123456789abcdef") != std::string::npos)
    fail(where, "rng_state: not a hexadecimal generator state");
  at::Tensor s = at::empty({static_cast<int64_t>(hex.size() / 2)}, at::kByte);
  uint8_t* p = s.data_ptr<uint8_t>();
  for (size_t i = 0; i < hex.size() / 2; ++i)
    p[i] = static_cast<uint8_t>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
  try {
    at::Generator gen = at::detail::getDefaultCPUGenerator();
    gen.set_state(s);
  } catch (const std::exception&) {
    fail(where, "rng_state: not a generator state of this LibTorch");
  }
}

void barrier(const SaveContext& ctx, int64_t step) {
  if (!ctx.world || ctx.world->size() < 2) return;
  try {
    ctx.world->barrier(ctx.job->timeout);
  } catch (const TransportError& e) {
    throw TransportError(fmt::format("the checkpoint after step {}: {}", step, e.what()));
  }
}

bool kill_here(const SaveContext& ctx, int64_t step, Job::KillAt at) {
  const Job& j = *ctx.job;
  return j.kill_at == at && ctx.rank == j.kill_rank && step == j.kill_step + 1;
}

}  // namespace

SaveResult save_checkpoint(const SaveContext& ctx, int64_t step) {
  const auto t0 = Clock::now();
  const Job& job = *ctx.job;
  const std::string tmp =
      (std::filesystem::path(job.save_dir) / (".tmp-" + step_dir_name(step))).string();
  if (ctx.rank == 0) prepare_checkpoint(job.save_dir, step);
  barrier(ctx, step);
  SaveResult res;
  if (ctx.writes) {
    std::vector<at::Tensor> keep;  // CPU copies of device tensors, alive while writing
    auto view = [&](const std::string& name, const at::Tensor& t) {
      at::Tensor c = t.detach();
      if (!c.device().is_cpu() || !c.is_contiguous()) keep.push_back(c = c.cpu().contiguous());
      res.bytes += static_cast<uint64_t>(c.numel()) * sizeof(float);
      return TensorWrite{name, TensorDtype::F32, c.sizes().vec(), c.data_ptr(),
                         static_cast<size_t>(c.numel()) * sizeof(float)};
    };
    std::vector<TensorWrite> model, optimizer;
    for (NamedParam& p : ctx.store->params()) {
      if (ctx.not_owned && ctx.not_owned->count(p.name)) continue;
      model.push_back(view(p.name, p.tensor));
      auto* st = adam_state(*ctx.opt, p.tensor);
      PPC_INTERNAL_ASSERT(st != nullptr, "a parameter has AdamW state after its first step");
      optimizer.push_back(view(p.name + ".exp_avg", st->exp_avg()));
      optimizer.push_back(view(p.name + ".exp_avg_sq", st->exp_avg_sq()));
    }
    void (*between)() = nullptr;
    if (kill_here(ctx, step, Job::KillAt::Save)) between = [] { std::raise(SIGKILL); };
    write_checkpoint_shard(tmp, ctx.shard, ctx.shards, model, optimizer, between);
  }
  barrier(ctx, step);
  if (ctx.rank == 0) {
    CheckpointState st;
    st.step = step;
    st.model = job.model;
    st.layout = job.plan.layout.source;
    st.plan_json = ctx.plan_json;
    st.pp = ctx.shards;
    st.dp = job.dp;
    st.train = job.train;
    st.data = ctx.data->identity();
    st.rng_state = rng_state_hex();
    void (*before_rename)() = nullptr;
    if (kill_here(ctx, step, Job::KillAt::Commit)) before_rename = [] { std::raise(SIGKILL); };
    commit_checkpoint(job.save_dir, tmp, st, job.keep, before_rename);
  }
  res.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return res;
}

uint64_t load_checkpoint(const Checkpoint& ckpt, ParamStore& store, torch::optim::AdamW& opt) {
  at::NoGradGuard no_grad;
  struct Read {
    std::pair<size_t, uint64_t> at;  // file, offset
    std::string name;
    bool optimizer;
    at::Tensor dst;
  };
  std::vector<Read> reads;
  for (NamedParam& p : store.params()) {
    auto st = std::make_unique<torch::optim::AdamWParamState>();
    st->step(ckpt.state().step);
    at::Tensor m = at::empty_like(p.tensor), v = at::empty_like(p.tensor);
    st->exp_avg(m);
    st->exp_avg_sq(v);
    opt.state()[state_key(p.tensor)] = std::move(st);
    for (auto [name, optimizer, dst] :
         {std::tuple{p.name, false, p.tensor}, std::tuple{p.name + ".exp_avg", true, m},
          std::tuple{p.name + ".exp_avg_sq", true, v}})
      reads.push_back(Read{ckpt.position(name, optimizer), name, optimizer, dst});
  }
  std::sort(reads.begin(), reads.end(), [](const Read& a, const Read& b) { return a.at < b.at; });
  uint64_t bytes = 0;
  for (Read& r : reads) {
    at::Tensor cpu = r.dst.device().is_cpu() ? r.dst : at::empty(r.dst.sizes(), at::kFloat);
    ckpt.read(r.name, r.optimizer, r.dst.sizes().vec(), cpu.data_ptr(),
              static_cast<size_t>(cpu.numel()) * sizeof(float));
    if (r.dst.device().is_cpu())  // written behind LibTorch's back: mark it changed
      r.dst.unsafeGetTensorImpl()->bump_version();
    else
      r.dst.copy_(cpu);
    bytes += static_cast<uint64_t>(cpu.numel()) * sizeof(float);
  }
  set_rng_state_hex(ckpt.state().rng_state, ckpt.dir() + "/trainer_state.json");
  return bytes;
}

}  // namespace pprt
