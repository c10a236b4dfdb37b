#!/usr/bin/env python3
"""Writes a uint16 token file of documents, each ended by an end-of-document token (pprun --eod),
whose lengths follow a log-normal distribution (bench/documents.sh; docs/pprun.md, "Documents").

Why log-normal: the token counts of web-text documents and of fine-tuning examples are close to
log-normal: most documents are short, a long tail is many times the median, a few are longer than a
training sequence (which pprun --pack splits). The default, median 48 tokens and sigma 1.1 (mean
about 88, 99th percentile about 620), against sequences of 256 tokens, is a corpus where padding
every document to the sequence wastes most of the compute.

Plain Python (no numpy), seeded: the same arguments write the same bytes.

    python3 bench/make_documents.py OUT.bin [--docs N] [--median M] [--sigma S] [--vocab V]
        [--eod ID] [--seed SEED] [--max-len L]
"""
import argparse
import math
import random
import struct


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--docs", type=int, default=20000)
    ap.add_argument("--median", type=float, default=48.0)
    ap.add_argument("--sigma", type=float, default=1.1)
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--eod", type=int, default=0)
    ap.add_argument("--seed", type=int, default=41)
    ap.add_argument("--max-len", type=int, default=4096)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    lengths = []
    with open(a.out, "wb") as f:
        for _ in range(a.docs):
            n = max(1, min(a.max_len, int(rng.lognormvariate(math.log(a.median), a.sigma))))
            lengths.append(n + 1)
            ids = [rng.randrange(1, a.vocab) for _ in range(n)]
            ids = [i if i != a.eod else (i + 1) % a.vocab for i in ids]
            f.write(struct.pack(f"<{n + 1}H", *ids, a.eod))
    lengths.sort()
    print(f"{a.out}: {a.docs} documents, {sum(lengths)} tokens; lengths (eod included): "
          f"median {lengths[len(lengths) // 2]}, mean {sum(lengths) / len(lengths):.1f}, "
          f"p90 {lengths[int(0.9 * len(lengths))]}, p99 {lengths[int(0.99 * len(lengths))]}, "
          f"max {lengths[-1]}")


if __name__ == "__main__":
    main()
