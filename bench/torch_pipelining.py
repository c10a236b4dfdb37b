#!/usr/bin/env python3
"""pprun's model trained by PyTorch's own pipeline runtime, torch.distributed.pipelining.

The model, initialisation, data and optimizer step are pprun's, from bench/python_pipeline.py
(pprun's Llama-style layers with the same parameter names and the same initialisation from
(seed, name), the synthetic language, AdamW with warm-up + cosine, global-norm clipping), so the
losses equal `pprun --reference` and pprun's under any plan. Each rank builds its stages as
PipelineStage objects and runs one of:
  --schedule CLASS  a schedule class of torch (ScheduleGPipe, Schedule1F1B, ScheduleInterleaved1F1B,
                    ScheduleLoopedBFS, ScheduleInterleavedZeroBubble, ScheduleZBVZeroBubble,
                    ScheduleDualPipeV); the layout's stages over the ranks as that class places them
                    (V placement for the last two, loop otherwise);
  --csv FILE        a schedule from a CSV (ppcompile --emit csv), loaded by
                    _PipelineScheduleRuntime._load_csv (--csv-format compute_only: torch lowers it;
                    compute_comms: its SEND/RECV order as written); each rank holds the stages its
                    row names, as torchtitan's pipeline_parallel_schedule_csv does.
Gradients: the loss of each microbatch is divided by the microbatch count and the schedule does not
rescale (scale_grads=False, as torchtitan runs it), so a CSV needs no REDUCE_GRAD cells.
Gloo, one process per rank, launched by torchrun; thread counts are torchrun's (it exports
OMP_NUM_THREADS=1), nothing is set here.

  torchrun --nproc_per_node 2 bench/torch_pipelining.py --layout 'Et|t|t|tL' --schedule ScheduleDualPipeV
  torchrun --nproc_per_node 2 bench/torch_pipelining.py --layout 'Ett|ttL' --csv plan.csv
  python3 bench/torch_pipelining.py --layout 'Ett|ttL' --reference      # unpipelined, one process

Timing (steps 2..N, every rank): the time spent inside the stages' forward_one_chunk,
backward_one_chunk (B, or I when the backward is split) and backward_weight_one_chunk (W) per
action, posting (_batch_p2p) and waiting (_wait_batch_p2p) on communication, and the rest of the
time inside the schedule's step() per action: the runtime's own overhead, measured as pprun
measures its own (the optimizer step is outside it on both sides). --metrics FILE
writes one JSON line per step (pprun's fields) and a last line with the timing summary.
"""
import argparse
import csv
import json
import math
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.pipelining import PipelineStage
from torch.distributed.pipelining import schedules as S

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import python_pipeline as pp  # noqa: E402  (pprun's model, initialisation and data in PyTorch)

V_CLASSES = ("ScheduleZBVZeroBubble", "ScheduleDualPipeV")


class StageModule(nn.Module):
    """One stage of pprun's model with the interface PipelineStage expects: the first stage takes
    the tokens, the others the hidden state; the last returns the logits (the loss is the
    schedule's loss_fn). The layers, their names and their initialisation are pprun's."""

    def __init__(self, a, symbols, first_layer, total_layers):
        super().__init__()
        self.stage = pp.Stage(a, symbols, first_layer, total_layers)

    def forward(self, x):
        s = self.stage
        h = s.embed(x) if s.embed is not None else x
        for layer in s.layers.values():
            h = layer(h, s.cos, s.sin, s.mask)
        return h if s.head is None else s.head.out(s.head.norm(h))


def build_stages(a, parts, indices):
    total = a.layout.count("t")
    first = [sum(p.count("t") for p in parts[:i]) for i in range(len(parts))]
    return {i: StageModule(a, parts[i], first[i], total) for i in indices}


def make_optimizer(a, modules):
    params = [q for m in modules for q in m.parameters()]
    decay = [q for q in params if q.dim() >= 2]
    no_decay = [q for q in params if q.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), eps=1e-8)
    return params, opt


