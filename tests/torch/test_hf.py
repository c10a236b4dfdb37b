"""Hugging Face checkpoints in and out of pprun, against transformers itself (docs/huggingface.md).

Tiny random models are made and saved by transformers (save_pretrained); their weights are drawn
wider than transformers' initialisation so that the loss depends on every one of them. For each:
  - pprun --init-from DIR: its loss on fixed tokens (a token file of exactly one sequence, so
    every row of a step is that sequence) equals transformers' loss on them within 1e-5
    relative, in fp32, with --reference and pipelined (1F1B, Interleaved1F1B, ZB-H1 at pp 2 and
    4 across the models); so does its evaluation-only run (--eval-only) on them;
  - families and fields: LlamaForCausalLM untied fp32 and tied bf16, MistralForCausalLM sharded
    (model.safetensors.index.json), Llama with head_dim != hidden/heads and rope_scaling llama3,
    Qwen2ForCausalLM (q/k/v biases) untied fp32 and tied bf16; sliding windows shorter than the
    sequence: Mistral's on every layer, Qwen2's on the layers from max_window_layers on;
  - export: 5 steps of training from a Llama, a tied Qwen2, a Mistral and a Qwen2 with sliding
    windows shorter than the sequence, with --eval-data, --save, --export --format hf:
    transformers loads the directory as the family it came from with no missing or unexpected
    keys, its tensors are the checkpoint's (fp32, bit for bit), sharded with the index above
    --max-shard-size; its config.json keeps the source's fields (the window's, bos_token_id,
    eos_token_id, ...), or the family's defaults where the source had none; transformers' loss on
    the held-out tokens (longer than the window) equals pprun's own eval_loss after the last step;
    bf16 export loads too; the single-file --export keeps working;
  - refusals (exit 2, one line naming the file and the tensor or field, nothing run): a layout
    with another layer count, architectures and model_type of two families, an attention type
    pprun does not have, a mixture-of-experts field, another rope_scaling type, a missing tensor,
    a wrong shape, a truncated shard;
  - mixtures of experts (MixtureOfExperts): MixtralForCausalLM and Qwen2MoeForCausalLM (its
    shared expert under its sigmoid gate, norm_topk_prob both ways, dense layers from
    mlp_only_layers and decoder_sparse_step): pprun's loss on the same tokens equals transformers'
    within 1e-5 relative, with --reference and pipelined (1F1B, ZB-H1); 5 steps of training then
    --export --format hf loads in transformers as the same family with no missing or unexpected
    keys, its experts' tensors are the checkpoint's, and transformers' loss on held-out tokens
    equals pprun's eval_loss; a model Hugging Face cannot hold (a sigmoid router) is refused;
  - a program of the library exports its own model through the same hook
    (pprt::Model::hugging_face): examples/gpt2, trained 5 steps, --export --format hf loads as
    transformers' GPT2LMHeadModel (its Conv1D weights transposed) with no missing or unexpected
    keys, and transformers' loss on the held-out tokens equals the example's eval_loss; in bf16
    too.

Environment: PPCOMPILE, PPRUN, GPT2 (ctest sets them). Argument: the test class to run (ctest runs
one per process, in parallel).
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TQDM_DISABLE", "1")
import numpy as np  # noqa: E402
import torch
import transformers
from safetensors.torch import load_file, save_file

PPCOMPILE = os.environ.get("PPCOMPILE", "build/tools/ppcompile/ppcompile")
PPRUN = os.environ.get("PPRUN", "build/tools/pprun/pprun")
GPT2 = os.environ.get("GPT2", "build/examples/gpt2/gpt2")
T = 16  # sequence length
LAYERS = 4
WINDOW = 6  # a sliding window shorter than the sequence
transformers.logging.set_verbosity_error()



def run(cmd, expect=0):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if p.returncode != expect:
        raise AssertionError(f"{' '.join(cmd)} exited {p.returncode} (expected {expect}):\n"
                             f"{p.stdout}\n{p.stderr}")
    return p


def make_model(directory, family="llama", tied=False, dtype=torch.float32, seed=0,
               max_shard_size=None, **extra):
    """A random transformers model saved in `directory`; returns it in fp32 as saved."""
    torch.manual_seed(seed)
    common = dict(hidden_size=32, intermediate_size=48, num_hidden_layers=LAYERS,
                  num_attention_heads=4, num_key_value_heads=2, vocab_size=97,
                  tie_word_embeddings=tied, max_position_embeddings=64, rms_norm_eps=1e-5)
    common.update(extra)
    classes = {"llama": (transformers.LlamaForCausalLM, transformers.LlamaConfig),
               "mistral": (transformers.MistralForCausalLM, transformers.MistralConfig),
               "qwen2": (transformers.Qwen2ForCausalLM, transformers.Qwen2Config),
               "mixtral": (transformers.MixtralForCausalLM, transformers.MixtralConfig),
               "qwen2_moe": (transformers.Qwen2MoeForCausalLM, transformers.Qwen2MoeConfig)}
    model_class, config_class = classes[family]
    model = model_class(config_class(**common))
    with torch.no_grad():  # biases (Qwen2's q/k/v) too
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1 + 0.2 * torch.randn_like(p))
            else:
                p.normal_(0, 0.25)
    model = model.to(dtype)
    kwargs = {"max_shard_size": max_shard_size} if max_shard_size else {}
    model.save_pretrained(directory, **kwargs)
    return transformers.AutoModelForCausalLM.from_pretrained(directory,
                                                             dtype=torch.float32).eval()


def hf_loss(model, ids):
    with torch.no_grad():
        x = torch.tensor(ids, dtype=torch.long)[None]
        return model(x, labels=x).loss.item()


def tokens(path, seed, vocab=97):
    ids = np.random.default_rng(seed).integers(0, vocab, T + 1)
    ids.astype("<u4").tofile(path)
    return ids


def metrics_lines(path):
    """The lines of a --metrics file, parsed; a last line without its newline (a run killed while
    writing it) is not one (docs/pprun.md, Outputs)."""
    with open(path) as f:
        return [json.loads(line) for line in f if line.endswith("\n")]


def first_loss(metrics):
    return [j["loss"] for j in metrics_lines(metrics) if "loss" in j][0]


class Base(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.d = self.tmp.name
        self.data = os.path.join(self.d, "tokens.u32")
        self.ids = tokens(self.data, 1)

    def tearDown(self):
        self.tmp.cleanup()

    def plan(self, layout, pp, schedule, microbatches):
        path = os.path.join(self.d, f"{schedule}-{pp}.json")
        run([PPCOMPILE, "--layout", layout, "--pp", str(pp), "--schedule", schedule,
             "--microbatches", str(microbatches), "--emit", "json", "-o", path])
        return path

    def pprun_loss(self, model_dir, how, data=None, extra=()):
        """pprun's loss at step 0 (the weights as loaded) on the token file."""
        metrics = os.path.join(self.d, "m.jsonl")
        if how == "reference":
            where = ["--reference", "--layout", "Et" + "t" * (LAYERS - 2) + "|tL",
                     "--microbatches", "2"]
        else:
            where = ["--plan", self.plan(*how)]
        mbs = 2 if how == "reference" else how[3]
        run([PPRUN, *where, "--init-from", model_dir, "--data", data or self.data,
             "--data-format", "uint32", "--seq-len", str(T), "--steps", "1", "--global-batch",
             str(mbs), "--metrics", metrics, "--progress", "none", "--threads", "1", *extra])
        return first_loss(metrics)

    def pprun_eval_only(self, model_dir, how, data=None):
        """pprun's --eval-only loss of the model as loaded, on the token file."""
        metrics = os.path.join(self.d, "e.jsonl")
        if how == "reference":
            where = ["--reference", "--layout", "Et" + "t" * (LAYERS - 2) + "|tL",
                     "--microbatches", "2"]
        else:
            where = ["--plan", self.plan(*how)]
        mbs = 2 if how == "reference" else how[3]
        run([PPRUN, *where, "--init-from", model_dir, "--eval-data", data or self.data,
             "--data-format", "uint32", "--seq-len", str(T), "--eval-only", "--global-batch",
             str(mbs), "--metrics", metrics, "--progress", "none", "--threads", "1"])
        lines = metrics_lines(metrics)
        self.assertEqual(len(lines), 1)
        self.assertNotIn("loss", lines[0])  # no step trained
        return lines[0]["eval_loss"]

    def assertClose(self, got, want, what):
        self.assertLess(abs(got - want), 1e-5 * abs(want), f"{what}: pprun {got}, transformers "
                        f"{want}")


