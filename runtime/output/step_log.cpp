#include "runtime/output/step_log.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <sstream>

#include "runtime/data/token_source.h"
#include "runtime/fail.h"
#include "runtime/launch/process_setup.h"
#include "runtime/model/model_facts.h"

namespace pprt {

std::string metrics_json(const StepMetrics& m) {
  nlohmann::ordered_json j;
  j["step"] = m.step;
  j["loss"] = m.loss;
  for (const auto& [field, v] : m.reported) j[field] = v;
  if (m.eval_loss) j["eval_loss"] = *m.eval_loss;
  for (const auto& [field, v] : m.eval_reported) j["eval_" + field] = v;
  j["lr"] = m.lr;
  j["grad_norm"] = m.grad_norm;
  j["step_time_s"] = m.step_time_s;
  j["tokens_per_s"] = m.tokens_per_s;
  j["elapsed_s"] = m.elapsed_s;
  if (!m.microbatch_order.empty()) j["microbatch_order"] = m.microbatch_order;
  if (!m.compute_s.empty()) {
    j["compute_s"] = m.compute_s;
    if (m.straggler >= 0)
      j["straggler"] = nlohmann::ordered_json{{"rank", m.straggler}, {"ratio", m.straggler_ratio}};
  }
  return j.dump();
}

std::string eval_only_json(int step, double eval_loss, const NamedValues& eval_reported,
                           double elapsed_s) {
  nlohmann::ordered_json j;
  j["step"] = step;
  j["eval_loss"] = eval_loss;
  for (const auto& [field, v] : eval_reported) j["eval_" + field] = v;
  j["elapsed_s"] = elapsed_s;
  return j.dump();
}

namespace {

std::string clock_text(double s) {
  const long t = std::lround(std::max(0.0, s));
  return t >= 3600 ? fmt::format("{}:{:02}:{:02}", t / 3600, t / 60 % 60, t % 60)
                   : fmt::format("{}:{:02}", t / 60, t % 60);
}

std::string rate_text(double tokens_per_s) {
  return tokens_per_s >= 1e6   ? fmt::format("{:.2f}M", tokens_per_s / 1e6)
         : tokens_per_s >= 1e3 ? fmt::format("{:.1f}k", tokens_per_s / 1e3)
                               : fmt::format("{:.0f}", tokens_per_s);
}

// " mtp-loss 2.3456 ..." (each field's underscores as dashes), `prefix` before each name.
std::string values_text(const NamedValues& values, const std::string& prefix = "") {
  std::string out;
  for (const auto& [field, v] : values) {
    std::string name = prefix + field;
    std::replace(name.begin(), name.end(), '_', '-');
    out += fmt::format(" {} {:.4f}", name, v);
  }
  return out;
}

std::string reported_text(const StepMetrics& m) {
  return values_text(m.reported);
}

std::string eval_text(const StepMetrics& m) {
  if (!m.eval_loss) return "";
  return fmt::format(" eval-loss {:.4f}{}", *m.eval_loss, values_text(m.eval_reported, "eval_"));
}

}  // namespace

Progress::Progress(ProgressMode mode, int steps, int log_every, std::FILE* out, int done_before)
    : mode_(mode),
      steps_(steps),
      every_(log_every > 0 ? log_every : std::max(1, (steps - done_before) / 20)),
      done_before_(done_before),
      out_(out) {}

void Progress::update(const StepMetrics& m) {
  const int run = m.step - done_before_;  // steps of this run so far
  const double eta = run > 0 ? m.elapsed_s / run * (steps_ - m.step) : 0;
  if (mode_ == ProgressMode::Bar) {
    constexpr int kWidth = 24;
    const int filled = steps_ > 0 ? m.step * kWidth / steps_ : kWidth;
    if (m.eval_loss) last_eval_ = eval_text(m);
    std::fprintf(out_, "\r\033[Kstep %*d/%d [%s%s] loss %.4f%s%s | %s tok/s | ETA %s",
                 static_cast<int>(std::to_string(steps_).size()), m.step, steps_,
                 std::string(static_cast<size_t>(filled), '#').c_str(),
                 std::string(static_cast<size_t>(kWidth - filled), '.').c_str(), m.loss,
                 reported_text(m).c_str(), last_eval_.c_str(), rate_text(m.tokens_per_s).c_str(),
                 clock_text(eta).c_str());
    std::fflush(out_);
    drawn_ = true;
  } else if (mode_ == ProgressMode::Lines && (m.step % every_ == 0 || m.step == done_before_ + 1 ||
                                              m.step == steps_ || m.eval_loss)) {
    std::fprintf(out_, "step %d/%d loss %.4f%s%s lr %.3g grad-norm %.3f tok/s %s eta %s\n", m.step,
                 steps_, m.loss, reported_text(m).c_str(), eval_text(m).c_str(), m.lr, m.grad_norm,
                 rate_text(m.tokens_per_s).c_str(), clock_text(eta).c_str());
    std::fflush(out_);
  }
}

void Progress::finish() {
  if (drawn_) std::fputc('\n', out_);
  drawn_ = false;
  std::fflush(out_);
}

namespace {

// Where a run starts from when it resumes (or, with --resume auto, that it found nothing to).
std::string resume_line(const Job& job) {
  if (!job.resume_path.empty())
    return fmt::format(
        "resuming from {}: {} of {} steps done{}{}\n", job.resume_path, job.start_step,
        job.train.steps, job.resume_auto ? " (--resume auto)" : "",
        job.resumed_dtype == job.train.dtype
            ? ""
            : fmt::format(" (trained in {}, going on in {}: the master weights "
                          "are fp32 either way)",
                          precision_name(job.resumed_dtype), precision_name(job.train.dtype)));
  if (job.resume_auto)
    return fmt::format("no checkpoint in {} yet: starting from step 0 (--resume auto)\n",
                       job.save_dir);
  return "";
}

// --eval-data: what is evaluated, and when.
std::string eval_line(const Job& job) {
  const EvalOptions& e = job.eval;
  if (!e.enabled()) return "";
  return fmt::format("validation on {}: {} batch{} of {} sequences, forward only, {}\n",
                     e.data_path, e.batches, e.batches == 1 ? "" : "es", job.train.global_batch,
                     e.only        ? std::string("once, with no training step (--eval-only)")
                     : e.every > 0 ? fmt::format("every {} steps and after the last", e.every)
                                   : std::string("after the last step"));
}

}  // namespace

std::string run_header(const Job& job, const TokenSource& data, const std::string& transport,
                       bool reference) {
  const ppc::Plan& p = job.plan;
  const int replicas = reference ? 1 : job.dp;
  const int b = job.train.global_batch / replicas / p.microbatches;
  const std::string what =
      reference    ? "reference (unpipelined, 1 process)"
      : job.dp > 1 ? fmt::format("{} on {} ranks (vpp {}) x {} data-parallel replicas = {} ranks",
                                 p.schedule, p.pp(), p.vpp(), job.dp, p.pp() * job.dp)
                   : fmt::format("{} on {} ranks (vpp {})", p.schedule, p.pp(), p.vpp());
  // The model as it describes itself (Model::describe), or its name, layout and setup.
  const std::string model =
      job.facts.describe ? run_hook([&] {
        return job.facts.describe(layout_info(p.layout), job.setup, job.train.mtp_loss_weight);
      })
                         : fmt::format("'{}' of layout {} (vocab {}, seq {})", job.facts.family,
                                       p.layout.source, job.setup.vocab, job.setup.seq_len);
  return fmt::format(
             "{}, {} microbatches of {} sequences{}\n"
             "model {}; data: {}; {}, {}{}, {} thread{} per rank ({})\n",
             what, p.microbatches, b, replicas > 1 ? " per replica" : "", model, data.describe(),
             transport, job.device,
             job.train.dtype == Precision::Bf16 ? ", bf16 (fp32 master weights)" : "", job.threads,
             job.threads == 1 ? "" : "s", thread_pools()) +
         eval_line(job) + resume_line(job);
}

void print_lines(const std::string& text) {
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);)
    std::printf("%s: %s\n", program_name().c_str(), line.c_str());
  std::fflush(stdout);
}