def clip_and_step(a, step, params, opt, world_sum):
    """pprun's optimizer step: global-norm clipping to 1 over every rank, AdamW at the step's rate."""
    grads = [q.grad for q in params if q.grad is not None]
    sq = torch.stack([g.double().pow(2).sum() for g in grads]).sum().reshape(1)
    norm = world_sum(sq).sqrt().item()
    if 1.0 / (norm + 1e-6) < 1:
        for g in grads:
            g.mul_(1.0 / (norm + 1e-6))
    lr = pp.learning_rate(a, step)
    for group in opt.param_groups:
        group["lr"] = lr
    opt.step()
    opt.zero_grad(set_to_none=True)
    return lr, norm


class Timers:
    """Wall time inside the stages' compute calls and the runtime's communication calls."""

    def __init__(self):
        self.on = False
        self.compute = {}  # kind -> [seconds, count]
        self.post = [0.0, 0]
        self.wait = 0.0

    def add(self, slot, seconds):
        if self.on:
            slot[0] += seconds
            slot[1] += 1

    def wrap_compute(self, fn, kind_of):
        def timed(*args, **kwargs):
            t = time.perf_counter()
            out = fn(*args, **kwargs)
            self.add(self.compute.setdefault(kind_of(kwargs), [0.0, 0]), time.perf_counter() - t)
            return out
        return timed

    def instrument(self, stage):
        stage.forward_one_chunk = self.wrap_compute(stage.forward_one_chunk, lambda kw: "F")
        stage.backward_one_chunk = self.wrap_compute(
            stage.backward_one_chunk, lambda kw: "B" if kw.get("full_backward", True) else "I")
        stage.backward_weight_one_chunk = self.wrap_compute(stage.backward_weight_one_chunk,
                                                            lambda kw: "W")

    def instrument_communication(self):
        post, wait = S._batch_p2p, S._wait_batch_p2p

        def timed_post(*args, **kwargs):
            t = time.perf_counter()
            out = post(*args, **kwargs)
            self.add(self.post, time.perf_counter() - t)
            return out

        def timed_wait(*args, **kwargs):
            t = time.perf_counter()
            out = wait(*args, **kwargs)
            if self.on:
                self.wait += time.perf_counter() - t
            return out

        S._batch_p2p, S._wait_batch_p2p = timed_post, timed_wait

    def summary(self, schedule_seconds):
        """`schedule_seconds`: the time inside the schedule's step() (the optimizer step, which
        pprun does not count either, is left out)."""
        compute = sum(s for s, _ in self.compute.values())
        actions = sum(n for _, n in self.compute.values())
        rest = schedule_seconds - compute - self.post[0] - self.wait
        return {"compute_s": {k: v[0] for k, v in self.compute.items()},
                "actions": {k: v[1] for k, v in self.compute.items()},
                "post_s": self.post[0], "posts": self.post[1], "wait_s": self.wait,
                "schedule_s": schedule_seconds, "overhead_s": rest, "action_count": actions}


def csv_stages(path, rank):
    """The stage indices row `rank` of a CSV schedule names (its rank's stages)."""
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    stages = set()
    for cell in rows[rank]:
        for part in cell.strip().strip("()").split(")")[0].split(";"):
            digits = ""
            for c in part.strip():
                if not c.isdigit():
                    break
                digits += c
            if digits:
                stages.add(int(digits))
    return sorted(stages), len(rows)


