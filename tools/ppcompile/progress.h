// A one-line progress report for ppcompile's long searches (--balance, --autotune).
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>

namespace ppcompile {

// Writes "what: text" over itself on stderr when stderr is a terminal, from half a second after
// construction on and at most ten times a second; erased when destroyed. Silent otherwise, so
// pipes and files never see it.
class Progress {
 public:
  explicit Progress(const char* what) : what_(what), on_(isatty(fileno(stderr)) != 0) {}
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;
  ~Progress() {
    if (shown_) std::cerr << "\r\033[K" << std::flush;
  }

  void operator()(const std::string& text) {
    if (!on_) return;
    const auto now = std::chrono::steady_clock::now();
    if (now - start_ < std::chrono::milliseconds(500) ||
        (shown_ && now - last_ < std::chrono::milliseconds(100)))
      return;
    last_ = now;
    shown_ = true;
    std::cerr << "\r\033[K" << what_ << ": " << text << std::flush;
  }

 private:
  const char* what_;
  bool on_;
  bool shown_ = false;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now(), last_;
};

}  // namespace ppcompile