# Where each model is checked: (layout, pp, schedule, microbatches).
PIPE2_1F1B = ("Ett|ttL", 2, "1F1B", 2)
PIPE4_INTERLEAVED = ("E|t|t|t|t|||L", 4, "Interleaved1F1B", 4)
PIPE4_ZB = ("Et|t|t|tL", 4, "ZB-H1", 4)
PIPE2_INTERLEAVED = ("Et|t|t|tL", 2, "Interleaved1F1B", 2)
PIPE2_ZB = ("Ett|ttL", 2, "ZB-H1", 3)


class LossEqualsTransformers(Base):
    def check(self, model_dir, model, places, eval_only=()):
        want = hf_loss(model, self.ids)
        for how in places:
            with self.subTest(how=how):
                self.assertClose(self.pprun_loss(model_dir, how), want, f"{model_dir} {how}")
        for how in eval_only:
            with self.subTest(how=how, eval_only=True):
                self.assertClose(self.pprun_eval_only(model_dir, how), want,
                                 f"{model_dir} {how} --eval-only")

    def test_llama_untied_fp32(self):
        d = os.path.join(self.d, "llama")
        self.check(d, make_model(d), ["reference", PIPE2_1F1B, PIPE4_INTERLEAVED, PIPE4_ZB],
                   eval_only=["reference", PIPE4_ZB])

    def assertWindowMatters(self, model_dir, model, **full_attention):
        """The window changes transformers' loss on these tokens (else the test proves nothing):
        the same weights with `full_attention`'s config give another loss."""
        full = transformers.AutoModelForCausalLM.from_pretrained(
            model_dir, dtype=torch.float32, **full_attention).eval()
        windowed = hf_loss(model, self.ids)
        self.assertGreater(abs(hf_loss(full, self.ids) - windowed), 1e-3 * windowed)

    def test_mistral_sliding_window(self):
        d = os.path.join(self.d, "mistral-window")
        m = make_model(d, family="mistral", sliding_window=WINDOW)
        self.check(d, m, ["reference", PIPE2_1F1B, PIPE4_ZB], eval_only=[PIPE2_INTERLEAVED])
        self.assertWindowMatters(d, m, sliding_window=None)

    def test_qwen2_sliding_window_on_some_layers(self):
        d = os.path.join(self.d, "qwen2-window")
        m = make_model(d, family="qwen2", use_sliding_window=True, sliding_window=WINDOW,
                       max_window_layers=2)
        with open(os.path.join(d, "config.json")) as f:
            self.assertEqual(json.load(f)["layer_types"], ["full_attention"] * 2 +
                             ["sliding_attention"] * 2)
        self.check(d, m, ["reference", PIPE4_INTERLEAVED, PIPE2_ZB], eval_only=["reference"])
        self.assertWindowMatters(d, m, use_sliding_window=False,
                                 layer_types=["full_attention"] * LAYERS)

    def test_llama_tied_bf16(self):
        d = os.path.join(self.d, "llama-tied")
        m = make_model(d, tied=True, dtype=torch.bfloat16)
        with open(os.path.join(d, "config.json")) as f:
            self.assertEqual(json.load(f)["dtype"], "bfloat16")
        self.check(d, m, ["reference", PIPE2_INTERLEAVED, PIPE4_ZB])

    def test_mistral_sharded(self):
        d = os.path.join(self.d, "mistral")
        m = make_model(d, family="mistral", max_shard_size="20KB")
        self.assertTrue(os.path.exists(os.path.join(d, "model.safetensors.index.json")))
        self.check(d, m, ["reference", PIPE2_ZB, PIPE4_INTERLEAVED])

    def test_qwen2_untied_fp32(self):
        d = os.path.join(self.d, "qwen2")
        m = make_model(d, family="qwen2")
        with open(os.path.join(d, "config.json")) as f:
            self.assertEqual(json.load(f)["architectures"], ["Qwen2ForCausalLM"])
        self.assertIn("model.layers.3.self_attn.v_proj.bias",
                      load_file(os.path.join(d, "model.safetensors")))
        self.check(d, m, ["reference", PIPE2_1F1B, PIPE4_INTERLEAVED, PIPE4_ZB])

    def test_qwen2_tied_bf16(self):
        d = os.path.join(self.d, "qwen2-tied")
        m = make_model(d, family="qwen2", tied=True, dtype=torch.bfloat16)
        self.check(d, m, ["reference", PIPE2_INTERLEAVED, PIPE4_ZB])

    def test_llama_head_dim_and_llama3_rope(self):
        d = os.path.join(self.d, "llama3")
        m = make_model(d, head_dim=16, rope_theta=500000.0,
                       rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                     "high_freq_factor": 4.0,
                                     "original_max_position_embeddings": 32})
        with open(os.path.join(d, "config.json")) as f:
            cfg = json.load(f)
        self.assertEqual(cfg["rope_parameters"]["rope_type"], "llama3")
        self.assertEqual(cfg["head_dim"], 16)
        self.check(d, m, ["reference", PIPE2_1F1B])


