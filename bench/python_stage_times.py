#!/usr/bin/python3
"""Forward (F) and backward (B) times of pipeline stages under PyTorch's own autograd, one process.

The stages are bench/python_pipeline.py's (pprun's model): the B/F ratio autograd gives on this
machine, to hold against pprun's ("mean compute time per action" at the end of a run, or
build/bench/runtime_bench --benchmark_filter=SplitBackward for two decoder layers).

  /usr/bin/python3 bench/python_stage_times.py [--threads 1] [--ffn 704] [--reps 30]

Threads: torch.set_num_threads(--threads) and, through libopenblas's openblas_set_num_threads,
the same number of OpenBLAS threads (torch.set_num_threads does not limit OpenBLAS).
"""
import argparse
import ctypes
import ctypes.util
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import python_pipeline as pp  # noqa: E402


def openblas():
    for name in ("libopenblas.so.0", ctypes.util.find_library("openblas")):
        try:
            lib = ctypes.CDLL(name)
            lib.openblas_get_num_threads.restype = ctypes.c_int
            return lib
        except (OSError, TypeError, AttributeError):
            continue
    return None


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    for name, default in [("hidden", 256), ("heads", 8), ("kv-heads", 4), ("ffn", 704), ("vocab", 256),
                          ("seq-len", 128), ("batch", 4), ("threads", 1), ("reps", 30), ("seed", 1234)]:
        p.add_argument("--" + name, type=int, default=default)
    p.add_argument("--stages", default="t,tt,Ett,ttL", help="comma-separated stages to time")
    p.add_argument("--rope-theta", type=float, default=10000.0)
    p.add_argument("--norm-eps", type=float, default=1e-5)
    a = p.parse_args()
    blas = openblas()
    before = blas.openblas_get_num_threads() if blas else None
    torch.set_num_threads(a.threads)
    if blas:
        blas.openblas_set_num_threads(a.threads)
    print(f"python_stage_times: torch {torch.__version__}, {torch.get_num_threads()} intra-op thread(s), "
          f"OpenBLAS threads {before} -> {blas.openblas_get_num_threads() if blas else '?'}; "
          f"hidden {a.hidden}, ffn {a.ffn}, seq {a.seq_len}, batch {a.batch}; medians of {a.reps}")
    data = pp.SyntheticLanguage(a.vocab, a.seed)
    rows = data.batch(0, a.batch, a.seq_len + 1)
    stages = {s: pp.Stage(a, s, 0, 4) for s in a.stages.split(",")}
    times = {s: ([], []) for s in stages}
    for rep in range(a.reps + 3):  # stages in alternation; the first 3 rounds warm up
        for s, model in stages.items():
            x = None if "E" in s else torch.randn(a.batch, a.seq_len, a.hidden, requires_grad=True)
            t0 = time.perf_counter()
            y = model(x, rows)
            t1 = time.perf_counter()
            if "L" in s:
                y.backward()
            else:
                y.backward(torch.randn_like(y) * 1e-3)
            t2 = time.perf_counter()
            model.zero_grad(set_to_none=True)
            if rep >= 3:
                times[s][0].append(t1 - t0)
                times[s][1].append(t2 - t1)
    print(f"{'stage':>6} {'F ms':>8} {'B ms':>8} {'B/F':>6}")
    for s, (f, b) in times.items():
        mf, mb = statistics.median(f) * 1e3, statistics.median(b) * 1e3
        print(f"{s:>6} {mf:8.2f} {mb:8.2f} {mb / mf:6.2f}")


if __name__ == "__main__":
    main()
