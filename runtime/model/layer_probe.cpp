#include "runtime/model/layer_probe.h"

#include <utility>

namespace pprt {

namespace {

thread_local LayerProbe* tl_probe = nullptr;
thread_local LayerSample tl_layer;

}  // namespace

LayerProbe::LayerProbe(std::function<int64_t()> live_bytes) : live_bytes_(std::move(live_bytes)) {}

void LayerProbe::add(const LayerSample& s) {
  const std::lock_guard<std::mutex> lock(mutex_);
  samples_.push_back(s);
}

std::vector<LayerSample> LayerProbe::take() {
  const std::lock_guard<std::mutex> lock(mutex_);
  return std::exchange(samples_, {});
}

LayerProbe::Active::Active(LayerProbe* probe) : previous_(tl_probe) {
  tl_probe = probe;
}
LayerProbe::Active::~Active() {
  tl_probe = previous_;
}
LayerProbe* LayerProbe::current() {
  return tl_probe;
}

LayerProbe::Layer::Layer(char symbol, ppc::MemoryMode mode, int position) : previous_(tl_layer) {
  tl_layer = LayerSample{symbol, mode, false, position, 0, 0, 0};
}
LayerProbe::Layer::~Layer() {
  tl_layer = previous_;
}
LayerSample LayerProbe::current_layer() {
  return tl_layer;
}

}  // namespace pprt
