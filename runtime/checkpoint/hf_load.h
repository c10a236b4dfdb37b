// --init-from: a rank's parameters set from a Hugging Face model directory (hf.h).
// Included only by LibTorch translation units.
#pragma once

#include <cstdint>
#include <string>

#include "pprt/family.h"
#include "runtime/model/stage.h"

namespace pprt {

// Sets every parameter of `store` from the Hugging Face directory `dir` whose model `format`
// describes (read as float32; the directory was checked by make_job). Returns the bytes of
// float32 set.
uint64_t load_hf_weights(const std::string& dir, const HfFormat& format, ParamStore& store);

}  // namespace pprt
