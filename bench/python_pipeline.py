#!/usr/bin/python3
"""A small pipeline-parallel training runtime in plain PyTorch: the baseline pprun is compared with.

Written the way the widely shared AFAB / 1F1B pipeline gists are: torch.distributed on Gloo, one
process per stage launched by torchrun, batched point-to-point ops (batch_isend_irecv), autograd for
the backward, torch.optim.AdamW. It sets no thread counts of its own: torchrun exports
OMP_NUM_THREADS=1, and that is all.

The model, data and training step are pprun's (runtime/model/, runtime/data/token_source.cpp,
runtime/train/trainer.cpp): the same Llama-style layers and parameter names, the same initialisation
from (seed, name), the same synthetic language, AdamW with warm-up + cosine, global-norm clipping.
So its losses equal `pprun --reference` (bench/vs_python.sh --check compares them).

  torchrun --nproc_per_node 2 --master_addr 127.0.0.1 --master_port 29511 \\
      --redirects 9:0 --tee 9:0 bench/python_pipeline.py --layout 'Ett|ttL' --steps 20
"""
import argparse
import functools
import math
import os
import statistics
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

# --- pprun's counter-based random numbers (runtime/data/token_source.cpp), vectorised over uint64 arrays ---
U64 = np.uint64


def mix64(x):
    with np.errstate(over="ignore"):
        x = np.asarray(x, dtype=U64) + U64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> U64(30))) * U64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> U64(27))) * U64(0x94D049BB133111EB)
        return x ^ (x >> U64(31))


def mix2(a, b):
    with np.errstate(over="ignore"):
        return mix64(np.asarray(a, dtype=U64) ^ mix64(np.asarray(b, dtype=U64) + U64(0x9E3779B97F4A7C15)))


def init_param(name, shape, std, seed):
    """normal(0, std) from (seed, name): Box-Muller over splitmix64, as pprun's init_param."""
    if std == 0:
        return torch.ones(shape)
    h = 0xCBF29CE484222325  # FNV-1a of the name
    for c in name.encode():
        h = ((h ^ c) * 0x100000001B3) & ((1 << 64) - 1)
    key = mix2(seed, h)
    i = np.arange(math.prod(shape), dtype=U64) * U64(2)
    a, b = mix2(key, i), mix2(key, i + U64(1))
    u1 = ((a >> U64(11)).astype(np.float64) + 0.5) * 2.0**-53
    u2 = (b >> U64(11)).astype(np.float64) * 2.0**-53
    z = (np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * np.pi * u2)).astype(np.float32)
    return torch.from_numpy((std * z.astype(np.float64)).astype(np.float32).reshape(shape))


class SyntheticLanguage:
    """pprun's built-in data: 4 successors per token, half of the rows repeat their first half."""

    def __init__(self, vocab, seed):
        self.vocab, self.seed = vocab, seed
        self.succ = (mix2(mix2(seed, 0x5EED), np.arange(4 * vocab, dtype=U64)) % U64(vocab)).astype(np.int64)

    def batch(self, step, rows, length):
        keys = mix2(mix2(self.seed, step), np.arange(rows, dtype=U64))
        with np.errstate(over="ignore"):
            draws = mix64(keys[:, None] + np.arange(length + 2, dtype=U64)[None, :])
        copy = draws[:, 0] % U64(2) == U64(1)
        t = (draws[:, 1] % U64(self.vocab)).astype(np.int64)
        u = (draws[:, 2:] >> U64(11)).astype(np.float64) * 2.0**-53
        out = np.empty((rows, length), dtype=np.int64)
        for i in range(length):
            out[:, i] = t
            k = (u[:, i] >= 0.55).astype(np.int64) + (u[:, i] >= 0.80) + (u[:, i] >= 0.95)
            t = self.succ[t * 4 + k]
        fresh = (length + 1) // 2
        out[copy, fresh:] = out[copy, : length - fresh]
        return torch.from_numpy(out)


