// A GPT-2-style language model trained by the pprt library (docs/library.md): ordinary LibTorch
// modules, one per layout symbol, and one call that gives the program all of pprun's behaviour
// (plans, launchers, --reference, checkpoints, data parallelism, --data), plus what its hooks add:
// --dtype bf16 (LibTorch's autocast), its parameters checked before a run resumes, and
// --export CKPT DIR --format hf as a Hugging Face GPT2LMHeadModel.
//
//   E  token embedding (tied with the head) + learned positions
//   t  a transformer block: LayerNorm, causal self-attention, LayerNorm, GELU MLP (biases
//      everywhere, residuals around both halves)
//   L  final LayerNorm, the tied head (logits = x wte^T) and the cross-entropy loss
//
// clang-format off
//     ppcompile --layout 'Ett|tt|tt|ttL' --pp 4 --schedule 1F1B --microbatches 8 --emit json -o plan.json
//     gpt2 --plan plan.json --steps 40                  # four ranks on this machine
//     gpt2 --plan plan.json --reference                 # the same model, unpipelined
//     gpt2 --plan plan.json --dtype bf16 --save ckpt    # mixed precision, a checkpoint
//     gpt2 --export ckpt gpt2-hf --format hf            # transformers' GPT2LMHeadModel loads it
// clang-format on
#include <pprt/main.h>
#include <torch/torch.h>

#include <cmath>
#include <string>
#include <vector>