MOE_MIXTRAL = dict(num_local_experts=4, num_experts_per_tok=2)
MOE_QWEN2 = dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16,
                 shared_expert_intermediate_size=24)


class MixtureOfExperts(Base):
    def check(self, model_dir, model, places):
        want = hf_loss(model, self.ids)
        for how in places:
            with self.subTest(how=how):
                self.assertClose(self.pprun_loss(model_dir, how), want, f"{model_dir} {how}")

    def test_mixtral(self):
        d = os.path.join(self.d, "mixtral")
        m = make_model(d, family="mixtral", **MOE_MIXTRAL)
        self.assertIn("model.layers.0.block_sparse_moe.experts.3.w2.weight",
                      load_file(os.path.join(d, "model.safetensors")))
        self.check(d, m, ["reference", PIPE2_1F1B, PIPE4_ZB])

    def test_qwen2_moe(self):
        d = os.path.join(self.d, "qwen2-moe")
        m = make_model(d, family="qwen2_moe", **MOE_QWEN2)
        self.assertIn("model.layers.1.mlp.shared_expert_gate.weight",
                      load_file(os.path.join(d, "model.safetensors")))
        self.check(d, m, ["reference", PIPE2_1F1B, PIPE4_ZB])

    def test_qwen2_moe_dense_layers_and_normalised_weights(self):
        # Layer 0 dense (mlp_only_layers), and layer 2 (decoder_sparse_step 2: layers 1 and 3
        # have experts); the top-k weights normalised.
        d = os.path.join(self.d, "qwen2-moe-dense")
        m = make_model(d, family="qwen2_moe", mlp_only_layers=[0], decoder_sparse_step=2,
                       norm_topk_prob=True, **MOE_QWEN2)
        files = load_file(os.path.join(d, "model.safetensors"))
        self.assertIn("model.layers.2.mlp.gate_proj.weight", files)
        self.assertIn("model.layers.3.mlp.gate.weight", files)
        self.check(d, m, ["reference", PIPE2_ZB])

    def export(self, family, model_class, pairs, **extra):
        """5 steps from a Hugging Face MoE model, then --export --format hf, loaded back."""
        src = os.path.join(self.d, family)
        make_model(src, family=family, **extra)
        train = os.path.join(self.d, "train.u32")
        np.random.default_rng(2).integers(0, 97, 400).astype("<u4").tofile(train)
        held = os.path.join(self.d, "held.u32")
        held_ids = np.random.default_rng(7).integers(0, 97, 8 * T + 1)
        held_ids.astype("<u4").tofile(held)
        ckpt = os.path.join(self.d, "ckpt")
        metrics = os.path.join(self.d, "train.jsonl")
        run([PPRUN, "--plan", self.plan(*PIPE2_ZB[:3], 2), "--init-from", src, "--data", train,
             "--data-format", "uint32", "--seq-len", str(T), "--steps", "5", "--global-batch",
             "4", "--save", ckpt, "--progress", "none", "--threads", "1", "--eval-data", held,
             "--metrics", metrics])
        lines = metrics_lines(metrics)
        evals = [j["eval_loss"] for j in lines if "eval_loss" in j]
        self.assertEqual(len(evals), 1)
        self.assertIn("load_balancing_loss", lines[0])
        out = os.path.join(self.d, "exported")
        p = run([PPRUN, "--export", ckpt, out, "--format", "hf"])
        self.assertIn(model_class.__name__, p.stdout)
        model, info = transformers.AutoModelForCausalLM.from_pretrained(
            out, dtype=torch.float32, output_loading_info=True)
        self.assertIsInstance(model, model_class)
        for k in ("missing_keys", "unexpected_keys", "mismatched_keys"):
            self.assertFalse(info[k], f"{k}: {info[k]}")
        with open(os.path.join(src, "config.json")) as f:
            source_config = json.load(f)
        with open(os.path.join(out, "config.json")) as f:
            exported_config = json.load(f)
        for k, v in source_config.items():
            if k != "transformers_version":
                self.assertEqual(exported_config.get(k, "(missing)"), v, k)
        # The tensors are the checkpoint's (transformers holds each layer's experts as one
        # tensor: expert e's rows of it).
        single = os.path.join(self.d, "model.safetensors")
        run([PPRUN, "--export", ckpt, single])
        ours, theirs = load_file(single), model.state_dict()
        original = load_file(os.path.join(src, "model.safetensors"))
        for a, b, pick, file_name in pairs:
            self.assertTrue(torch.equal(ours[a], pick(theirs[b])), a)
            self.assertFalse(torch.equal(ours[a], original[file_name]), f"training changed no {a}")
        windows = torch.tensor(np.stack([held_ids[i * T:i * T + T + 1] for i in range(8)]),
                               dtype=torch.long)
        with torch.no_grad():
            want = model.eval()(windows, labels=windows).loss.item()
        self.assertClose(evals[-1], want, f"{family} eval_loss")

    def test_export_mixtral(self):
        F = 48  # intermediate_size: each expert's width
        self.export("mixtral", transformers.MixtralForCausalLM, [
            ("layers.1.mlp.router.weight", "model.layers.1.mlp.gate.weight", lambda t: t,
             "model.layers.1.block_sparse_moe.gate.weight"),
            ("layers.3.mlp.experts.2.w2.weight", "model.layers.3.mlp.experts.down_proj",
             lambda t: t[2], "model.layers.3.block_sparse_moe.experts.2.w2.weight"),
            ("layers.0.mlp.experts.1.w3.weight", "model.layers.0.mlp.experts.gate_up_proj",
             lambda t: t[1][F:], "model.layers.0.block_sparse_moe.experts.1.w3.weight")],
            **MOE_MIXTRAL)

    def test_export_qwen2_moe(self):
        self.export("qwen2_moe", transformers.Qwen2MoeForCausalLM, [
            ("layers.1.mlp.shared_gate.weight", "model.layers.1.mlp.shared_expert_gate.weight",
             lambda t: t, "model.layers.1.mlp.shared_expert_gate.weight"),
            ("layers.1.mlp.experts.3.w1.weight", "model.layers.1.mlp.experts.gate_up_proj",
             lambda t: t[3][:16], "model.layers.1.mlp.experts.3.gate_proj.weight"),
            ("layers.0.mlp.w2.weight", "model.layers.0.mlp.down_proj.weight", lambda t: t,
             "model.layers.0.mlp.down_proj.weight")],
            mlp_only_layers=[0], **MOE_QWEN2)

    def test_refuses_what_hugging_face_cannot_hold(self):
        src = os.path.join(self.d, "mixtral")
        make_model(src, family="mixtral", **MOE_MIXTRAL)
        with open(os.path.join(src, "config.json")) as f:
            cfg = json.load(f)
        cfg["router_jitter_noise"] = 0.1
        with open(os.path.join(src, "config.json"), "w") as f:
            json.dump(cfg, f)
        p = run([PPRUN, "--reference", "--layout", "Ettt|tL", "--microbatches", "2", "--init-from",
                 src, "--steps", "1", "--seq-len", str(T)], expect=2)
        self.assertIn("router_jitter_noise", p.stderr)
        self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)
        # A sigmoid router (DeepSeek-V3's): no Hugging Face family pprun writes has it.
        cfgfile = os.path.join(self.d, "sigmoid.json")
        with open(cfgfile, "w") as f:
            json.dump({"hidden": 32, "heads": 4, "kv_heads": 2, "ffn": 48, "vocab": 97,
                       "seq_len": T, "experts": 4, "router_score": "sigmoid"}, f)
        ckpt = os.path.join(self.d, "ckpt")
        run([PPRUN, "--reference", "--layout", "Ett|tL", "--config", cfgfile, "--steps", "1",
             "--global-batch", "2", "--microbatches", "2", "--save", ckpt, "--progress", "none"])
        p = run([PPRUN, "--export", ckpt, os.path.join(self.d, "out"), "--format", "hf"],
                expect=2)
        self.assertIn("sigmoid router", p.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.d, "out")))


