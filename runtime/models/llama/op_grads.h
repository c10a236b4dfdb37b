// What the model's autograd functions share about weight gradients (ops.cpp, rms_norm.cpp): adding
// one into a parameter's .grad, and the WeightWork and parameter a function's context keeps.
#pragma once

#include <ATen/core/Tensor.h>

namespace torch::autograd {
struct AutogradContext;
}

namespace pprt {

class WeightWork;

namespace op_grads {

using torch::autograd::AutogradContext;

// Weight gradients, added to the parameters' .grad. The first one of a step (after zero_grads,
// .grad is undefined) becomes .grad; later ones are added in place, by the product itself where
// there is one (addmm_ into .grad: no gradient tensor per microbatch, and no second pass over it).
// B and W both come here, in the same order, so I then W gives B's gradients bit for bit.
// A gradient in another dtype than the parameter's (bf16 into an fp32 master) is added in the
// parameter's.
void accumulate(at::Tensor& param, const at::Tensor& g);
// t as a matrix: its last dimension's rows.
at::Tensor rows_of(const at::Tensor& t);

// The WeightWork and the parameter that remember() kept in a function's context.
WeightWork* work_of(AutogradContext* ctx);
at::Tensor* param_of(AutogradContext* ctx);
void remember(AutogradContext* ctx, WeightWork* work, at::Tensor* param);

}  // namespace op_grads

}  // namespace pprt
