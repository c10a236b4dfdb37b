#!/usr/bin/env python3
"""One Llama-style decoder layer in PyTorch eager: forward and backward times and TFLOP/s.

The layer pprun's `t` computes (docs/pprun.md, "The model"): RMSNorm, q/k/v projections with
grouped-query heads, the rotary embedding, causal attention through
torch.nn.functional.scaled_dot_product_attention (flash or memory-efficient kernels where the device
has them), the output projection and residual, RMSNorm, the SwiGLU MLP and residual. Parameters
and activations in --dtype; the norms compute in fp32.

    python3 bench/gpu_layer_eager.py --device cuda --dtype bf16          # Llama-3-8B's shape
    python3 bench/gpu_layer_eager.py --device cpu --hidden 64 --heads 4 --kv-heads 2 --ffn 176 --seq 32
    python3 bench/gpu_layer_eager.py --flops-only ...                     # the FLOP counts alone

FLOPs are model FLOPs, the convention scripts/gpu-check.sh uses for pprun's actions too:
F = 2 x tokens x (the layer's matrix-product weights) + attention's two products (4 x seq^2 x
heads x head_dim per sequence), halved for the causal mask; B = 2 F; I = F + attention's share
(the input gradient: one product per weight, two per attention product); W = F less attention's
share (one product per weight). Times on CUDA come from CUDA events around each phase, after
warm-up; on the CPU from the wall clock. --split also times eager's I (the input's gradient alone,
torch.autograd.grad with respect to the input: autograd then skips the weights' products) and
gives W as B - I (eager has no W of its own: the weights' products of a full backward).
"""
import argparse
import json
import math
import sys
import time


def flops(a):
    """Model FLOPs of F, B, I and W for one microbatch of the layer (see the module's doc)."""
    hd = a.hidden // a.heads
    weights = a.hidden * (a.heads * hd + 2 * a.kv_heads * hd) + a.heads * hd * a.hidden \
        + 3 * a.hidden * a.ffn
    tokens = a.batch * a.seq
    matmul = 2 * tokens * weights
    attention = a.batch * 4 * a.seq * a.seq * a.heads * hd / 2
    f = matmul + attention
    return {"F": f, "B": 2 * f, "I": matmul + 2 * attention, "W": matmul}


def build(a, torch):
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[a.dtype]
    dev = torch.device(a.device)
    hd = a.hidden // a.heads
    g = torch.Generator(device="cpu").manual_seed(0)

    def w(*shape):
        return (torch.randn(*shape, generator=g) * 0.02).to(dev, dtype).requires_grad_(True)

    p = {
        "norm1": torch.ones(a.hidden, device=dev, dtype=dtype, requires_grad=True),
        "wqkv": w((a.heads + 2 * a.kv_heads) * hd, a.hidden),
        "wo": w(a.hidden, a.heads * hd),
        "norm2": torch.ones(a.hidden, device=dev, dtype=dtype, requires_grad=True),
        "w13": w(2 * a.ffn, a.hidden),
        "w2": w(a.hidden, a.ffn),
    }
    inv = 500000.0 ** (-torch.arange(0, hd, 2, dtype=torch.float64) / hd)
    ang = torch.outer(torch.arange(a.seq, dtype=torch.float64), inv)
    ang = torch.cat([ang, ang], -1)
    cos, sin = ang.cos().to(dev, dtype), ang.sin().to(dev, dtype)
    F = torch.nn.functional

    def rms(x, scale):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-5)).to(x.dtype) * scale

    def rope(x):
        half = hd // 2
        return x * cos + torch.cat([-x[..., half:], x[..., :half]], -1) * sin

    def layer(x):
        b, T, _ = x.shape
        qkv = F.linear(rms(x, p["norm1"]), p["wqkv"]).view(b, T, a.heads + 2 * a.kv_heads, hd)
        qkv = qkv.transpose(1, 2)
        q = rope(qkv[:, :a.heads])
        k = rope(qkv[:, a.heads:a.heads + a.kv_heads])
        v = qkv[:, a.heads + a.kv_heads:]
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                           enable_gqa=a.heads != a.kv_heads)
        h = x + F.linear(o.transpose(1, 2).reshape(b, T, a.heads * hd), p["wo"])
        gate, up = F.linear(rms(h, p["norm2"]), p["w13"]).chunk(2, -1)
        return h + F.linear(F.silu(gate) * up, p["w2"])

    x = (torch.randn(a.batch, a.seq, a.hidden, generator=g) * 0.5).to(dev, dtype)
    x.requires_grad_(True)
    grad = (torch.randn(a.batch, a.seq, a.hidden, generator=g) * 0.01).to(dev, dtype)
    return layer, x, grad, p


