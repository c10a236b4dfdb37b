// Mixed precision (pprun --dtype bf16), the rules in one place. Megatron-LM's bf16 training is
// the model: its Float16Module runs the model in bf16, its optimizer keeps fp32 master weights,
// and each parameter's `main_grad` (fp32) accumulates the microbatches' gradients.
//
//  - Parameters are fp32 leaves (the master weights): the ParamStore, AdamW and its state,
//    clipping, data parallelism's all-reduce and checkpoints see fp32 tensors only, as without
//    --dtype.
//  - A matrix product runs in its input's dtype (ops.h). Its weight is then a working copy of the
//    master in that dtype, made once per optimizer step and kept while the master is unchanged
//    (FusedWeight: each in-place update bumps the master's version).
//  - The model's activations are bf16 from the embedding's output on (the built-in model casts
//    the looked-up rows), so the tensors crossing stage boundaries, and their gradients, are bf16:
//    half the bytes of fp32 (ModelContext::dtype gives the transport's buffers their type).
//  - Weight gradients go into the fp32 master's .grad: each microbatch's product (bf16, computed
//    with fp32 accumulation by the GEMM; on GPUs the GEMM's fp32 result itself, not rounded) is
//    added to it in fp32, at once (B) or in the W of a split backward (I/W). Without a WeightWork,
//    the gradient autograd gets is cast to the master's dtype (master_grad), so autograd
//    accumulates fp32 too.
//  - RMSNorm computes in fp32 (its statistics, the scale, its backward; the output is rounded to
//    the input's dtype; on GPUs LibTorch's fused kernel does so on the bf16 input itself);
//    attention's softmax takes fp32 scores (on the CPU the q k^T product of the bf16 operands with
//    an fp32 result; on GPUs SDPA keeps its statistics in fp32); the logits are cast to fp32 for
//    the cross-entropy, so the loss is fp32.
//
// Included only by LibTorch translation units.
#pragma once

#include <ATen/core/Tensor.h>

#include "runtime/job.h"

namespace pprt {

// The dtype of activations and matrix products for --dtype.
at::ScalarType compute_dtype(Precision p);

// Whether `t` is of a lower precision than fp32 (bf16, fp16): a mixed-precision activation.
bool low_precision(const at::Tensor& t);

// `t` in fp32 (itself when it is fp32): for the parts computed in fp32.
at::Tensor widened(const at::Tensor& t);

// A weight gradient `g` (in the compute dtype) as the gradient of `master` (its dtype).
at::Tensor master_grad(const at::Tensor& master, const at::Tensor& g);

}  // namespace pprt
