// What a stage's forward and the declared boundaries (boundaries.cpp) share about layer shapes.
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>
#include <string>
#include <vector>

#include "pprt/pprt.h"

namespace pprt::detail {

// "[2, 8, 8]".
std::string shape_text(at::IntArrayRef s);

// A layer's declared output for inputs of shapes `in`: its TensorsShapeFn's, or its one tensor's
// (ShapeFn, SetupShapeFn) for one input; nothing when it declares none (or a one-tensor shape for
// several inputs, which the forward refuses).
std::optional<std::vector<TensorShape>> declared_out(const Model::Symbol& sym,
                                                     const std::vector<TensorShape>& in,
                                                     const MicrobatchShape& mb,
                                                     const ModelSetup& setup);

}  // namespace pprt::detail
