#include "runtime/checkpoint/save_load.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/grad_mode.h>
#include <c10/core/Event.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <fmt/format.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <torch/optim/adamw.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <exception>
#include <filesystem>
#include <mutex>
#include <optional>
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

// The tensors a rank writes, in the order of its shards: its parameters (but those another rank
// writes), then each one's two AdamW moments.
template <class Fn>
void for_each_saved(const SaveContext& ctx, Fn&& fn) {
  for (NamedParam& p : ctx.store->params()) {
    if (ctx.not_owned && ctx.not_owned->count(p.name)) continue;
    if (ctx.experts_only && !p.expert) continue;  // --ep: replica 0 writes it
    auto* st = adam_state(*ctx.opt, p.tensor);
    PPC_INTERNAL_ASSERT(st != nullptr, "a parameter has AdamW state after its first step");
    fn(p.name, p.tensor, false);
    fn(p.name + ".exp_avg", st->exp_avg(), true);
    fn(p.name + ".exp_avg_sq", st->exp_avg_sq(), true);
  }
}

// What rank 0 records in trainer_state.json for the save after `step` steps.
CheckpointState state_of(const SaveContext& ctx, int64_t step) {
  const Job& job = *ctx.job;
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
  return st;
}

std::string temp_dir(const Job& job, int64_t step) {
  return (std::filesystem::path(job.save_dir) / (".tmp-" + step_dir_name(step))).string();
}

}  // namespace

SaveResult save_checkpoint(const SaveContext& ctx, int64_t step) {
  const auto t0 = Clock::now();
  const Job& job = *ctx.job;
  const std::string tmp = temp_dir(job, step);
  if (ctx.rank == 0) prepare_checkpoint(job.save_dir, step);
  barrier(ctx, step);
  SaveResult res;
  if (ctx.writes) {
    std::vector<at::Tensor> keep;  // CPU copies of device tensors, alive while writing
    std::vector<TensorWrite> model, optimizer;
    for_each_saved(ctx, [&](const std::string& name, const at::Tensor& t, bool moment) {
      at::Tensor c = t.detach();
      if (!c.device().is_cpu() || !c.is_contiguous()) keep.push_back(c = c.cpu().contiguous());
      res.bytes += static_cast<uint64_t>(c.numel()) * sizeof(float);
      (moment ? optimizer : model)
          .push_back(TensorWrite{name, TensorDtype::F32, c.sizes().vec(), c.data_ptr(),
                                 static_cast<size_t>(c.numel()) * sizeof(float)});
    });
    void (*between)() = nullptr;
    if (kill_here(ctx, step, Job::KillAt::Save)) between = [] { std::raise(SIGKILL); };
    write_checkpoint_shard(tmp, ctx.shard, ctx.shards, model, optimizer, between);
  }
  barrier(ctx, step);
  if (ctx.rank == 0) {
    void (*before_rename)() = nullptr;
    if (kill_here(ctx, step, Job::KillAt::Commit)) before_rename = [] { std::raise(SIGKILL); };
    commit_checkpoint(job.save_dir, tmp, state_of(ctx, step), job.keep, before_rename);
  }
  res.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return res;
}

// --- asynchronous saves -----------------------------------------------------------------------

struct CheckpointSaver::Background {
  // What the save in flight writes: host copies of the rank's tensors (kept from one save to the
  // next: the same tensors every time), and rank 0's trainer state.
  std::vector<at::Tensor> buffers;
  std::vector<TensorWrite> model, optimizer;
  CheckpointState state;
  // Where and how.
  const Job* job = nullptr;
  int rank = 0;
  bool writes = true;
  int shard = 0, shards = 1;
  c10::Device device{c10::kCPU};
  // On a GPU: the buffers are pinned, the copies into them are queued on `copy_stream` and
  // `copied` recorded after them; the writing thread waits for it (training does not).
  std::optional<c10::Stream> copy_stream;
  std::optional<c10::Event> copied;
  bool kill_save = false, kill_commit = false;  // fault injection (tests), for this save
  std::shared_ptr<Transport> group;
  // What it came to.
  std::atomic<bool> writing{false};
  std::mutex m;
  std::exception_ptr failure;
  std::vector<double> write_seconds;
};