# --- the model: E embedding, t Llama-style decoder layer, L final norm + head + loss ---
class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class Attention(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.heads, self.kv_heads, self.hd = a.heads, a.kv_heads, a.hidden // a.heads
        self.wq = nn.Linear(a.hidden, a.heads * self.hd, bias=False)
        self.wk = nn.Linear(a.hidden, a.kv_heads * self.hd, bias=False)
        self.wv = nn.Linear(a.hidden, a.kv_heads * self.hd, bias=False)
        self.wo = nn.Linear(a.heads * self.hd, a.hidden, bias=False)

    def forward(self, x, cos, sin, mask):
        b, T, H = x.shape

        def rope(t):
            t1, t2 = t.chunk(2, dim=-1)
            return t * cos + torch.cat((-t2, t1), dim=-1) * sin

        q = rope(self.wq(x).view(b, T, self.heads, self.hd).transpose(1, 2))
        k = rope(self.wk(x).view(b, T, self.kv_heads, self.hd).transpose(1, 2))
        v = self.wv(x).view(b, T, self.kv_heads, self.hd).transpose(1, 2)
        k = k.repeat_interleave(self.heads // self.kv_heads, dim=1)
        v = v.repeat_interleave(self.heads // self.kv_heads, dim=1)
        scores = q @ k.transpose(-2, -1) * (1.0 / math.sqrt(self.hd)) + mask
        o = torch.softmax(scores, dim=-1) @ v
        return self.wo(o.transpose(1, 2).reshape(b, T, H))


class MLP(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.w1 = nn.Linear(a.hidden, a.ffn, bias=False)
        self.w3 = nn.Linear(a.hidden, a.ffn, bias=False)
        self.w2 = nn.Linear(a.ffn, a.hidden, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.attn_norm, self.attn = RMSNorm(a.hidden, a.norm_eps), Attention(a)
        self.mlp_norm, self.mlp = RMSNorm(a.hidden, a.norm_eps), MLP(a)

    def forward(self, x, cos, sin, mask):
        x = x + self.attn(self.attn_norm(x), cos, sin, mask)
        return x + self.mlp(self.mlp_norm(x))


class Head(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.norm = RMSNorm(a.hidden, a.norm_eps)
        self.out = nn.Linear(a.hidden, a.vocab, bias=False)


class Stage(nn.Module):
    """One pipeline stage: the layers of one '|'-separated part of the layout."""

    def __init__(self, a, symbols, first_layer, total_layers):
        super().__init__()
        self.embed = nn.Embedding(a.vocab, a.hidden) if "E" in symbols else None
        n = symbols.count("t")
        self.layers = nn.ModuleDict({str(first_layer + i): Block(a) for i in range(n)})
        self.head = Head(a) if "L" in symbols else None
        hd, T = a.hidden // a.heads, a.seq_len
        inv = a.rope_theta ** (-torch.arange(0, hd, 2, dtype=torch.float64) / hd)
        ang = torch.outer(torch.arange(T, dtype=torch.float64), inv).repeat(1, 2)
        self.register_buffer("cos", ang.cos().float(), persistent=False)
        self.register_buffer("sin", ang.sin().float(), persistent=False)
        self.register_buffer("mask", torch.full((T, T), float("-inf")).triu(1), persistent=False)
        out_std = 0.02 / math.sqrt(2 * max(1, total_layers))
        with torch.no_grad():
            for name, p in self.named_parameters():
                std = 0 if "norm" in name else out_std if name.endswith(("wo.weight", "w2.weight")) else 0.02
                p.copy_(init_param(name, list(p.shape), std, a.seed))

    def forward(self, x, rows):
        T = rows.shape[1] - 1
        h = self.embed(rows[:, :T]) if self.embed is not None else x
        for layer in self.layers.values():
            h = layer(h, self.cos, self.sin, self.mask)
        if self.head is None:
            return h
        logits = self.head.out(self.head.norm(h))
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), rows[:, 1:].reshape(-1))


# --- point-to-point: every exchange is one batch_isend_irecv ---
def exchange(send=None, send_to=None, recv_from=None, shape=None):
    ops, received = [], None
    if send is not None and send_to is not None:
        ops.append(dist.P2POp(dist.isend, send.detach(), send_to))
    if recv_from is not None:
        received = torch.empty(shape, requires_grad=True)
        ops.append(dist.P2POp(dist.irecv, received, recv_from))
    if ops:
        for req in dist.batch_isend_irecv(ops):
            req.wait()
    return received


def learning_rate(a, step):
    warmup = min(a.steps // 10 if a.warmup < 0 else a.warmup, a.steps)
    if step < warmup:
        return a.lr * (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, a.steps - warmup - 1))
    low = a.lr * 0.1
    return low + 0.5 * (a.lr - low) * (1 + math.cos(math.pi * progress))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--layout", default="Ett|ttL", help="one '|'-separated part per rank (E, t, L)")
    p.add_argument("--schedule", default="1f1b", choices=["1f1b", "afab"])
    for name, default in [("hidden", 256), ("heads", 8), ("kv-heads", 4), ("ffn", 704), ("vocab", 256),
                          ("seq-len", 128), ("microbatches", 8), ("global-batch", 32), ("steps", 20),
                          ("warmup", -1), ("seed", 1234)]:
        p.add_argument("--" + name, type=int, default=default)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--rope-theta", type=float, default=10000.0)
    p.add_argument("--norm-eps", type=float, default=1e-5)
    a = p.parse_args()

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    parts = a.layout.split("|")
    assert len(parts) == world, f"the layout has {len(parts)} stages, torchrun started {world} processes"
    first = sum(s.count("t") for s in parts[:rank])
    model = Stage(a, parts[rank], first, a.layout.count("t"))
    is_first, is_last = rank == 0, rank == world - 1
    prev_rank, next_rank = (None if is_first else rank - 1), (None if is_last else rank + 1)
    M, b = a.microbatches, a.global_batch // a.microbatches
    shape = (b, a.seq_len, a.hidden)
    params = list(model.parameters())
    decay = [q for q in params if q.dim() >= 2]
    no_decay = [q for q in params if q.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), eps=1e-8)
    data = SyntheticLanguage(a.vocab, a.seed)
    if is_last:
        print(f"python_pipeline: {a.schedule} on {world} ranks, layout {a.layout}, {M} microbatches of {b}, "
              f"{sum(q.numel() for q in params) / 1e6:.2f}M parameters on the last rank, "
              f"torch {torch.__version__}, {torch.get_num_threads()} thread(s)", flush=True)

    times, spent = [], torch.zeros(5, dtype=torch.float64)  # F s, F count, B s, B count, comm s

    def timed(slot, fn, *args, **kw):  # compute and communication times, after the first step
        t = time.perf_counter()
        out = fn(*args, **kw)
        if step > 0:
            spent[slot] += time.perf_counter() - t
            if slot < 4:
                spent[slot + 1] += 1
        return out

    communicate = functools.partial(timed, 4, exchange)
    for step in range(a.steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        rows = data.batch(step, a.global_batch, a.seq_len + 1).split(b)
        inputs, outputs, losses = [], [], []
        fwd_i = 0

        def forward(x):
            nonlocal fwd_i
            y = timed(0, model, x, rows[fwd_i])
            fwd_i += 1
            if is_last:
                losses.append(y.item())
                y = y / M
            inputs.append(x)
            outputs.append(y)
            return y

        def backward(dy):
            x, y = inputs.pop(0), outputs.pop(0)
            timed(2, torch.autograd.backward, y, grad_tensors=dy)
            return None if x is None else x.grad

        if a.schedule == "afab":
            for _ in range(M):
                communicate(forward(communicate(recv_from=prev_rank, shape=shape)), next_rank)
            for _ in range(M):
                communicate(backward(communicate(recv_from=next_rank, shape=shape)), prev_rank)
        else:  # 1F1B: warm-up forwards, then one forward / one backward, then the remaining backwards
            warmup = min(world - rank - 1, M)
            for _ in range(warmup):
                communicate(forward(communicate(recv_from=prev_rank, shape=shape)), next_rank)
            x = communicate(recv_from=prev_rank, shape=shape) if M > warmup else None
            for i in range(M - warmup):
                dy = communicate(forward(x), next_rank, recv_from=next_rank, shape=shape)
                dx = backward(dy)
                if i == M - warmup - 1:
                    communicate(dx, prev_rank)
                else:
                    x = communicate(dx, prev_rank, recv_from=prev_rank, shape=shape)
            for _ in range(warmup):
                communicate(backward(communicate(recv_from=next_rank, shape=shape)), prev_rank)

        # Global-norm clipping over every rank, then AdamW with warm-up + cosine.
        grads = [q.grad for q in params if q.grad is not None]
        sq = torch.stack([g.double().pow(2).sum() for g in grads]).sum().reshape(1)
        dist.all_reduce(sq)
        norm = sq.sqrt().item()
        if 1.0 / (norm + 1e-6) < 1:
            for g in grads:
                g.mul_(1.0 / (norm + 1e-6))
        lr = learning_rate(a, step)
        for group in opt.param_groups:
            group["lr"] = lr
        opt.step()
        dt = time.perf_counter() - t0
        times.append(dt)
        if is_last:
            print(f"step {step + 1}/{a.steps} loss {statistics.mean(losses):.6f} lr {lr:.3g} "
                  f"grad-norm {norm:.4f} step-time {dt:.4f} s tok/s {a.global_batch * a.seq_len / dt:.1f}", flush=True)
    comm = [torch.zeros(1, dtype=torch.float64) for _ in range(world)]
    dist.all_gather(comm, spent[4:].clone())
    dist.all_reduce(spent)
    if is_last and len(times) > 1:
        med = statistics.median(times[1:])
        print(f"python_pipeline: median over steps 2..{a.steps}: step {med:.4f} s, "
              f"{a.global_batch * a.seq_len / med:.1f} tokens/s", flush=True)
        n = a.steps - 1
        print(f"python_pipeline: mean compute time per action: F {spent[0] / spent[1] * 1e3:.3f} ms, "
              f"B {spent[2] / spent[3] * 1e3:.3f} ms; in communication (posting + waiting) per step: "
              + ", ".join(f"rank {r} {c.item() / n * 1e3:.1f} ms" for r, c in enumerate(comm)), flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
