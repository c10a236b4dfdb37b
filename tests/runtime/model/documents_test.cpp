// Rows of documents (runtime/data/documents.h: --pack, --pad, --varlen) through pprun's own model:
// a packed row gives each of its documents the loss and the gradients that document gets alone,
// as a plain sequence of its own length through the unchanged model (the path every run without
// documents takes), on every attention path the CPU has: the written-out one (Kernels::Auto),
// SDPA with the documents' block-diagonal mask (Generic, and Fused, which gives a microbatch of
// documents to SDPA since the flash kernels take the causal flag alone), with a sliding window
// too, and with the stages split as a pipeline splits them.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "compiler/layout.h"
#include "runtime/data/documents.h"
#include "runtime/model/stage.h"
#include "runtime/models/llama/builtin.h"
#include "test_model.h"

namespace {

using pprt::ModelConfig;

struct Built {
  pprt::Model model;
  ppc::Layout layout;
  pprt::ModelSetup setup;
  std::unique_ptr<pprt::RankModel> rank;
};

// Every stage of `layout` on one rank; the weights depend on their names, shapes and the seed
// alone (not on seq_len).
std::unique_ptr<Built> build(const std::string& layout, const ModelConfig& c,
                             pprt::Kernels kernels) {
  auto m = std::make_unique<Built>(
      Built{pprt::builtin_model(c, kernels), ppc::parse_layout(layout), {c.vocab, c.seq_len}, {}});
  pprt::ModelContext ctx{&m->model, m->setup, 0.1, 7, at::Device(at::kCPU)};
  m->rank = std::make_unique<pprt::RankModel>(ctx);
  for (int s = 0; s < m->layout.num_stages(); ++s) m->rank->add(m->layout, s);
  return m;
}

// The loss of one microbatch of `rows` through the stages, and every parameter's gradient.
struct Result {
  double loss = 0;
  std::map<std::string, at::Tensor> grads;
};
Result run(Built& m, const at::Tensor& rows) {
  pprt::Tensors x;
  const pprt::MicrobatchShape shape = m.model.shape_of(rows);
  for (auto& stage : m.rank->stages) x = stage->forward(x, rows, shape, 0, nullptr, nullptr);
  x.front().tensor.backward();
  Result r;
  r.loss = x.front().tensor.item<double>();
  for (auto& p : m.rank->store.params()) {
    r.grads[p.name] = p.tensor.grad().clone();
    p.tensor.mutable_grad() = at::Tensor();
  }
  return r;
}

// Documents of the given lengths, their ids from a fixed pattern.
std::vector<std::vector<int64_t>> documents(const std::vector<int>& lengths) {
  std::vector<std::vector<int64_t>> docs;
  int64_t k = 11;
  for (int n : lengths) {
    std::vector<int64_t> d;
    for (int i = 0; i < n; ++i) d.push_back((k = (k * 37 + 5) % 251));
    docs.push_back(d);
  }
  return docs;
}

TEST(Model, PackedDocumentsGiveEachTheLossAndGradientsItGetsAlone) {
  ModelConfig c = rttest::small_config();  // seq_len 16: rows of 17 tokens
  const std::vector<int> lengths = {7, 5, 3, 17, 9, 6};
  const auto docs = documents(lengths);
  // Row 0: documents 0, 1, 2 and two slots of padding; row 1: document 3 (a whole row); row 2:
  // documents 4 and 5, and two of padding.
  const std::vector<std::vector<size_t>> rows_of = {{0, 1, 2}, {3}, {4, 5}};
  std::vector<int64_t> packed;
  for (const auto& ds : rows_of) {
    size_t at = packed.size();
    for (size_t d : ds)
      for (size_t i = 0; i < docs[d].size(); ++i)
        packed.push_back(pprt::document_token(docs[d][i], static_cast<int64_t>(i)));
    while (packed.size() < at + 17) packed.push_back(pprt::padding_token());
  }
  const at::Tensor rows = at::tensor(packed, at::kLong).view({3, 17});
  int64_t targets = 0;  // what the packed loss averages over: n - 1 per document
  for (int n : lengths) targets += n - 1;

  for (const int window : {0, 4})
    for (const auto kernels : {pprt::Kernels::Auto, pprt::Kernels::Generic, pprt::Kernels::Fused}) {
      const std::string layout = "Et|t|L";
      const std::string what = layout + (window ? " window 4" : "") +
                               (kernels == pprt::Kernels::Auto      ? " blocks"
                                : kernels == pprt::Kernels::Generic ? " sdpa"
                                                                    : " fused");
      c.seq_len = 16;
      c.sliding_window = window;
      auto m = build(layout, c, kernels);
      const Result got = run(*m, rows);
      // Each document alone: a plain sequence of its n tokens through a model of seq_len n - 1
      // (the same weights), its loss the mean over its n - 1 targets.
      double want_loss = 0;
      std::map<std::string, at::Tensor> want_grads;
      for (size_t d = 0; d < docs.size(); ++d) {
        ModelConfig alone = c;
        alone.seq_len = static_cast<int>(docs[d].size()) - 1;
        auto a = build(layout, alone, kernels);
        const Result r = run(*a, at::tensor(docs[d], at::kLong).view({1, alone.seq_len + 1}));
        const double n = alone.seq_len;
        want_loss += r.loss * n;
        for (const auto& [name, g] : r.grads)
          want_grads[name] = want_grads.count(name) ? want_grads[name] + g * n : g * n;
      }
      EXPECT_NEAR(got.loss * static_cast<double>(targets), want_loss, 1e-5 * want_loss) << what;
      for (const auto& [name, g] : got.grads) {
        const at::Tensor want = want_grads.at(name);
        const double gap = (g * static_cast<double>(targets) - want).abs().max().item<double>();
        EXPECT_LE(gap, 1e-5 * (want.abs().max().item<double>() + 1e-6))
            << what << ": " << name << " differs by " << gap;
      }
      // The same ids as one plain sequence per row are another loss: the documents mask
      // something.
      const Result plain = run(*m, rows.bitwise_and(pprt::kTokenMask));
      EXPECT_GT(std::fabs(plain.loss - got.loss), 1e-3) << what;
    }
}

}  // namespace