StepLog::StepLog(const Job& job, bool active)
    : job_(job),
      active_(active),
      reported_(job.facts.reported ? job.facts.reported(layout_info(job.plan.layout))
                                   : std::vector<Reported>{}),
      progress_(job.out.progress, job.last_step(), job.out.log_every, stdout,
                static_cast<int>(job.start_step)) {
  // A resumed run keeps the lines up to its checkpoint's step; a fresh one starts the file anew.
  if (active_ && !job.out.metrics_path.empty())
    metrics_.emplace(job.out.metrics_path, job.resume_path.empty() ? -1 : job.start_step);
}

void StepLog::step(int step, const StepStats& stats, double step_time_s,
                   const std::optional<EvalStats>& eval) {
  if (!active_) return;
  auto mean = [](const std::vector<double>& v) {
    double sum = 0;
    for (double x : v) sum += x;
    return v.empty() ? 0 : sum / static_cast<double>(v.size());
  };
  StepMetrics m;
  m.step = step + 1;
  m.loss = mean(stats.losses);
  // Each reported value: the mean over the microbatches that reported it.
  auto reported = [&](const std::vector<std::vector<std::optional<double>>>& per_mb) {
    NamedValues out;
    for (size_t k = 0; k < reported_.size() && k < per_mb.size(); ++k) {
      std::vector<double> got;
      for (const auto& v : per_mb[k])
        if (v) got.push_back(*v);
      if (!got.empty()) out.emplace_back(reported_[k].field(), mean(got));
    }
    return out;
  };
  m.reported = reported(stats.reported);
  m.lr = learning_rate(job_.train, step);
  m.grad_norm = stats.grad_norm;
  m.step_time_s = step_time_s;
  const double tokens = stats.targets > 0
                            ? stats.targets
                            : job_.train.global_batch * static_cast<double>(job_.setup.seq_len);
  m.tokens_per_s = step_time_s > 0 ? tokens / step_time_s : 0;
  m.elapsed_s = std::chrono::duration<double>(Clock::now() - start_).count();
  m.compute_s = stats.compute_s;
  for (size_t k = 0; k < stats.microbatch_order.size(); ++k)
    if (stats.microbatch_order[k] != static_cast<int>(k)) m.microbatch_order = stats.microbatch_order;
  if (!m.compute_s.empty()) {
    const ComputeBalance b = compute_balance(std::vector<std::vector<double>>{m.compute_s});
    if (b.straggler()) {
      m.straggler = b.slowest;
      m.straggler_ratio = b.ratio;
    }
    // Kept for the summary: the last steps, the run's first (its warm-up) only if alone.
    constexpr size_t kKept = 50;
    if (step > job_.start_step || job_.start_step + 1 == job_.last_step())
      compute_.push_back(m.compute_s);
    if (compute_.size() > kKept) compute_.pop_front();
  }
  if (eval) {
    m.eval_loss = eval->loss;
    for (size_t k = 0; k < reported_.size() && k < eval->reported.size(); ++k)
      if (eval->reported[k]) m.eval_reported.emplace_back(reported_[k].field(), *eval->reported[k]);
    last_eval_ = eval->loss;
  }
  if (m.step == job_.start_step + 1) first_loss_ = m.loss;
  last_loss_ = m.loss;
  if (metrics_) metrics_->append(metrics_json(m));
  progress_.update(m);
}