class Export(Base):
    """5 steps of training from a Hugging Face model, evaluated on held-out tokens by pprun
    (--eval-data), then --export --format hf: transformers loads the directory with no missing,
    unexpected or mismatched keys, its tensors are the checkpoint's bit for bit, and transformers'
    loss on the held-out tokens equals pprun's own eval_loss after the last step within 1e-5
    relative (the issue's proof)."""

    def train_export_load(self, family, model_class, tied=False, **extra):
        src = os.path.join(self.d, family)
        make_model(src, family=family, tied=tied, **extra)
        train = os.path.join(self.d, "train.u32")
        np.random.default_rng(2).integers(0, 97, 400).astype("<u4").tofile(train)
        # Held out: 8 sequences of T+1 tokens at stride T (pprun's evaluation windows), two
        # global batches of 4 (the default --eval-batches).
        held = os.path.join(self.d, "held.u32")
        held_ids = np.random.default_rng(7).integers(0, 97, 8 * T + 1)
        held_ids.astype("<u4").tofile(held)
        ckpt = os.path.join(self.d, "ckpt")
        metrics = os.path.join(self.d, "train.jsonl")
        p = run([PPRUN, "--plan", self.plan(*PIPE2_ZB[:3], 2), "--init-from", src, "--data",
                 train, "--data-format", "uint32", "--seq-len", str(T), "--steps", "5",
                 "--global-batch", "4", "--save", ckpt, "--progress", "none", "--threads", "1",
                 "--eval-data", held, "--metrics", metrics])
        self.assertIn("2 batches of 4 sequences", p.stdout)
        evals = [(j["step"], j["eval_loss"]) for j in metrics_lines(metrics) if "eval_loss" in j]
        self.assertEqual([s for s, _ in evals], [5])
        out = os.path.join(self.d, "exported")
        p = run([PPRUN, "--export", ckpt, out, "--format", "hf", "--max-shard-size", "30KB"])
        self.assertIn(model_class.__name__, p.stdout)
        self.assertTrue(os.path.exists(os.path.join(out, "model.safetensors.index.json")))
        model, info = transformers.AutoModelForCausalLM.from_pretrained(
            out, dtype=torch.float32, output_loading_info=True)
        self.assertIsInstance(model, model_class)
        for k in ("missing_keys", "unexpected_keys", "mismatched_keys"):
            self.assertFalse(info[k], f"{k}: {info[k]}")
        # Every field of the source's config.json is kept, with its value (but the file's own
        # bookkeeping).
        with open(os.path.join(src, "config.json")) as f:
            source_config = json.load(f)
        with open(os.path.join(out, "config.json")) as f:
            exported_config = json.load(f)
        for k, v in source_config.items():
            if k != "transformers_version":
                self.assertEqual(exported_config.get(k, "(missing)"), v, k)
        # The tensors are the checkpoint's, bit for bit.
        single = os.path.join(self.d, "model.safetensors")
        run([PPRUN, "--export", ckpt, single])
        ours = load_file(single)
        theirs = model.state_dict()
        self.assertEqual(len(ours) + (1 if tied else 0), len(theirs))
        pairs = [("embed.weight", "model.embed_tokens.weight"),
                 ("layers.3.mlp.w2.weight", "model.layers.3.mlp.down_proj.weight")]
        if family == "qwen2":
            pairs += [("layers.1.attn.wq.bias", "model.layers.1.self_attn.q_proj.bias"),
                      ("layers.2.attn.wv.bias", "model.layers.2.self_attn.v_proj.bias")]
        for a, b in pairs:
            self.assertTrue(torch.equal(ours[a], theirs[b]), a)
        original = load_file(os.path.join(src, "model.safetensors"))
        for a, b in pairs:
            self.assertFalse(torch.equal(ours[a], original[b]), f"training changed no {a}")
        # transformers' loss on the held-out tokens equals pprun's own eval loss after step 5.
        windows = torch.tensor(np.stack([held_ids[i * T:i * T + T + 1] for i in range(8)]),
                               dtype=torch.long)
        with torch.no_grad():
            want = model.eval()(windows, labels=windows).loss.item()
        self.assertClose(evals[-1][1], want, f"{family} eval_loss")
        return ckpt, out, theirs

    def test_llama(self):
        ckpt, out, theirs = self.train_export_load("llama", transformers.LlamaForCausalLM)
        # bf16 export loads as bf16.
        out16 = os.path.join(self.d, "exported16")
        run([PPRUN, "--export", ckpt, out16, "--format", "hf", "--dtype", "bf16"])
        m16, info16 = transformers.AutoModelForCausalLM.from_pretrained(out16,
                                                                        output_loading_info=True)
        self.assertFalse(info16["missing_keys"] or info16["unexpected_keys"])
        self.assertEqual(m16.model.embed_tokens.weight.dtype, torch.bfloat16)
        self.assertTrue(torch.equal(m16.model.embed_tokens.weight,
                                    theirs["model.embed_tokens.weight"].to(torch.bfloat16)))
        # Nothing is overwritten.
        p = run([PPRUN, "--export", ckpt, out, "--format", "hf"], expect=2)
        self.assertIn("exists and is not an empty directory", p.stderr)

    def test_qwen2_tied(self):
        _, out, _ = self.train_export_load("qwen2", transformers.Qwen2ForCausalLM, tied=True)
        with open(os.path.join(out, "config.json")) as f:
            cfg = json.load(f)
        self.assertEqual((cfg["model_type"], cfg["tie_word_embeddings"]), ("qwen2", True))

    # Sliding windows shorter than the held-out sequences, which the round trip keeps: the loss
    # transformers gives the exported model is pprun's eval_loss (train_export_load).
    def test_mistral_sliding_window_and_token_ids(self):
        _, out, _ = self.train_export_load("mistral", transformers.MistralForCausalLM,
                                           sliding_window=WINDOW, bos_token_id=5,
                                           eos_token_id=[7, 8])
        with open(os.path.join(out, "config.json")) as f:
            cfg = json.load(f)
        self.assertEqual((cfg["sliding_window"], cfg["bos_token_id"], cfg["eos_token_id"]),
                         (WINDOW, 5, [7, 8]))

    def test_qwen2_sliding_window_on_some_layers(self):
        _, out, _ = self.train_export_load("qwen2", transformers.Qwen2ForCausalLM,
                                           use_sliding_window=True, sliding_window=WINDOW,
                                           max_window_layers=1)
        with open(os.path.join(out, "config.json")) as f:
            cfg = json.load(f)
        self.assertEqual((cfg["use_sliding_window"], cfg["sliding_window"],
                          cfg["max_window_layers"], cfg["layer_types"]),
                         (True, WINDOW, 1, ["full_attention"] + ["sliding_attention"] * 3))

    def test_family_defaults_where_the_source_had_none(self):
        """A Mistral config.json without sliding_window is MistralConfig's default window, 4096;
        without token ids, its defaults 1 and 2: the export writes them."""
        src = os.path.join(self.d, "mistral")
        make_model(src, family="mistral")
        path = os.path.join(src, "config.json")
        with open(path) as f:
            cfg = json.load(f)
        for k in ("sliding_window", "bos_token_id", "eos_token_id"):
            cfg.pop(k, None)
        with open(path, "w") as f:
            json.dump(cfg, f)
        ckpt = os.path.join(self.d, "ckpt")
        run([PPRUN, "--reference", "--layout", "Et" + "t" * (LAYERS - 2) + "|tL",
             "--microbatches", "2", "--init-from", src, "--data", self.data, "--data-format",
             "uint32", "--seq-len", str(T), "--steps", "1", "--global-batch", "2", "--save",
             ckpt, "--progress", "none", "--threads", "1"])
        out = os.path.join(self.d, "exported")
        run([PPRUN, "--export", ckpt, out, "--format", "hf"])
        with open(os.path.join(out, "config.json")) as f:
            cfg = json.load(f)
        self.assertEqual((cfg["sliding_window"], cfg["bos_token_id"], cfg["eos_token_id"]),
                         (4096, 1, 2))
        self.assertEqual(transformers.AutoConfig.from_pretrained(out).sliding_window, 4096)


