// pprt's plain types (no LibTorch): what the runtime needs to know of a configured model, and the
// error a model's own code raises for bad input. pprt/pprt.h includes this header.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>

namespace pprt {

// A mistake in what the user gave (an option, a file, a layout the model cannot build), raised
// by a model's own code (a layer factory, a forward, the loss): pprun prints
// "<program>: error: WHERE: MESSAGE" and exits with code 2.
class Error : public std::runtime_error {
 public:
  Error(std::string where, const std::string& message)
      : std::runtime_error(message), where_(std::move(where)) {}
  const std::string& where() const { return where_; }

 private:
  std::string where_;
};

// A configured model as the runtime sees it.
struct ModelSetup {
  int vocab = 256;   // token ids lie in [0, vocab)
  int seq_len = 64;  // tokens per sequence (a microbatch's rows hold seq_len + 1)
};

}  // namespace pprt
