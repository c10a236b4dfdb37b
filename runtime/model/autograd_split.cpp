// The input/weight split through the autograd graph (autograd_split.h).
#include "runtime/model/autograd_split.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/variable.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "compiler/diagnostic.h"

namespace pprt {

namespace {

using torch::autograd::Edge;
using torch::autograd::edge_list;
using torch::autograd::Node;
using torch::autograd::variable_list;
// The type of Edge::function: std::shared_ptr<Node> up to LibTorch 2.11, c10::intrusive_ptr<Node>
// in 2.13. Never named, so that the file compiles against both.
using NodePtr = decltype(Edge::function);

// The gradient edge of a tensor that requires grad, or an invalid edge: its grad_fn, or for a
// leaf its gradient accumulator if the graph holds one (none is made here).
Edge edge_of(const at::Tensor& t) {
  if (!t.defined() || !t.requires_grad()) return Edge();
  if (t.grad_fn()) return torch::autograd::impl::gradient_edge(t);
  NodePtr acc = torch::autograd::impl::try_get_grad_accumulator(t);
  return acc ? Edge(std::move(acc), 0) : Edge();
}

// The graph reachable from the roots through their next edges, not going past the `stops` (the
// inputs' nodes: a stage input that is not a leaf leads into the previous stage's graph), with each
// node's parents.
struct Graph {
  std::vector<NodePtr> nodes;                // the roots first
  std::vector<std::vector<size_t>> parents;  // per node, the nodes with an edge to it
  std::unordered_map<const Node*, size_t> index;

  Graph(const edge_list& roots, const std::unordered_set<const Node*>& stops) {
    for (const Edge& r : roots) add(r.function);
    for (size_t i = 0; i < nodes.size(); ++i) {
      if (stops.count(nodes[i].get())) continue;
      for (const Edge& e : nodes[i]->next_edges()) {
        if (!e.is_valid()) continue;
        const size_t j = add(e.function);
        parents[j].push_back(i);
      }
    }
  }
  size_t add(const NodePtr& n) {
    auto [it, fresh] = index.emplace(n.get(), nodes.size());
    if (fresh) {
      nodes.push_back(n);
      parents.emplace_back();
    }
    return it->second;
  }
  // The nodes from which one of the `targets` can be reached (themselves included).
  std::vector<char> reaching(const std::vector<size_t>& targets) const {
    std::vector<char> in(nodes.size(), 0);
    std::vector<size_t> todo = targets;
    for (size_t t : targets) in[t] = 1;
    while (!todo.empty()) {
      const size_t n = todo.back();
      todo.pop_back();
      for (size_t p : parents[n])
        if (!in[p]) {
          in[p] = 1;
          todo.push_back(p);
        }
    }
    return in;
  }
};

int64_t distinct_bytes(const std::vector<at::Tensor>& ts) {
  std::unordered_set<const void*> seen;
  int64_t n = 0;
  for (const at::Tensor& t : ts)
    if (t.defined() && t.has_storage() && seen.insert(t.storage().unsafeGetStorageImpl()).second)
      n += static_cast<int64_t>(t.storage().nbytes());
  return n;
}

}  // namespace

bool generic_split_forced() {
  const char* v = std::getenv("PPRUN_GENERIC_SPLIT");
  return v && *v && std::strcmp(v, "0") != 0;
}

struct AutogradSplit::Impl {
  bool pending = false;
  edge_list roots;                // where the W starts
  std::vector<at::Tensor> grads;  // the gradient flowing into each root
  Held held;
};

AutogradSplit::AutogradSplit() : impl_(std::make_unique<Impl>()) {}
AutogradSplit::~AutogradSplit() = default;
AutogradSplit::AutogradSplit(AutogradSplit&&) noexcept = default;
AutogradSplit& AutogradSplit::operator=(AutogradSplit&&) noexcept = default;

bool AutogradSplit::pending() const {
  return impl_->pending;
}

AutogradSplit::Held AutogradSplit::held() const {
  return impl_->held;
}

std::vector<at::Tensor> AutogradSplit::backward_input(const std::vector<at::Tensor>& outputs,
                                                      const std::vector<at::Tensor>& grad_outputs,
                                                      const std::vector<at::Tensor>& inputs) {
  Impl& m = *impl_;
  PPC_INTERNAL_ASSERT(!m.pending, "an I before the W of the previous one");
  m = Impl{};
  m.pending = true;
  std::vector<at::Tensor> out(inputs.size());
  // The roots: the outputs that require grad, with the gradient flowing into each.
  edge_list roots;
  std::vector<at::Tensor> grads;
  for (size_t k = 0; k < outputs.size(); ++k) {
    const Edge e = edge_of(outputs[k]);
    if (!e.is_valid()) continue;
    roots.push_back(e);
    grads.push_back(k < grad_outputs.size() && grad_outputs[k].defined()
                        ? grad_outputs[k]
                        : at::ones_like(outputs[k]));
  }
  if (roots.empty()) return out;  // nothing requires grad: nothing to do

  std::vector<Edge> in(inputs.size());
  std::unordered_set<const Node*> stops;
  for (size_t k = 0; k < inputs.size(); ++k) {
    in[k] = edge_of(inputs[k]);
    if (in[k].is_valid()) stops.insert(in[k].function.get());
  }
  const Graph g(roots, stops);
  std::vector<size_t> in_nodes;  // the inputs' nodes the graph reaches
  for (const Edge& e : in)
    if (e.is_valid())
      if (auto it = g.index.find(e.function.get()); it != g.index.end())
        in_nodes.push_back(it->second);
  if (in_nodes.empty()) {
    // No input gradient (the model's first stage, or outputs that do not depend on the inputs):
    // the input path is empty and the W is the whole backward.
    m.roots = std::move(roots);
    m.grads = std::move(grads);
    m.held = Held{distinct_bytes(m.grads), static_cast<int>(m.roots.size()),
                  static_cast<int>(m.roots.size())};
    return out;
  }

  // The input path C and, in it, the nodes with an edge leaving it (towards parameters).
  const std::vector<char> in_c = g.reaching(in_nodes);
  std::vector<char> is_in(g.nodes.size(), 0);
  for (size_t i : in_nodes) is_in[i] = 1;
  std::vector<size_t> inter;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (!in_c[i] || is_in[i]) continue;
    for (const Edge& e : g.nodes[i]->next_edges())
      if (e.is_valid() && !in_c[g.index.at(e.function.get())]) {
        inter.push_back(i);
        break;
      }
  }