class Gpt2(Base):
    """examples/gpt2 (a program of the library, not pprun) trained and exported as a Hugging Face
    GPT2LMHeadModel through its own Model::hugging_face."""

    def test_export_loads_with_the_same_loss(self):
        train = os.path.join(self.d, "train.u32")
        np.random.default_rng(2).integers(0, 97, 400).astype("<u4").tofile(train)
        held = os.path.join(self.d, "held.u32")
        held_ids = np.random.default_rng(7).integers(0, 97, 8 * T + 1)
        held_ids.astype("<u4").tofile(held)
        ckpt = os.path.join(self.d, "ckpt")
        metrics = os.path.join(self.d, "train.jsonl")
        run([GPT2, "--plan", self.plan("Et|t|t|tL", 2, "ZBV", 2), "--data", train,
             "--data-format", "uint32", "--vocab", "97", "--seq-len", str(T), "--steps", "5",
             "--global-batch", "4", "--save", ckpt, "--progress", "none", "--threads", "1",
             "--eval-data", held, "--metrics", metrics])
        with open(metrics) as f:
            evals = [j["eval_loss"] for j in map(json.loads, f) if "eval_loss" in j]
        self.assertEqual(len(evals), 1)
        out = os.path.join(self.d, "gpt2-hf")
        p = run([GPT2, "--export", ckpt, out, "--format", "hf"])
        self.assertIn("GPT2LMHeadModel", p.stdout)
        model, info = transformers.AutoModelForCausalLM.from_pretrained(
            out, dtype=torch.float32, output_loading_info=True)
        self.assertIsInstance(model, transformers.GPT2LMHeadModel)
        for k in ("missing_keys", "unexpected_keys", "mismatched_keys"):
            self.assertFalse(info[k], f"{k}: {info[k]}")
        # Its tensors are the checkpoint's, Conv1D weights transposed.
        single = os.path.join(self.d, "model.safetensors")
        run([GPT2, "--export", ckpt, single])
        ours = load_file(single)
        theirs = model.state_dict()
        self.assertTrue(torch.equal(ours["wte.weight"], theirs["transformer.wte.weight"]))
        self.assertTrue(torch.equal(ours["h.2.attn.c_attn.weight"].t(),
                                    theirs["transformer.h.2.attn.c_attn.weight"]))
        self.assertTrue(torch.equal(theirs["lm_head.weight"], theirs["transformer.wte.weight"]))
        # Its positions are the sequence's T (wpe has n_positions = T rows): the T inputs of each
        # window predict its T targets, as pprun's evaluation does.
        windows = torch.tensor(np.stack([held_ids[i * T:i * T + T + 1] for i in range(8)]),
                               dtype=torch.long)
        with torch.no_grad():
            logits = model.eval()(windows[:, :T]).logits
            want = torch.nn.functional.cross_entropy(logits.flatten(0, 1),
                                                     windows[:, 1:].flatten()).item()
        self.assertClose(evals[-1], want, "gpt2 eval_loss")
        # bf16 loads as bf16.
        out16 = os.path.join(self.d, "gpt2-hf16")
        run([GPT2, "--export", ckpt, out16, "--format", "hf", "--dtype", "bf16"])
        m16, info16 = transformers.AutoModelForCausalLM.from_pretrained(
            out16, output_loading_info=True)
        self.assertFalse(info16["missing_keys"] or info16["unexpected_keys"])
        self.assertEqual(m16.transformer.wte.weight.dtype, torch.bfloat16)


