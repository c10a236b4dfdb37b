#include "runtime/output/step_log.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>

#include <nlohmann/json.hpp>


namespace pprt {

std::string metrics_json(const StepMetrics& m) {
  nlohmann::ordered_json j;
  j["step"] = m.step;
  j["loss"] = m.loss;
  if (m.mtp_loss) j["mtp_loss"] = *m.mtp_loss;
  j["lr"] = m.lr;
  j["grad_norm"] = m.grad_norm;
  j["step_time_s"] = m.step_time_s;
  j["tokens_per_s"] = m.tokens_per_s;
  j["elapsed_s"] = m.elapsed_s;
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

std::string mtp_text(const StepMetrics& m) {
  return m.mtp_loss ? fmt::format(" mtp-loss {:.4f}", *m.mtp_loss) : "";
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
    std::fprintf(out_, "\r\033[Kstep %*d/%d [%s%s] loss %.4f%s | %s tok/s | ETA %s",
                 static_cast<int>(std::to_string(steps_).size()), m.step, steps_,
                 std::string(static_cast<size_t>(filled), '#').c_str(),
                 std::string(static_cast<size_t>(kWidth - filled), '.').c_str(), m.loss,
                 mtp_text(m).c_str(), rate_text(m.tokens_per_s).c_str(), clock_text(eta).c_str());
    std::fflush(out_);
    drawn_ = true;
  } else if (mode_ == ProgressMode::Lines &&
             (m.step % every_ == 0 || m.step == done_before_ + 1 || m.step == steps_)) {
    std::fprintf(out_, "step %d/%d loss %.4f%s lr %.3g grad-norm %.3f tok/s %s eta %s\n", m.step,
                 steps_, m.loss, mtp_text(m).c_str(), m.lr, m.grad_norm,
                 rate_text(m.tokens_per_s).c_str(), clock_text(eta).c_str());
    std::fflush(out_);
  }
}

void Progress::finish() {
  if (drawn_) std::fputc('\n', out_);
  drawn_ = false;
  std::fflush(out_);
}

}  // namespace pprt