def pipelined(a):
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    parts = a.layout.split("|")
    n = len(parts)
    if a.csv:
        mine, rows = csv_stages(a.csv, rank)
        if rows != world:
            sys.exit(f"torch_pipelining.py: the CSV has {rows} rows, torchrun started {world} ranks")
    else:
        if n % world:
            sys.exit(f"torch_pipelining.py: {n} stages do not split over {world} ranks")
        mine = ([rank, n - 1 - rank] if a.schedule in V_CLASSES else list(range(rank, n, world)))
    modules = build_stages(a, parts, mine)
    stages = [PipelineStage(modules[i], i, n, torch.device("cpu")) for i in mine]
    timers = Timers()
    for st in stages:
        timers.instrument(st)
    timers.instrument_communication()
    M = a.microbatches

    def loss_fn(logits, target):
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1)) / M

    if a.csv:
        schedule = S._PipelineScheduleRuntime(stages, M, loss_fn=loss_fn, scale_grads=False)
        schedule._load_csv(a.csv, format=a.csv_format)
    else:
        cls = getattr(S, a.schedule)
        if issubclass(cls, S.PipelineScheduleSingle):
            if len(stages) != 1:
                sys.exit(f"torch_pipelining.py: {a.schedule} runs one stage per rank, not {len(stages)}")
            schedule = cls(stages[0], M, loss_fn=loss_fn, scale_grads=False)
        else:
            schedule = cls(stages, M, loss_fn=loss_fn, scale_grads=False)
    has_first = any(s.is_first for s in stages)
    has_last = any(s.is_last for s in stages)
    params, opt = make_optimizer(a, modules.values())
    data = pp.SyntheticLanguage(a.vocab, a.seed)

    def world_sum(t):
        dist.all_reduce(t)
        return t

    metrics = open(a.metrics, "w") if a.metrics and has_last else None
    times, in_schedule = [], 0.0  # step times; time inside schedule.step() over steps 2..N
    if has_last:
        what = a.csv and f"{a.csv} ({a.csv_format})" or a.schedule
        print(f"torch_pipelining: {what} on {world} ranks, layout {a.layout}, {M} microbatches of "
              f"{a.global_batch // M}, torch {torch.__version__}, {torch.get_num_threads()} "
              f"thread(s)", flush=True)
    for step in range(a.steps):
        timers.on = step > 0
        dist.barrier()
        t0 = time.perf_counter()
        rows = data.batch(step, a.global_batch, a.seq_len + 1)
        tokens, labels = rows[:, :-1].contiguous(), rows[:, 1:].contiguous()
        losses = []
        args = (tokens,) if has_first else ()
        kwargs = {"target": labels, "losses": losses} if has_last else {}
        t1 = time.perf_counter()
        schedule.step(*args, **kwargs)
        if step > 0:
            in_schedule += time.perf_counter() - t1
        lr, norm = clip_and_step(a, step, params, opt, world_sum)
        dt = time.perf_counter() - t0
        times.append(dt)
        if has_last:
            loss = sum(x.item() for x in losses)  # each is CE / M
            tok = a.global_batch * a.seq_len / dt
            print(f"step {step + 1}/{a.steps} loss {loss:.6f} lr {lr:.3g} grad-norm {norm:.4f} "
                  f"step-time {dt:.4f} s tok/s {tok:.1f}", flush=True)
            if metrics:
                metrics.write(json.dumps({"step": step + 1, "loss": loss, "lr": lr,
                                          "grad_norm": norm, "step_time_s": dt,
                                          "tokens_per_s": tok}) + "\n")
    per_rank = [None] * world
    dist.all_gather_object(per_rank, timers.summary(in_schedule))
    if has_last and a.steps > 1:
        report(a, times, per_rank, metrics)
    if metrics:
        metrics.close()
    dist.barrier()
    dist.destroy_process_group()


