#!/usr/bin/env python3
"""A whole Llama-style model trained by torch.distributed.pipelining's single-stage run, on a GPU.

The reference scripts/gpu-bench.sh holds pprun's pp 1 run against: the model of pprun's layout
`E` + `t` x layers + `L` (token embedding; decoder layers of RMSNorm, q/k/v with grouped-query
heads, the rotary embedding, causal attention through
torch.nn.functional.scaled_dot_product_attention, the output projection and residual, RMSNorm,
the SwiGLU MLP and residual; the final RMSNorm, an untied output head and the cross-entropy),
written the way eager PyTorch writes it (fused q/k/v and gate/up weights, F.rms_norm,
F.scaled_dot_product_attention with enable_gqa), in mixed precision the way PyTorch does it
(fp32 parameters, AdamW state and gradients; the forward and backward under
torch.autocast(bfloat16), its weight casts cached over the step's microbatches), one
PipelineStage holding the whole model, Schedule1F1B (or --schedule) over --microbatches, the loss
divided by the microbatch count (scale_grads=False), clipping by the global norm
(clip_grad_norm_, 1.0) and torch.optim.AdamW (its default implementation on the device:
foreach; --fused-adamw for fused=True). Parameters are initialised normal(0, 0.02) (norm scales
1): the losses are not pprun's, the arithmetic per step is the same.

    python3 bench/gpu_model_torch.py --layers 8 --vocab 128256 --seq 4096 --microbatches 4
    python3 bench/gpu_model_torch.py --device cpu --dtype fp32 --hidden 64 --heads 4 --kv-heads 2 \\
        --ffn 176 --seq 32 --vocab 256 --layers 2 --steps 3          # the CPU dry run

It prints the median step time over steps 2..N, tokens/s and MFU (model FLOPs: 6 x tokens x the
matrix weights, head included, plus attention's products, halved for the causal mask, x 3 for the
forward and backward, against --peak), and with --json writes them as one object.
"""
import argparse
import json
import math
import os
import statistics
import sys
import time


def model_flops(a):
    """Model FLOPs of one step (forward and backward) for global batch x seq tokens."""
    hd = a.hidden // a.heads
    layer_weights = a.hidden * (a.heads + 2 * a.kv_heads) * hd + a.heads * hd * a.hidden \
        + 3 * a.hidden * a.ffn
    tokens = a.global_batch * a.seq
    forward = 2 * tokens * (a.layers * layer_weights + a.hidden * a.vocab) \
        + a.layers * a.global_batch * 4 * a.seq * a.seq * a.heads * hd / 2
    return 3 * forward


