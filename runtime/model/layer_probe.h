// pprun --profile's look inside a stage's forward (issue 42; output/profile.h writes what it sees
// into the cost file's `layers`): per layer, the memory mode it ran under, how long its forward
// took and what it left allocated (what it keeps until its backward, its output included), and per
// recomputed piece, how long its rerun took in the backward (recompute.h).
//
// The executor makes one per rank when it profiles on the CPU and makes it current on its thread
// (Active) while a forward runs; a stage's layers report to the current probe, and a recomputed
// piece made meanwhile reports its rerun to the same probe later, from whichever thread runs the
// backward. The bytes are the executor's count of the CPU allocator (activation_bytes.h), read
// through the function it gives. No LibTorch.
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <vector>

#include "compiler/memory_mode.h"

namespace pprt {

// One layer's forward (or one rerun of a piece it recomputes, in a backward).
struct LayerSample {
  char symbol = 't';  // the layer's symbol in the layout
  ppc::MemoryMode mode = ppc::MemoryMode::None;
  bool rerun = false;  // a recomputation's rerun, else the layer's forward
  int position = 0;    // the layer's position in the model (tells a stage's layers apart)
  int64_t ns = 0;      // time
  int64_t bytes = 0;   // forward: what it left allocated (0 for a rerun)
  int64_t output = 0;  // forward: its output's bytes (what a fully recomputing layer keeps of its
                       // own: its input is the layer before's output)
};

class LayerProbe {
 public:
  // `live_bytes`: the bytes the calling thread's allocations hold now (activation_bytes.h).
  explicit LayerProbe(std::function<int64_t()> live_bytes);

  int64_t live() const { return live_bytes_(); }
  void add(const LayerSample& s);
  // What was added since the last take.
  std::vector<LayerSample> take();

  // The probe layers report to on this thread while this lives (null: none).
  class Active {
   public:
    explicit Active(LayerProbe* probe);
    ~Active();
    Active(const Active&) = delete;
    Active& operator=(const Active&) = delete;

   private:
    LayerProbe* previous_;
  };
  static LayerProbe* current();

  // The layer whose forward runs on this thread while this lives: what a recomputed piece made
  // meanwhile reports its rerun as.
  class Layer {
   public:
    Layer(char symbol, ppc::MemoryMode mode, int position);
    ~Layer();
    Layer(const Layer&) = delete;
    Layer& operator=(const Layer&) = delete;

   private:
    LayerSample previous_;
  };
  static LayerSample current_layer();

 private:
  std::function<int64_t()> live_bytes_;
  std::mutex mutex_;
  std::vector<LayerSample> samples_;
};

}  // namespace pprt