def report(a, times, per_rank, metrics):
    """The timing summary over steps 2..N: per-action compute times over every rank, posting per
    operation, and the runtime's overhead per action (time inside the schedule's step() not spent
    computing, posting or waiting, summed over the ranks, over their actions)."""
    med = statistics.median(times[1:])
    compute, count = {}, {}
    for r in per_rank:
        for k, s in r["compute_s"].items():
            compute[k] = compute.get(k, 0.0) + s
            count[k] = count.get(k, 0) + r["actions"][k]
    posts = sum(r["posts"] for r in per_rank)
    # per action as pprun counts them: its plan's compute and SEND/RECV actions; torch's runtime
    # posts one batch per SEND/RECV action of its order (the single-stage classes fuse pairs)
    actions = sum(r["action_count"] for r in per_rank) + posts
    overhead = sum(r["overhead_s"] for r in per_rank) / max(1, actions)
    post = sum(r["post_s"] for r in per_rank) / max(1, posts)
    wait = [r["wait_s"] / (a.steps - 1) for r in per_rank]
    kinds = [k for k in ("F", "B", "I", "W") if k in compute]
    print(f"torch_pipelining: median over steps 2..{a.steps}: step {med:.4f} s, "
          f"{a.global_batch * a.seq_len / med:.1f} tokens/s", flush=True)
    print("torch_pipelining: mean compute time per action: "
          + ", ".join(f"{k} {compute[k] / count[k] * 1e3:.3f} ms" for k in kinds)
          + f"; runtime overhead {overhead * 1e6:.1f} us/action; posting {post * 1e6:.1f} us/op; "
          + "waiting per step: " + ", ".join(f"rank {i} {w * 1e3:.1f} ms" for i, w in enumerate(wait)),
          flush=True)
    if metrics:
        metrics.write(json.dumps({
            "summary": True, "step_median_s": med,
            "tokens_per_s": a.global_batch * a.seq_len / med,
            "compute_ms": {k: compute[k] / count[k] * 1e3 for k in kinds},
            "overhead_us_per_action": overhead * 1e6, "post_us_per_op": post * 1e6,
            "wait_ms_per_step": wait}) + "\n")


def reference(a):
    """The same model unpipelined in one process: every microbatch through every stage, the loss
    divided by the microbatch count, gradients accumulated, then the same optimizer step."""
    parts = a.layout.split("|")
    modules = build_stages(a, parts, range(len(parts)))
    params, opt = make_optimizer(a, modules.values())
    data = pp.SyntheticLanguage(a.vocab, a.seed)
    M, b = a.microbatches, a.global_batch // a.microbatches
    metrics = open(a.metrics, "w") if a.metrics else None
    for step in range(a.steps):
        rows = data.batch(step, a.global_batch, a.seq_len + 1)
        loss = 0.0
        for chunk in rows.split(b):
            h = chunk[:, :-1]
            for i in range(len(parts)):
                h = modules[i](h)
            mb = F.cross_entropy(h.reshape(-1, h.shape[-1]), chunk[:, 1:].reshape(-1)) / M
            mb.backward()
            loss += mb.item()
        lr, norm = clip_and_step(a, step, params, opt, lambda t: t)
        print(f"step {step + 1}/{a.steps} loss {loss:.6f} lr {lr:.3g} grad-norm {norm:.4f}",
              flush=True)
        if metrics:
            metrics.write(json.dumps({"step": step + 1, "loss": loss, "lr": lr,
                                      "grad_norm": norm}) + "\n")
    if metrics:
        metrics.close()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--layout", default="Ett|ttL", help="'|'-separated stages (E, t, L), pprun's layout")
    how = p.add_mutually_exclusive_group(required=True)
    how.add_argument("--schedule", choices=[c for c in S.__all__ if c.startswith("Schedule")],
                     help="a schedule class of torch.distributed.pipelining")
    how.add_argument("--csv", help="a CSV schedule (ppcompile --emit csv) for _load_csv")
    how.add_argument("--reference", action="store_true", help="unpipelined, in this process")
    p.add_argument("--csv-format", default="compute_only", choices=["compute_only", "compute_comms"])
    for name, default in [("hidden", 256), ("heads", 8), ("kv-heads", 4), ("ffn", 704), ("vocab", 256),
                          ("seq-len", 128), ("microbatches", 8), ("global-batch", 32), ("steps", 20),
                          ("warmup", -1), ("seed", 1234)]:
        p.add_argument("--" + name, type=int, default=default)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--rope-theta", type=float, default=10000.0)
    p.add_argument("--norm-eps", type=float, default=1e-5)
    p.add_argument("--metrics", help="JSON lines per step, then the timing summary")
    a = p.parse_args()
    if a.global_batch % a.microbatches:
        p.error("--global-batch must be a multiple of --microbatches")
    reference(a) if a.reference else pipelined(a)


if __name__ == "__main__":
    main()