def measure(a):
    import torch

    if a.device == "cuda" and not torch.cuda.is_available():
        sys.exit("gpu_layer_eager.py: --device cuda: this torch sees no CUDA device")
    layer, x, grad, params = build(a, torch)
    cuda = a.device == "cuda"

    class Timer:
        def __enter__(self):
            if cuda:
                self.s, self.e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(
                    enable_timing=True)
                self.s.record()
            else:
                self.t = time.perf_counter()
            return self

        def __exit__(self, *exc):
            if cuda:
                self.e.record()
            else:
                self.ms = (time.perf_counter() - self.t) * 1e3

        def elapsed(self):
            if cuda:
                torch.cuda.synchronize()
                return self.s.elapsed_time(self.e)
            return self.ms

    times = {"F": [], "B": []}
    for i in range(a.warmup + a.iters):
        x.grad = None
        for t in params.values():
            t.grad = None
        with Timer() as tf:
            out = layer(x)
        with Timer() as tb:
            out.backward(grad)
        if i >= a.warmup:
            times["F"].append(tf.elapsed())
            times["B"].append(tb.elapsed())
        elif cuda:
            torch.cuda.synchronize()
    if not all(math.isfinite(v) for v in x.grad.float().flatten()[:16].tolist()):
        sys.exit("gpu_layer_eager.py: the backward pass gave non-finite gradients")
    if a.split:  # the input's gradient alone (autograd skips the weights' products): eager's I
        times["I"] = []
        for i in range(a.warmup + a.iters):
            out = layer(x)
            with Timer() as ti:
                torch.autograd.grad(out, [x], grad)
            if i >= a.warmup:
                times["I"].append(ti.elapsed())
            elif cuda:
                torch.cuda.synchronize()
    return {k: sorted(v)[len(v) // 2] for k, v in times.items()}  # medians, ms


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--ffn", type=int, default=14336)
    ap.add_argument("--seq", type=int, default=4096)
    ap.add_argument("--batch", type=int, default=1, help="sequences per microbatch (default 1)")
    ap.add_argument("--dtype", choices=["fp32", "bf16"], default="bf16")
    ap.add_argument("--device", default="cuda", help="cuda or cpu (default cuda)")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--peak", type=float, default=989.0,
                    help="the device's dense peak in TFLOP/s for --dtype (default 989: H100 bf16)")
    ap.add_argument("--flops-only", action="store_true", help="print the FLOP counts as JSON")
    ap.add_argument("--split", action="store_true",
                    help="also time the input's gradient alone (I: torch.autograd.grad w.r.t. the "
                         "input) and give W as B - I")
    ap.add_argument("--json", help="also write the result as one JSON object to this file")
    a = ap.parse_args()
    if a.hidden % a.heads or a.heads % a.kv_heads or (a.hidden // a.heads) % 2:
        ap.error("--hidden must be a multiple of --heads, --heads of --kv-heads, head_dim even")
    fl = flops(a)
    if a.flops_only:
        print(json.dumps(fl))
        return
    ms = measure(a)
    res = {"device": a.device, "dtype": a.dtype, "shape": {k: getattr(a, k) for k in
                                                            ("hidden", "heads", "kv_heads", "ffn",
                                                             "seq", "batch")},
           "iters": a.iters, "ms": ms, "flops": fl,
           "tflops": {k: fl[k] / (ms[k] * 1e-3) / 1e12 for k in ms}}
    res["ms"]["FB"] = ms["F"] + ms["B"]
    res["tflops"]["FB"] = (fl["F"] + fl["B"]) / (res["ms"]["FB"] * 1e-3) / 1e12
    if "I" in ms:
        res["ms"]["W"] = ms["B"] - ms["I"]
        res["tflops"]["W"] = fl["W"] / (res["ms"]["W"] * 1e-3) / 1e12 if res["ms"]["W"] > 0 else 0
    res["peak_tflops"] = a.peak
    print(f"PyTorch eager layer ({a.device}, {a.dtype}; hidden {a.hidden}, heads {a.heads} "
          f"(kv {a.kv_heads}), ffn {a.ffn}, seq {a.seq}, batch {a.batch}; median of {a.iters}):")
    for k in [k for k in ("F", "B", "FB", "I", "W") if k in res["ms"]]:
        t = res["tflops"][k]
        print(f"  {k:<3} {res['ms'][k]:10.3f} ms  {t:8.2f} TFLOP/s  "
              f"{100 * t / a.peak:5.1f} % of {a.peak:g}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f)


if __name__ == "__main__":
    main()