class Refusals(Base):
    def refuse(self, model_dir, message, how=PIPE2_1F1B, extra=()):
        metrics = os.path.join(self.d, "refused.jsonl")
        p = run([PPRUN, "--plan", self.plan(*how), "--init-from", model_dir, "--data", self.data,
                 "--data-format", "uint32", "--seq-len", str(T), "--steps", "1",
                 "--global-batch", str(how[3]), "--metrics", metrics, "--progress", "none",
                 *extra], expect=2)
        self.assertIn(message, p.stderr)
        self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)
        self.assertNotIn("starting", p.stdout)  # nothing ran
        self.assertFalse(os.path.exists(metrics))

    def edit_config(self, d, **changes):
        path = os.path.join(d, "config.json")
        with open(path) as f:
            cfg = json.load(f)
        cfg.update(changes)
        with open(path, "w") as f:
            json.dump(cfg, f)

    def test_refusals(self):
        base = os.path.join(self.d, "base")
        make_model(base)
        fresh = iter(range(100))

        def copy():
            d = os.path.join(self.d, f"case{next(fresh)}")
            shutil.copytree(base, d)
            return d

        st = os.path.join(base, "model.safetensors")
        self.refuse(base, "the layout has 6 decoder layers (t), but " +
                    os.path.join(base, "config.json") + " has num_hidden_layers 4",
                    how=("Ettt|tttL", 2, "1F1B", 2))
        d = copy()
        self.edit_config(d, model_type="gpt_neox")
        self.refuse(d, 'config.json: architectures: ["LlamaForCausalLM"] and model_type: '
                    '"gpt_neox" disagree (the model_type of LlamaForCausalLM is "llama")')
        d = copy()
        self.edit_config(d, model_type="mistral")
        self.refuse(d, 'architectures: ["LlamaForCausalLM"] and model_type: "mistral" disagree')
        qwen = os.path.join(self.d, "qwen2")
        make_model(qwen, family="qwen2")
        d = os.path.join(self.d, "qwen2-window")
        shutil.copytree(qwen, d)
        self.edit_config(d, use_sliding_window=True, sliding_window=8,
                         layer_types=["sliding_attention"] * 3 + ["chunked_attention"])
        self.refuse(d, 'config.json: layer_types: "chunked_attention" is not supported')
        d = os.path.join(self.d, "qwen2-no-bias")
        shutil.copytree(qwen, d)
        ts = load_file(os.path.join(qwen, "model.safetensors"))
        del ts["model.layers.0.self_attn.q_proj.bias"]
        save_file(ts, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
        self.refuse(d, "model.safetensors: no tensor 'model.layers.0.self_attn.q_proj.bias'")
        d = copy()
        self.edit_config(d, num_local_experts=8)
        self.refuse(d, "config.json: num_local_experts: a mixture of experts' field, which "
                       "LlamaForCausalLM does not have")
        d = copy()
        self.edit_config(d, rope_parameters={"rope_type": "yarn", "factor": 4.0,
                                             "rope_theta": 10000.0})
        self.refuse(d, "rope_parameters.rope_type: 'yarn' is not supported")
        d = copy()
        self.edit_config(d, attention_bias=True)
        self.refuse(d, "attention_bias: true is not supported (it gives o_proj a bias too")
        d = copy()
        self.edit_config(d, some_new_field=3)
        self.refuse(d, "some_new_field: not supported by pprun")
        d = copy()
        ts = load_file(st)
        del ts["model.layers.2.self_attn.k_proj.weight"]
        save_file(ts, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
        self.refuse(d, "model.safetensors: no tensor 'model.layers.2.self_attn.k_proj.weight'")
        d = copy()
        ts = load_file(st)
        ts["model.layers.1.mlp.up_proj.weight"] = ts["model.layers.1.mlp.up_proj.weight"][:40]
        save_file(ts, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
        self.refuse(d, "tensor 'model.layers.1.mlp.up_proj.weight': shape [40, 32], but "
                    "config.json's model needs [48, 32]")
        d = copy()
        path = os.path.join(d, "model.safetensors")
        os.truncate(path, os.path.getsize(path) - 100)
        self.refuse(d, path + ": truncated")
        self.refuse(d, "is cut)")
        d = copy()
        self.refuse(d, "--hidden: the model comes from", extra=("--hidden", "64"))


if __name__ == "__main__":
    unittest.main()