CheckpointSaver::CheckpointSaver(const SaveContext& ctx, bool async,
                                 std::shared_ptr<Transport> group)
    : ctx_(ctx), async_(async), bg_(std::make_shared<Background>()) {
  bg_->job = ctx.job;
  bg_->rank = ctx.rank;
  bg_->writes = ctx.writes;
  bg_->shard = ctx.shard;
  bg_->shards = ctx.shards;
  bg_->device = ctx.device;
  bg_->group = std::move(group);
  if (!async_ || !ctx.writes) return;
  // The host buffers, allocated and touched now rather than in the first save's pause (a
  // fresh page costs a fault): each parameter and its two moments, in the order of the shards.
  // From a GPU, pinned (page-locked), so that the copies into them are DMA transfers that need
  // not stop the host.
  at::NoGradGuard no_grad;
  const bool gpu = ctx.device.is_cuda();
  if (gpu)
    bg_->copy_stream = c10::impl::VirtualGuardImpl(ctx.device.type())
                           .getStreamFromGlobalPool(ctx.device, /*isHighPriority=*/false);
  for (NamedParam& p : ctx.store->params()) {
    if (ctx.not_owned && ctx.not_owned->count(p.name)) continue;
    if (ctx.experts_only && !p.expert) continue;  // --ep: replica 0 writes it
    for (int k = 0; k < 3; ++k)
      bg_->buffers.push_back(
          at::zeros(p.tensor.sizes(), at::TensorOptions().dtype(at::kFloat).pinned_memory(gpu)));
  }
}

CheckpointSaver::~CheckpointSaver() {
  if (!thread_.joinable()) return;
  if (std::uncaught_exceptions() > 0 && bg_->writing)
    thread_.detach();  // the rank is failing: it may wait for a lost rank for the whole timeout
  else
    thread_.join();
}

void CheckpointSaver::join() {
  if (thread_.joinable()) thread_.join();
}

bool CheckpointSaver::writing() const {
  return bg_->writing;
}

std::vector<double> CheckpointSaver::write_seconds() const {
  std::lock_guard<std::mutex> lock(bg_->m);
  return bg_->write_seconds;
}

void CheckpointSaver::check() {
  if (bg_->writing) return;
  std::exception_ptr failure;
  {
    std::lock_guard<std::mutex> lock(bg_->m);
    std::swap(failure, bg_->failure);
  }
  if (failure) std::rethrow_exception(failure);
}

void CheckpointSaver::finish() {
  join();
  check();
}

SaveResult CheckpointSaver::save(int64_t step) {
  if (!async_) return save_checkpoint(ctx_, step);
  const auto t0 = Clock::now();
  finish();  // a save waits for the previous one
  SaveResult res;
  res.waited = std::chrono::duration<double>(Clock::now() - t0).count();
  Background& bg = *bg_;
  at::NoGradGuard no_grad;
  size_t i = 0;
  bg.model.clear();
  bg.optimizer.clear();
  // From a GPU: the copies go on a stream of their own, after what training queued (the
  // optimizer's update), and training's stream waits for them on the device (the next update must
  // not change a tensor being copied): the host only queues them.
  const bool gpu = bg.copy_stream.has_value();
  std::optional<c10::Stream> training;
  std::optional<c10::StreamGuard> on_copy_stream;
  if (gpu && ctx_.writes) {
    training = c10::impl::VirtualGuardImpl(bg.device.type()).getStream(bg.copy_stream->device());
    c10::Event ready(bg.device.type());
    ready.record(*training);
    ready.block(*bg.copy_stream);
    on_copy_stream.emplace(*bg.copy_stream);
  }
  if (ctx_.writes)
    for_each_saved(ctx_, [&](const std::string& name, const at::Tensor& t, bool moment) {
      if (i == bg.buffers.size())  // (made by the constructor)
        bg.buffers.push_back(
            at::empty(t.sizes(), at::TensorOptions().dtype(at::kFloat).pinned_memory(gpu)));
      at::Tensor& b = bg.buffers[i++];
      b.copy_(t.detach(), /*non_blocking=*/gpu);
      res.bytes += static_cast<uint64_t>(b.numel()) * sizeof(float);
      (moment ? bg.optimizer : bg.model)
          .push_back(TensorWrite{name, TensorDtype::F32, b.sizes().vec(), b.data_ptr(),
                                 static_cast<size_t>(b.numel()) * sizeof(float)});
    });
  if (training) {
    bg.copied.emplace(bg.device.type());
    bg.copied->record(*bg.copy_stream);
    bg.copied->block(*training);
    on_copy_stream.reset();
  }
  if (ctx_.rank == 0) bg.state = state_of(ctx_, step);
  bg.kill_save = kill_here(ctx_, step, Job::KillAt::Save);
  bg.kill_commit = kill_here(ctx_, step, Job::KillAt::Commit);
  bg.writing = true;
  thread_ = std::thread(write, bg_, step);
  res.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return res;
}