namespace gpt2 {

// The model's width; the vocabulary and the sequence length are the run's (--vocab, --seq-len).
constexpr int64_t kEmbd = 64, kHeads = 4;

// The token embedding's weight, one parameter that E and L both use: LayerInfo::shared gives
// every layer on a rank the same tensor, and keeps the copies on different ranks equal (their
// gradients are summed after each step).
at::Tensor tied_embedding(const pprt::LayerInfo& l) {
  return l.shared("wte.weight", {l.vocab, kEmbd},
                  [](at::Tensor& w) { torch::nn::init::normal_(w, 0.0, 0.02); });
}

struct EmbeddingImpl : torch::nn::Module {
  at::Tensor wte;
  torch::nn::Embedding wpe{nullptr};
  explicit EmbeddingImpl(const pprt::LayerInfo& l) : dtype(l.dtype) {
    wte = register_parameter("wte", tied_embedding(l));
    wpe = register_module("wpe", torch::nn::Embedding(l.seq_len, kEmbd));
    torch::nn::init::normal_(wpe->weight, 0.0, 0.01);
  }
  // ids [b, T] -> hidden [b, T, kEmbd], in the activations' dtype (bf16 under --dtype bf16, where
  // autocast runs the products in bf16 too: the residual stream and the boundaries are bf16).
  at::Tensor forward(const at::Tensor& ids) {
    const at::Tensor pos = torch::arange(ids.size(1), ids.options());
    return (torch::embedding(wte, ids) + wpe(pos)).to(dtype);
  }
  at::ScalarType dtype;
};
TORCH_MODULE(Embedding);

// Causal self-attention, its query, key and value from one matmul.
struct AttentionImpl : torch::nn::Module {
  torch::nn::Linear c_attn{nullptr}, c_proj{nullptr};
  AttentionImpl() {
    c_attn = register_module("c_attn", torch::nn::Linear(kEmbd, 3 * kEmbd));
    c_proj = register_module("c_proj", torch::nn::Linear(kEmbd, kEmbd));
  }
  at::Tensor forward(const at::Tensor& x) {
    const int64_t b = x.size(0), T = x.size(1), hd = kEmbd / kHeads;
    auto heads = [&](const at::Tensor& t) { return t.view({b, T, kHeads, hd}).transpose(1, 2); };
    const std::vector<at::Tensor> qkv = c_attn(x).split(kEmbd, -1);
    const at::Tensor y = at::scaled_dot_product_attention(
        heads(qkv[0]), heads(qkv[1]), heads(qkv[2]), {}, 0.0, /*is_causal=*/true);
    return c_proj(y.transpose(1, 2).reshape({b, T, kEmbd}));
  }
};
TORCH_MODULE(Attention);

struct MlpImpl : torch::nn::Module {
  torch::nn::Linear c_fc{nullptr}, c_proj{nullptr};
  MlpImpl() {
    c_fc = register_module("c_fc", torch::nn::Linear(kEmbd, 4 * kEmbd));
    c_proj = register_module("c_proj", torch::nn::Linear(4 * kEmbd, kEmbd));
  }
  at::Tensor forward(const at::Tensor& x) { return c_proj(torch::gelu(c_fc(x), "tanh")); }
};
TORCH_MODULE(Mlp);

struct BlockImpl : torch::nn::Module {
  torch::nn::LayerNorm ln_1{nullptr}, ln_2{nullptr};
  Attention attn{nullptr};
  Mlp mlp{nullptr};
  BlockImpl() {
    ln_1 = register_module("ln_1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({kEmbd})));
    attn = register_module("attn", Attention());
    ln_2 = register_module("ln_2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({kEmbd})));
    mlp = register_module("mlp", Mlp());
  }
  // hidden [b, T, kEmbd] -> the same
  at::Tensor forward(const at::Tensor& x) {
    const at::Tensor h = x + attn(ln_1(x));
    return h + mlp(ln_2(h));
  }
};
TORCH_MODULE(Block);

struct HeadImpl : torch::nn::Module {
  torch::nn::LayerNorm ln_f{nullptr};
  at::Tensor wte;
  explicit HeadImpl(const pprt::LayerInfo& l) {
    ln_f = register_module("ln_f", torch::nn::LayerNorm(torch::nn::LayerNormOptions({kEmbd})));
    wte = register_parameter("wte", tied_embedding(l));
  }
  // hidden [b, T, kEmbd] -> the microbatch's mean cross-entropy (a scalar; its logits in fp32)
  at::Tensor forward(const at::Tensor& x, const pprt::Microbatch& mb) {
    const at::Tensor logits = torch::nn::functional::linear(ln_f(x), wte).to(at::kFloat);
    return torch::nn::functional::cross_entropy(logits.flatten(0, 1), mb.targets().flatten());
  }
};
TORCH_MODULE(Head);

// Every parameter, with its name in a Hugging Face GPT2LMHeadModel (transformers'), whose Conv1D
// layers hold their weights transposed ([in, out]); the head is tied to wte there too.
std::vector<pprt::HfTensor> tensors(const pprt::LayoutInfo& layout, const pprt::ModelSetup& s) {
  const int64_t E = kEmbd;
  std::vector<pprt::HfTensor> out = {
      {"wte.weight", "transformer.wte.weight", {s.vocab, E}},
      {"embed.0.wpe.weight", "transformer.wpe.weight", {s.seq_len, E}}};
  for (int i = 0; i < layout.count('t'); ++i) {
    const std::string ours = "h." + std::to_string(i) + ".";
    const std::string theirs = "transformer." + ours;
    auto add = [&](const std::string& name, std::vector<int64_t> shape, bool transposed = false) {
      out.push_back({ours + name, theirs + name, std::move(shape), transposed});
    };
    add("ln_1.weight", {E});
    add("ln_1.bias", {E});
    add("attn.c_attn.weight", {3 * E, E}, true);
    add("attn.c_attn.bias", {3 * E});
    add("attn.c_proj.weight", {E, E}, true);
    add("attn.c_proj.bias", {E});
    add("ln_2.weight", {E});
    add("ln_2.bias", {E});
    add("mlp.c_fc.weight", {4 * E, E}, true);
    add("mlp.c_fc.bias", {4 * E});
    add("mlp.c_proj.weight", {E, 4 * E}, true);
    add("mlp.c_proj.bias", {E});
  }
  out.push_back({"head.0.ln_f.weight", "transformer.ln_f.weight", {E}});
  out.push_back({"head.0.ln_f.bias", "transformer.ln_f.bias", {E}});
  return out;
}

pprt::HfFormat hugging_face(const pprt::LayoutInfo& layout, const pprt::ModelSetup& s,
                            const std::string& dtype) {
  pprt::HfFormat f;
  f.architecture = "GPT2LMHeadModel";
  f.layers = layout.count('t');
  f.description = "n_embd " + std::to_string(kEmbd) + ", n_head " + std::to_string(kHeads);
  f.config = {{"architectures", {f.architecture}},
              {"model_type", "gpt2"},
              {"vocab_size", s.vocab},
              {"n_positions", s.seq_len},
              {"n_embd", kEmbd},
              {"n_layer", f.layers},
              {"n_head", kHeads},
              {"n_inner", 4 * kEmbd},
              {"activation_function", "gelu_new"},  // GELU's tanh approximation
              {"layer_norm_epsilon", 1e-5},         // torch::nn::LayerNorm's
              {"resid_pdrop", 0.0},
              {"embd_pdrop", 0.0},
              {"attn_pdrop", 0.0},
              {"scale_attn_weights", true},
              {"tie_word_embeddings", true},
              {"dtype", dtype}};
  f.tensors = tensors(layout, s);
  return f;
}

pprt::Model model() {
  pprt::Model m("gpt2");
  m.layer(
      'E', "embed", [](const pprt::LayerInfo& l) { return pprt::make_layer(Embedding(l)); },
      [](const std::vector<int64_t>& ids) {
        return std::vector<int64_t>{ids[0], ids[1], kEmbd};
      });
  m.layer(
      't', "h", [](const pprt::LayerInfo&) { return pprt::make_layer(Block()); },
      [](const std::vector<int64_t>& x) { return x; });
  m.layer(
      'L', "head", [](const pprt::LayerInfo& l) { return pprt::make_layer(Head(l)); },
      [](const std::vector<int64_t>&) { return std::vector<int64_t>{}; });
  // The hooks (docs/library.md, "What a model may add").
  m.mixed_precision(pprt::MixedPrecision::Autocast)
      .parameters([](const pprt::LayoutInfo& layout, const pprt::ModelSetup& s) {
        std::vector<pprt::ParamShape> out;
        for (const pprt::HfTensor& t : tensors(layout, s)) out.push_back({t.name, t.shape});
        return out;
      })
      .hugging_face(hugging_face);
  return m;
}

}  // namespace gpt2

int main(int argc, char** argv) {
  return pprt::main(argc, argv, gpt2::model());
}
