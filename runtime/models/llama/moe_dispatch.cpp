// Expert parallelism's token exchange (moe_dispatch.h).
#include "runtime/models/llama/moe_dispatch.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include <numeric>

#include "runtime/model/recompute.h"
#include "runtime/transport/transport.h"

namespace pprt {

namespace {

// The communicator of the forward's exchanges: the forward's, except in a recomputation's rerun,
// which is part of the backward (recompute.h).
Transport& forward_transport(const ExpertGroup& g) {
  return recomputing() ? *g.backward : *g.forward;
}

int64_t sum(const std::vector<int64_t>& v) {
  return std::accumulate(v.begin(), v.end(), int64_t{0});
}

// The exchange on `t`: rows in the tensor's dtype, except bf16 on the CPU, sent as fp32 (exact
// both ways), which the CPU transport need not support.
at::Tensor exchange(Transport& t, const at::Tensor& input, const std::vector<int64_t>& recv,
                    const std::vector<int64_t>& send, std::chrono::milliseconds timeout) {
  const bool widen = input.scalar_type() == at::kBFloat16 && !input.is_cuda();
  const at::Tensor in = (widen ? input.to(at::kFloat) : input).contiguous();
  std::vector<int64_t> shape = in.sizes().vec();
  shape[0] = sum(recv);
  at::Tensor out = at::empty(shape, in.options());
  t.all_to_all(out, in, recv, send, timeout);
  return widen ? out.to(input.scalar_type()) : out;
}

struct AllToAll : torch::autograd::Function<AllToAll> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& input,
                            std::vector<int64_t> recv, std::vector<int64_t> send,
                            const ExpertGroup* g) {
    ctx->saved_data["recv"] = recv;
    ctx->saved_data["send"] = send;
    ctx->saved_data["group"] = reinterpret_cast<int64_t>(g->backward);
    ctx->saved_data["timeout"] = static_cast<int64_t>(g->timeout.count());
    return exchange(forward_transport(*g), input, recv, send, g->timeout);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto* t = reinterpret_cast<Transport*>(ctx->saved_data["group"].toInt());
    const std::vector<int64_t> recv = ctx->saved_data["recv"].toIntVector();
    const std::vector<int64_t> send = ctx->saved_data["send"].toIntVector();
    const std::chrono::milliseconds timeout(ctx->saved_data["timeout"].toInt());
    // The gradient goes back the way the rows came: what was received is sent.
    return {exchange(*t, grads[0], send, recv, timeout), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor all_to_all_rows(const at::Tensor& input, const std::vector<int64_t>& recv,
                           const std::vector<int64_t>& send, const ExpertGroup& g) {
  return AllToAll::apply(input, recv, send, &g);
}

at::Tensor dispatch_to_experts(const at::Tensor& pairs, const at::Tensor& counts,
                               const ExpertGroup& g, const ExpertFn& expert) {
  const int64_t G = g.size, E = counts.numel(), L = E / G;
  const int64_t* c = counts.data_ptr<int64_t>();
  std::vector<int64_t> send(static_cast<size_t>(G), 0), recv(static_cast<size_t>(G), 0);
  for (int64_t e = 0; e < E; ++e) send[static_cast<size_t>(e / L)] += c[e];
  // The split sizes first: theirs[j][l], the pairs rank j sends this rank's expert l.
  const at::Tensor mine = counts.reshape({G, L}).to(pairs.device());
  at::Tensor theirs = at::empty_like(mine);
  forward_transport(g).all_to_all(theirs, mine, {}, {}, g.timeout);
  theirs = theirs.cpu().contiguous();
  const int64_t* t = theirs.data_ptr<int64_t>();
  for (int64_t j = 0; j < G; ++j)
    for (int64_t l = 0; l < L; ++l) recv[static_cast<size_t>(j)] += t[j * L + l];
  const at::Tensor received = all_to_all_rows(pairs, recv, send, g);  // by sender, then expert

  // The received rows grouped by local expert (senders in rank order within each).
  const int64_t R = sum(recv);
  at::Tensor outputs;
  if (R == 0) {
    outputs = received * 0;  // nothing to run; still part of the graph, so that the backward's
                             // exchanges run on this rank as on the others
  } else {
    std::vector<int64_t> start(static_cast<size_t>(G), 0);  // sender j's first row
    for (int64_t j = 1; j < G; ++j)
      start[static_cast<size_t>(j)] =
          start[static_cast<size_t>(j - 1)] + recv[static_cast<size_t>(j - 1)];
    std::vector<int64_t> perm;
    perm.reserve(static_cast<size_t>(R));
    std::vector<int64_t> per_expert(static_cast<size_t>(L), 0);
    for (int64_t l = 0; l < L; ++l)
      for (int64_t j = 0; j < G; ++j) {
        int64_t at = start[static_cast<size_t>(j)];
        for (int64_t k = 0; k < l; ++k) at += t[j * L + k];
        for (int64_t r = 0; r < t[j * L + l]; ++r) perm.push_back(at + r);
        per_expert[static_cast<size_t>(l)] += t[j * L + l];
      }
    std::vector<int64_t> inverse(static_cast<size_t>(R));
    for (int64_t i = 0; i < R; ++i) inverse[static_cast<size_t>(perm[static_cast<size_t>(i)])] = i;
    const at::Tensor by_expert =
        received.index_select(0, at::tensor(perm, at::kLong).to(received.device()));
    std::vector<at::Tensor> ys;
    for (int64_t l = 0, off = 0; l < L; off += per_expert[static_cast<size_t>(l)], ++l)
      if (per_expert[static_cast<size_t>(l)] > 0)
        ys.push_back(expert(l, by_expert.narrow(0, off, per_expert[static_cast<size_t>(l)])));
    outputs = at::cat(ys).index_select(0, at::tensor(inverse, at::kLong).to(received.device()));
  }
  return all_to_all_rows(outputs, send, recv, g);  // back to their senders, in their order
}

}  // namespace pprt
