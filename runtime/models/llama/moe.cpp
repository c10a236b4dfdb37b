// The mixture-of-experts MLP (moe.h).
#include "runtime/models/llama/moe.h"

#include <ATen/ATen.h>

#include "compiler/diagnostic.h"
#include "runtime/model/recompute.h"
#include "runtime/models/llama/moe_dispatch.h"

namespace pprt {

MoeLayer moe_layer(std::deque<at::Tensor>& p, size_t& i, const MoeConfig& c, const ExpertGroup& g) {
  MoeLayer m;
  m.group = g;
  m.first = g.rank * (c.experts / g.size);
  m.router = &p[i++];
  if (c.bias_update_rate > 0) {
    m.bias = &p[i++];
    m.loads = std::make_shared<BiasLoads>();
    m.loads->tokens = at::zeros({c.experts}, at::kDouble);
  }
  for (int e = 0; e < c.experts / g.size; ++e) {
    m.w1.push_back(&p[i++]);
    m.w3.push_back(&p[i++]);
    m.w2.push_back(&p[i++]);
    m.gate_up.push_back(std::make_shared<FusedWeight>());
    m.w2_copy.push_back(std::make_shared<FusedWeight>());
  }
  if (c.has_shared()) {
    m.shared_w1 = &p[i++];
    m.shared_w3 = &p[i++];
    m.shared_w2 = &p[i++];
    if (c.shared_gate) m.shared_gate = &p[i++];
  }
  return m;
}

bool moe_foreign_expert(const std::string& name, const std::string& mlp, const MoeConfig& c,
                        const ExpertGroup& g, bool* expert) {
  const std::string prefix = mlp + "experts.";
  const bool routed = name.compare(0, prefix.size(), prefix) == 0;
  if (expert) *expert = routed;
  if (!routed || g.size <= 1) return false;
  const int e = std::stoi(name.substr(prefix.size()));
  const int local = c.experts / g.size;
  return e / local != g.rank;
}

namespace {

// DeepSeek-V3's update of the routing bias from the loads of the step that ended (every
// microbatch of the step's batch: the runtime summed them over the layer's copies),
// b_e += rate * sign(mean load - load_e); then the next step's loads start from zero. Under
// loads.mutex.
void update_bias(const MoeConfig& c, MoeLayer& p) {
  BiasLoads& l = *p.loads;
  at::NoGradGuard no_grad;
  // (No load yet, before the first step: sign(0), no move.)
  const at::Tensor step = (l.tokens.mean() - l.tokens).sign().to(p.bias->scalar_type());
  p.bias->add_(step.to(p.bias->device()), c.bias_update_rate);
  l.tokens.zero_();
  l.counted.clear();
}

}  // namespace

at::Tensor moe_mlp(const MoeConfig& c, const at::Tensor& h, MoeLayer& p, const Microbatch& mb,
                   Kernels kernels) {
  WeightWork* w = mb.weight_work();
  const int64_t hidden = h.size(-1), E = c.experts, k = c.top_k;
  const at::Tensor x = h.reshape({-1, hidden});
  const int64_t N = x.size(0);

  // The router: scores in fp32, the top_k experts of each token by score (+ the balancing bias,
  // which only chooses), their scores as weights.
  const at::Tensor logits = linear(x, p.router, w, p.router_copy.get()).to(at::kFloat);
  const at::Tensor scores = c.score == "sigmoid" ? logits.sigmoid() : logits.softmax(-1);
  at::Tensor choice;  // [N, k]
  // A training forward: under autograd, or a fully recomputed layer's first run (without it;
  // its rerun in the backward then finds the microbatch counted and the bias moved already).
  const bool training = at::GradMode::is_enabled() || recompute_first_run();
  {
    at::NoGradGuard no_grad;
    at::Tensor by = scores.detach();
    if (p.bias) {
      // A training forward after an optimizer step (evaluation's, without autograd, leaves the
      // bias and the loads as they are).
      const std::lock_guard<std::mutex> lock(p.loads->mutex);
      if (const int64_t v = p.router->_version(); v != p.loads->step_version && training) {
        update_bias(c, p);
        p.loads->step_version = v;
      }
      by = by + p.bias->detach().to(by.scalar_type());
    }
    choice = std::get<1>(by.topk(k, -1));
  }
  at::Tensor weights = scores.gather(1, choice);
  if (c.norm_topk) weights = weights / weights.sum(-1, true);
  if (c.routed_scale != 1.0) weights = weights * c.routed_scale;
  weights = weights.to(h.scalar_type());

  // The (token, slot) pairs grouped by expert, tokens in increasing order within each.
  const at::Tensor flat = choice.reshape({-1});
  const at::Tensor order = std::get<1>(flat.sort(/*stable=*/true, 0, false));
  const at::Tensor counts = at::bincount(flat, {}, E).cpu();
  const at::Tensor tokens = at::floor_divide(order, k);
  const at::Tensor pair_weights = weights.reshape({-1}).index_select(0, order).unsqueeze(1);
  // The step's loads: training forwards only (evaluation runs without autograd), a microbatch's
  // rerun (a recomputation) not again.
  if (p.bias && training) {
    const std::lock_guard<std::mutex> lock(p.loads->mutex);
    if (p.loads->counted.insert(mb.index()).second) p.loads->tokens += counts.to(at::kDouble);
  }

  at::Tensor out = at::zeros_like(x);
  const int64_t* count = counts.data_ptr<int64_t>();
  if (p.group.sharded()) {  // --ep: the pairs go to the ranks of their experts and come back
    const at::Tensor ys = dispatch_to_experts(
        x.index_select(0, tokens), counts, p.group, [&](int64_t l, const at::Tensor& xe) {
          const auto e = static_cast<size_t>(l);
          const at::Tensor gate_up = fused_linear(xe, {p.w1[e], p.w3[e]}, *p.gate_up[e], w);
          return linear(swiglu(gate_up, kernels), p.w2[e], w, p.w2_copy[e].get());
        });
    for (int64_t e = 0, off = 0; e < E; off += count[e], ++e)
      if (count[e] > 0)
        out = out.index_add(0, tokens.narrow(0, off, count[e]),
                            ys.narrow(0, off, count[e]) * pair_weights.narrow(0, off, count[e]));
  }
  for (int64_t e = 0, off = 0; e < E && !p.group.sharded(); off += count[e], ++e) {
    if (count[e] == 0) continue;
    const at::Tensor tok = tokens.narrow(0, off, count[e]);
    const at::Tensor xe = x.index_select(0, tok);
    const at::Tensor gate_up = fused_linear(xe, {p.w1[e], p.w3[e]}, *p.gate_up[e], w);
    const at::Tensor ye = linear(swiglu(gate_up, kernels), p.w2[e], w, p.w2_copy[e].get());
    out = out.index_add(0, tok, ye * pair_weights.narrow(0, off, count[e]));
  }
  if (p.shared_w1) {
    const at::Tensor gate_up = fused_linear(x, {p.shared_w1, p.shared_w3}, *p.shared_gate_up, w);
    at::Tensor s = linear(swiglu(gate_up, kernels), p.shared_w2, w, p.shared_w2_copy.get());
    if (p.shared_gate) s = s * linear(x, p.shared_gate, w, p.shared_gate_copy.get()).sigmoid();
    out = out + s;
  }

  // The classic load-balancing loss: E * sum_e f_e P_e (f_e: the fraction of tokens routed to
  // e, which sums to top_k; P_e: e's mean score, normalised over the experts).
  const at::Tensor probs = c.score == "sigmoid" ? scores / scores.sum(-1, true) : scores;
  const at::Tensor f = counts.to(probs.device()).to(at::kFloat) / static_cast<double>(N);
  mb.add_loss("load_balancing", (f * probs.mean(0)).sum() * static_cast<double>(E),
              c.aux_loss_coef);
  return out.reshape(h.sizes());
}

}  // namespace pprt