def build(a, torch):
    nn, F = torch.nn, torch.nn.functional
    hd = a.hidden // a.heads

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm1 = nn.Parameter(torch.ones(a.hidden))
            self.wqkv = nn.Parameter(torch.randn((a.heads + 2 * a.kv_heads) * hd, a.hidden) * 0.02)
            self.wo = nn.Parameter(torch.randn(a.hidden, a.heads * hd) * 0.02)
            self.norm2 = nn.Parameter(torch.ones(a.hidden))
            self.w13 = nn.Parameter(torch.randn(2 * a.ffn, a.hidden) * 0.02)
            self.w2 = nn.Parameter(torch.randn(a.hidden, a.ffn) * 0.02)

        def forward(self, x, cos, sin):
            b, T, _ = x.shape
            h = F.rms_norm(x, (a.hidden,), self.norm1, 1e-5)
            qkv = F.linear(h, self.wqkv).view(b, T, a.heads + 2 * a.kv_heads, hd).transpose(1, 2)

            def rope(t):
                half = hd // 2
                return t * cos + torch.cat([-t[..., half:], t[..., :half]], -1) * sin

            q = rope(qkv[:, :a.heads])
            k = rope(qkv[:, a.heads:a.heads + a.kv_heads])
            v = qkv[:, a.heads + a.kv_heads:]
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                               enable_gqa=a.heads != a.kv_heads)
            x = x + F.linear(o.transpose(1, 2).reshape(b, T, a.heads * hd), self.wo)
            gate, up = F.linear(F.rms_norm(x, (a.hidden,), self.norm2, 1e-5), self.w13).chunk(2, -1)
            return x + F.linear(F.silu(gate) * up, self.w2)

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Parameter(torch.randn(a.vocab, a.hidden) * 0.02)
            self.layers = nn.ModuleList(Layer() for _ in range(a.layers))
            self.norm = nn.Parameter(torch.ones(a.hidden))
            self.head = nn.Parameter(torch.randn(a.vocab, a.hidden) * 0.02)
            inv = 500000.0 ** (-torch.arange(0, hd, 2, dtype=torch.float64) / hd)
            ang = torch.outer(torch.arange(a.seq, dtype=torch.float64), inv)
            ang = torch.cat([ang, ang], -1)
            self.register_buffer("cos", ang.cos().float(), persistent=False)
            self.register_buffer("sin", ang.sin().float(), persistent=False)

        def forward(self, tokens):
            x = F.embedding(tokens, self.embed)
            for layer in self.layers:
                x = layer(x, self.cos, self.sin)
            return F.linear(F.rms_norm(x, (a.hidden,), self.norm, 1e-5), self.head)

    return Model()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for name, default in [("hidden", 4096), ("heads", 32), ("kv-heads", 8), ("ffn", 14336),
                          ("seq", 4096), ("vocab", 128256), ("layers", 8), ("microbatches", 4),
                          ("global-batch", 4), ("steps", 6)]:
        ap.add_argument("--" + name, type=int, default=default)
    ap.add_argument("--schedule", default="Schedule1F1B",
                    help="a single-stage schedule class of torch.distributed.pipelining")
    ap.add_argument("--dtype", choices=["bf16", "fp32"], default="bf16",
                    help="bf16: autocast over fp32 parameters (default); fp32: no autocast")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--fused-adamw", action="store_true", help="torch.optim.AdamW(fused=True)")
    ap.add_argument("--peak", type=float, default=989.0, help="dense peak TFLOP/s (default 989)")
    ap.add_argument("--json", help="also write the result as one JSON object to this file")
    ap.add_argument("--flops-only", action="store_true", help="print the step's model FLOPs")
    a = ap.parse_args()
    if a.global_batch % a.microbatches:
        ap.error("--global-batch must be a multiple of --microbatches")
    if a.flops_only:
        print(model_flops(a))
        return

    import torch
    import torch.distributed as dist
    from torch.distributed.pipelining import PipelineStage
    from torch.distributed.pipelining import schedules as S

    cuda = a.device == "cuda"
    if cuda and not torch.cuda.is_available():
        sys.exit("gpu_model_torch.py: --device cuda: this torch sees no CUDA device")
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(29600 + os.getpid() % 1000))
    dist.init_process_group("nccl" if cuda else "gloo", rank=0, world_size=1)
    dev = torch.device(a.device)
    if cuda:
        torch.cuda.set_device(dev)
    torch.manual_seed(0)
    model = build(a, torch).to(dev)
    stage = PipelineStage(model, 0, 1, dev)
    M = a.microbatches

    def loss_fn(logits, target):
        return torch.nn.functional.cross_entropy(logits.float().flatten(0, 1),
                                                 target.flatten()) / M

    schedule = getattr(S, a.schedule)(stage, M, loss_fn=loss_fn, scale_grads=False)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), eps=1e-8,
                            weight_decay=0.1, fused=True if a.fused_adamw else None)
    gen = torch.Generator().manual_seed(1)
    autocast = (torch.autocast(a.device, dtype=torch.bfloat16) if a.dtype == "bf16"
                else torch.autocast(a.device, enabled=False))
    times, losses = [], []
    for step in range(a.steps):
        rows = torch.randint(0, a.vocab, (a.global_batch, a.seq + 1), generator=gen).to(dev)
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        mb_losses = []
        with autocast:
            schedule.step(rows[:, :-1], target=rows[:, 1:], losses=mb_losses)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        loss = sum(x.item() for x in mb_losses)  # waits for the step
        times.append(time.perf_counter() - t0)
        losses.append(loss)
        print(f"step {step + 1}/{a.steps} loss {loss:.4f} step-time {times[-1]:.4f} s", flush=True)
    med = statistics.median(times[1:]) if len(times) > 1 else times[0]
    tokens = a.global_batch * a.seq
    res = {"system": "torch.distributed.pipelining", "schedule": a.schedule,
           "device": a.device, "dtype": a.dtype, "layers": a.layers, "vocab": a.vocab,
           "seq": a.seq, "microbatches": M, "global_batch": a.global_batch,
           "parameters": sum(p.numel() for p in model.parameters()),
           "step_s": med, "tokens_per_s": tokens / med,
           "mfu": model_flops(a) / med / (a.peak * 1e12), "losses": losses,
           "torch": torch.__version__}
    print(f"torch_pipelining single stage ({a.schedule}, {a.device}, {a.dtype}): median step "
          f"{med * 1e3:.2f} ms, {res['tokens_per_s']:.1f} tokens/s, MFU {100 * res['mfu']:.1f} % "
          f"of {a.peak:g} TFLOP/s", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