void StepLog::evaluated(int done, const EvalStats& eval) {
  if (!active_) return;
  const double elapsed = std::chrono::duration<double>(Clock::now() - start_).count();
  NamedValues reported;  // each by its field, as a step's line has them
  std::string words;     // ", eval mtp-loss 2.345678" ...
  for (size_t k = 0; k < reported_.size() && k < eval.reported.size(); ++k)
    if (eval.reported[k]) {
      reported.emplace_back(reported_[k].field(), *eval.reported[k]);
      std::string name = reported_[k].field();
      std::replace(name.begin(), name.end(), '_', '-');
      words += fmt::format(", eval {} {:.6f}", name, *eval.reported[k]);
    }
  if (metrics_) metrics_->append(eval_only_json(done, eval.loss, reported, elapsed));
  last_eval_ = eval.loss;
  std::printf("%s: eval loss %.6f%s after %d step%s (%.2f s)\n", program_name().c_str(), eval.loss,
              words.c_str(), done, done == 1 ? "" : "s", elapsed);
  std::fflush(stdout);
}

void StepLog::sync() {
  if (metrics_) metrics_->sync();
}

void StepLog::finish() {
  if (!active_) return;
  progress_.finish();
  sync();
  metrics_.reset();
  if (job_.eval.only) return;
  const int run = job_.last_step() - static_cast<int>(job_.start_step);
  const bool part = job_.start_step > 0 || job_.last_step() < job_.train.steps;
  std::printf("%s: done: %d step%s in %.2f s, loss %.4f -> %.4f%s%s\n", program_name().c_str(), run,
              run == 1 ? "" : "s", std::chrono::duration<double>(Clock::now() - start_).count(),
              first_loss_, last_loss_,
              last_eval_ ? fmt::format(", eval loss {:.4f}", *last_eval_).c_str() : "",
              part ? fmt::format(" (steps {}-{} of {})", job_.start_step + 1, job_.last_step(),
                                 job_.train.steps)
                         .c_str()
                   : "");
  std::fflush(stdout);
}

}  // namespace pprt
