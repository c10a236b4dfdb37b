"""Where an --ep step's time goes, from pprun's --trace (issue 40, bench/moe_overlap.sh).

    python bench/a2a_trace.py TRACE.json [RANK]

Reads one rank's lanes of the Chrome trace (docs/trace-format.md; the all-to-all lanes:
docs/pprun.md, "All-to-all time") and prints, per OVERLAP_F_B (the mean over the step's pairs)
or per action when the parts ran one after the other (--overlap off):

- each part's all-to-all time and the rest of it ("compute": the part's span less its
  all-to-alls; on a core shared by the two parts this includes waiting for the core);
- the time both parts were in an all-to-all at once, both computed at once, and the exposed wall
  time (in an all-to-all while no part computed);
- the bounds a pair cannot beat on one core per rank: the two parts' compute (the core's work)
  and each part's own chain (its compute and its all-to-alls, which follow each other).

Needs only Python's standard library.
"""
import json
import sys


def union(spans):
    out = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return out


def length(spans):
    return sum(b - a for a, b in union(spans))


def clip(spans, lo, hi):
    return [(max(a, lo), min(b, hi)) for a, b in spans if min(b, hi) > max(a, lo)]


def minus(spans, cut):
    out, cut = [], union(cut)
    for a, b in union(spans):
        at = a
        for c, d in cut:
            if d <= at or c >= b:
                continue
            if c > at:
                out.append((at, c))
            at = max(at, d)
        if at < b:
            out.append((at, b))
    return out


def both(x, y):
    return length(x) + length(y) - length(x + y)


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    with open(sys.argv[1]) as f:
        trace = json.load(f)
    rank = int(sys.argv[2]) if len(sys.argv) == 3 else 0
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    slices = [e for e in events if e.get("ph") == "X" and e.get("pid") == rank]
    actions = sorted((e for e in slices if e["tid"] == 0), key=lambda e: e["ts"])
    if not actions:
        sys.exit(f"{sys.argv[1]}: no actions of rank {rank}")
    a2a = {2: [], 3: []}  # tid 2: the forward communicator's, 3: the backward one's
    parts = {2: [], 3: []}
    for e in slices:
        if e["tid"] in a2a:
            span = (e["ts"], e["ts"] + e["dur"])
            (a2a if e["cat"] == "all_to_all" else parts)[e["tid"]].append(span)
    pair = dict(n=0, span=0, cf=0, af=0, cb=0, ab=0, both_a2a=0, both_compute=0, exposed=0)
    alone = dict(n=0, span=0, a2a=0)
    for e in actions:
        lo, hi = e["ts"], e["ts"] + e["dur"]
        fa, ba = clip(a2a[2], lo, hi), clip(a2a[3], lo, hi)
        if e["cat"] == "OVERLAP_F_B" and clip(parts[2], lo, hi):
            fc = minus(clip(parts[2], lo, hi), fa)
            bc = minus(clip(parts[3], lo, hi), ba)
            pair["n"] += 1
            pair["span"] += hi - lo
            pair["cf"] += length(fc)
            pair["af"] += length(fa)
            pair["cb"] += length(bc)
            pair["ab"] += length(ba)
            pair["both_a2a"] += both(fa, ba)
            pair["both_compute"] += both(fc, bc)
            pair["exposed"] += length(minus(fa + ba, fc + bc))
        else:
            alone["n"] += 1
            alone["span"] += hi - lo
            alone["a2a"] += length(fa + ba)
    ms = lambda us: f"{us / 1e3:.1f}"
    end = max(e["ts"] + e["dur"] for e in actions)
    print(f"rank {rank}: actions from {ms(actions[0]['ts'])} to {ms(end)} ms "
          f"({ms(end - actions[0]['ts'])} ms)")
    if alone["n"]:
        n = alone["n"]
        print(f"  {n} actions run alone: {ms(alone['span'] / n)} ms each, "
              f"{ms(alone['a2a'] / n)} ms of it in all-to-alls")
    if pair["n"]:
        p = {k: v / pair["n"] for k, v in pair.items()}
        print(f"  {pair['n']} OVERLAP_F_B run concurrently: {ms(p['span'])} ms each (means)")
        print(f"    forward part: compute {ms(p['cf'])} ms, all-to-alls {ms(p['af'])} ms; "
              f"backward part: compute {ms(p['cb'])} ms, all-to-alls {ms(p['ab'])} ms")
        print(f"    both parts in all-to-alls {ms(p['both_a2a'])} ms, both computing "
              f"{ms(p['both_compute'])} ms, exposed wall (all-to-all, no part computing) "
              f"{ms(p['exposed'])} ms")
        print(f"    bounds: the two parts' compute {ms(p['cf'] + p['cb'])} ms; each part's chain: "
              f"forward {ms(p['cf'] + p['af'])} ms, backward {ms(p['cb'] + p['ab'])} ms")


if __name__ == "__main__":
    main()