void CheckpointSaver::write(const std::shared_ptr<Background>& bgp, int64_t step) {
  Background& bg = *bgp;
  const Job& job = *bg.job;
  const auto t0 = Clock::now();
  // Training comes first: the writing thread yields the CPU to it (its write calls copy into the
  // page cache; its fsyncs wait for the disk).
  setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), 10);
  std::exception_ptr failure;
  // Runs one stage of the save; false (and its failure kept) if it threw.
  auto attempt = [&](auto&& stage) {
    try {
      stage();
      return true;
    } catch (const std::exception&) {
      failure = std::current_exception();
      return false;
    }
  };
  // Whether every rank's stage succeeded (a rank that failed reports it itself).
  auto every_rank = [&](bool ok) {
    if (!bg.group || bg.group->size() < 2) return ok;
    at::Tensor failed = at::full({1}, ok ? 0.0 : 1.0, at::kDouble).to(bg.device);
    try {
      bg.group->allreduce_sum(failed, job.timeout);
    } catch (const TransportError& e) {
      throw TransportError(fmt::format("the checkpoint after step {}: {}", step, e.what()));
    }
    return failed.cpu().item<double>() == 0;
  };
  const std::string tmp = temp_dir(job, step);
  try {
    bool ok = attempt([&] {
      if (bg.rank == 0) prepare_checkpoint(job.save_dir, step);
    });
    if (every_rank(ok)) {
      ok = attempt([&] {
        if (!bg.writes) return;
        if (bg.copied) bg.copied->synchronize();  // the copies from the GPU are done
        void (*between)() = nullptr;
        if (bg.kill_save) between = [] { std::raise(SIGKILL); };
        write_checkpoint_shard(tmp, bg.shard, bg.shards, bg.model, bg.optimizer, between);
      });
      if (every_rank(ok) && bg.rank == 0)
        attempt([&] {
          void (*before_rename)() = nullptr;
          if (bg.kill_commit) before_rename = [] { std::raise(SIGKILL); };
          commit_checkpoint(job.save_dir, tmp, bg.state, job.keep, before_rename);
        });
    }
  } catch (const TransportError&) {
    failure = std::current_exception();
  }
  {
    std::lock_guard<std::mutex> lock(bg.m);
    bg.failure = failure;
    bg.write_seconds.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  bg.writing = false;
}

void check_same_start(Store& store, int rank, const Job& job) {
  const std::string mine = job.resume_path.empty()
                               ? std::string("no checkpoint (a fresh start)")
                               : fmt::format("{} (step {})", job.resume_path, job.start_step);
  if (rank == 0) {
    store.set("start", mine);
    return;
  }
  const std::string first = store.get("start");
  if (first != mine)
    fail(job.resume_auto ? "--resume auto" : "--resume",
         fmt::format("rank 0 starts from {}, this rank from {}: the checkpoint directory changed "
                     "while the ranks started (does another job save to it?)",
                     first, mine));
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
