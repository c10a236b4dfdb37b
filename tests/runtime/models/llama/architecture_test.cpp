// The model without LibTorch (runtime/models/llama/architecture.h): parameters of MTP and tied
// embeddings, what crosses each stage boundary, which ranks share which parameters.

#include <gtest/gtest.h>
#include <algorithm>

#include "compiler/layout.h"
#include "runtime/models/llama/architecture.h"
#include "runtime/models/llama/config.h"
#include "test_plans.h"

namespace {

std::vector<std::string> names(const std::vector<pprt::ParamSpec>& ps) {
  std::vector<std::string> out;
  for (const auto& p : ps) out.push_back(p.name);
  return out;
}

TEST(Architecture, ParametersOfMtpAndTiedEmbeddings) {
  pprt::ModelConfig c;
  const auto base = pprt::count_parameters(c, ppc::parse_layout("EtL"));
  const int64_t H = c.hidden, V = c.vocab;
  const int64_t decoder = 2 * H + (4 + 2 + 2) * 16 * H + H * 4 * 16 + 3 * c.ffn * H;
  // An MTP depth: two norms, the 2H -> H projection, a decoder layer, a final norm; it uses the
  // embedding of E (one parameter, not two).
  EXPECT_EQ(pprt::count_parameters(c, ppc::parse_layout("EtmL")) - base,
            3 * H + 2 * H * H + decoder);
  c.tie_embeddings = true;
  EXPECT_EQ(pprt::count_parameters(c, ppc::parse_layout("EtL")), base - V * H);
  const auto mtp = names(pprt::params_of(c, pprt::number_layers(ppc::parse_layout("EtmL"))[0], 1));
  EXPECT_EQ(std::count(mtp.begin(), mtp.end(), "embed.weight"), 1);
  EXPECT_EQ(std::count(mtp.begin(), mtp.end(), "head.out.weight"), 0);
  EXPECT_EQ(std::count(mtp.begin(), mtp.end(), "mtp.0.eh_proj.weight"), 1);
  EXPECT_EQ(std::count(mtp.begin(), mtp.end(), "mtp.0.layer.attn.wq.weight"), 1);
}

TEST(Architecture, WhatCrossesEachBoundary) {
  using K = pprt::Boundary::Kind;
  const auto specs = pprt::stage_specs(ppc::parse_layout("|Et|tm|m|L|"), 0.1);
  ASSERT_EQ(specs.size(), 6u);
  std::vector<std::pair<K, int>> in;
  for (const auto& s : specs) in.push_back({s.in.kind, s.in.streams});
  EXPECT_EQ(in, (std::vector<std::pair<K, int>>{{K::Tokens, 0},
                                                {K::Tokens, 0},
                                                {K::Hidden, 1},
                                                {K::Hidden, 2},
                                                {K::Hidden, 3},
                                                {K::Loss, 0}}));
  EXPECT_EQ(specs[4].out.kind, K::Loss);
  pprt::ModelConfig c;
  EXPECT_EQ(specs[3].in.shape(4, c), (std::vector<int64_t>{2, 4, c.seq_len, c.hidden}));
  EXPECT_EQ(specs[0].in.shape(4, c), (std::vector<int64_t>{1}));
  EXPECT_TRUE(specs[5].in.shape(4, c).empty());
  EXPECT_EQ(specs[0].mtp_depths, 2);
}

TEST(Architecture, SharedGroupsOfMtpTiedEmbeddingsAndDualPipe) {
  pprt::ModelConfig c;
  // DeepSeek-V3's layout at pp 16, vpp 2: E on rank 0, m (stage 30) on rank 14, L on rank 15.
  const ppc::Plan v3 = rttest::compile("Et*3|(tt|)*29,m|L", 16, "Interleaved1F1B", 16);
  auto groups = pprt::shared_groups(v3, c);
  ASSERT_EQ(groups.size(), 1u);
  EXPECT_EQ(groups[0].ranks, (std::vector<int>{0, 14}));
  EXPECT_EQ(groups[0].names, (std::vector<std::string>{"embed.weight"}));
  c.tie_embeddings = true;
  groups = pprt::shared_groups(v3, c);
  ASSERT_EQ(groups.size(), 1u);
  EXPECT_EQ(groups[0].ranks, (std::vector<int>{0, 14, 15}));
  // m and E on one rank: nothing to share until the head is tied.
  c.tie_embeddings = false;
  EXPECT_TRUE(
      pprt::shared_groups(rttest::compile("Et|tt|t,m|L", 2, "Interleaved1F1B", 4), c).empty());
  // DualPipe: layout stage k runs on ranks k and pp-1-k; every parameter has two copies.
  const ppc::Plan dual = rttest::compile("Et|tt|tt|tL", 4, "DualPipe", 8);
  groups = pprt::shared_groups(dual, c);
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[0].ranks, (std::vector<int>{0, 3}));
  EXPECT_EQ(groups[1].ranks, (std::vector<int>{1, 2}));
  size_t shared = 0;
  for (const auto& g : groups) shared += g.names.size();
  EXPECT_EQ(shared, pprt::model_params(c, dual.layout).size());
  EXPECT_TRUE(std::is_sorted(groups[0].names.begin(), groups[0].names.end()));
}

}  // namespace