  // Run C alone: the inputs' edges and every input of the intermediates are captured outputs, so
  // the engine follows no edge out of C and accumulates nothing.
  edge_list captured;
  std::vector<size_t> input_at(inputs.size(), SIZE_MAX);  // input k's entry in `captured`
  for (size_t k = 0; k < in.size(); ++k)
    if (in[k].is_valid() && g.index.count(in[k].function.get())) {
      input_at[k] = captured.size();
      captured.push_back(in[k]);
    }
  const size_t first_inter = captured.size();
  for (size_t i : inter)
    for (uint32_t k = 0; k < g.nodes[i]->num_inputs(); ++k) captured.emplace_back(g.nodes[i], k);
  variable_list got = torch::autograd::Engine::get_default_engine().execute(
      roots, grads, /*keep_graph=*/true, /*create_graph=*/false,
      /*accumulate_grad=*/false, captured);
  PPC_INTERNAL_ASSERT(got.size() == captured.size(), "one gradient per captured edge");

  // The W starts from the intermediates with what flowed into them. Their edges into C are cut,
  // so that the W runs only the weight subgraphs: nothing of C again, no gradient counted twice
  // through an intermediate reached from another.
  for (size_t j = first_inter; j < captured.size(); ++j)
    if (got[j].defined()) {
      m.roots.push_back(std::move(captured[j]));
      m.grads.push_back(std::move(got[j]));
    }
  std::vector<char> is_inter(g.nodes.size(), 0);
  for (size_t i : inter) {
    is_inter[i] = 1;
    for (Edge& e : g.nodes[i]->next_edges())
      if (e.is_valid() && in_c[g.index.at(e.function.get())]) e = Edge();
  }
  // The rest of C has run for the last time: its saved tensors go now, as a full backward's do.
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (in_c[i] && !is_inter[i] && !is_in[i]) g.nodes[i]->release_variables();

  std::unordered_set<const Node*> kept;
  for (const Edge& e : m.roots) kept.insert(e.function.get());
  m.held = Held{distinct_bytes(m.grads), static_cast<int>(m.roots.size()),
                static_cast<int>(kept.size())};
  for (size_t k = 0; k < inputs.size(); ++k)
    if (input_at[k] != SIZE_MAX) out[k] = std::move(got[input_at[k]]);
  return out;
}

at::Tensor AutogradSplit::backward_input(const at::Tensor& output, const at::Tensor& grad_output,
                                         const at::Tensor& input) {
  const std::vector<at::Tensor> in =
      input.defined() ? std::vector<at::Tensor>{input} : std::vector<at::Tensor>{};
  std::vector<at::Tensor> got = backward_input({output}, {grad_output}, in);
  return got.empty() ? at::Tensor() : std::move(got.front());
}

void AutogradSplit::backward_weight() {
  Impl& m = *impl_;
  PPC_INTERNAL_ASSERT(m.pending, "a W without its I");
  // Taken out first: the graph and the gradients are freed when this returns (or throws).
  edge_list roots = std::move(m.roots);
  std::vector<at::Tensor> grads = std::move(m.grads);
  m = Impl{};
  if (roots.empty()) return;
  // Every node reachable from the roots runs (no outputs: as in a full backward), accumulating
  // into the parameters' .grad; the graph's saved tensors are released as it goes.
  torch::autograd::Engine::get_default_engine().execute(roots, grads, /*keep_graph=*/false,
                                                        /*create_graph=*/false,
                                                        /*accumulate_grad=*/true, {});
}

}  // namespace pprt
