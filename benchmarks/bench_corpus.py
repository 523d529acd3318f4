#!/usr/bin/env python3
"""What the committed corpus covers: kernels per source and per opcode.

Reads examples/corpus/kernels/*.zst (the example programs' kernels) and
examples/corpus/generated/*.zst (`tpuperf generate`'s, by source) and
prints, per source: kernels, distinct kernels (by fingerprint), those with
a runtime, failures, distinct record opcodes, the runtime's 10th, 50th
and 90th percentiles and the median of measure's noise; then the distinct
measured kernels of each record opcode per source (a fusion counts as
"fusion"; generated ops kernels also by the opcode they were made for,
their program "ops:OPCODE"), and the opcodes of featurize's table that
XLA:CPU runs but no kernel holds. Figures only: the corpus is the
reference, so there is nothing to compare within the run.

    .venv/bin/python benchmarks/bench_corpus.py [--top 40] [--json]
"""

import argparse
import collections
import glob
import json
import os
import statistics
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from tpuperf_cli.stream import read_records  # noqa: E402

CORPUS = os.path.join(ROOT, "examples", "corpus")


def shards():
    """(source, path) of every kernel shard of the corpus."""
    for path in sorted(glob.glob(os.path.join(CORPUS, "kernels", "*.zst"))):
        yield "programs", path
    for path in sorted(glob.glob(os.path.join(CORPUS, "generated", "*.zst"))):
        yield os.path.basename(path).split("-")[0], path


def percentile(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * (len(xs) - 1) + 0.5))] if xs else float("nan")


def survey():
    per = collections.defaultdict(lambda: {"kernels": 0, "failed": 0, "fps": set(), "ok": {}})
    made_for = collections.Counter()
    for source, path in shards():
        entry = per[source]
        for r in read_records(path):
            entry["kernels"] += 1
            fp = r.get("fingerprint")
            entry["fps"].add(fp)
            if r.get("runtime_ns"):
                entry["ok"].setdefault(fp, r)
            elif "error" in r:
                entry["failed"] += 1
    seen = set()
    out = {}
    opcodes = collections.defaultdict(collections.Counter)
    for source, entry in per.items():
        ok = entry["ok"]
        for fp, r in ok.items():
            opcodes[r.get("opcode") or "?"][source] += 1
            if source == "ops" and ":" in str(r.get("program")):
                made_for[r["program"].split(":", 1)[1]] += 1
        runtimes = [r["runtime_ns"] for r in ok.values()]
        noise = [r["noise"] for r in ok.values() if r.get("noise") is not None]
        out[source] = {"kernels": entry["kernels"], "distinct": len(entry["fps"]),
                       "distinct_measured": len(ok), "new_distinct": len(set(ok) - seen),
                       "failed": entry["failed"],
                       "opcodes": len({r.get("opcode") for r in ok.values()}),
                       "runtime_us_p10": percentile(runtimes, 0.1) / 1e3,
                       "runtime_us_p50": percentile(runtimes, 0.5) / 1e3,
                       "runtime_us_p90": percentile(runtimes, 0.9) / 1e3,
                       "noise_median": statistics.median(noise) if noise else None}
        seen |= set(ok)
    return out, len(seen), opcodes, made_for


def missing_opcodes(covered):
    """Opcodes of featurize's table that the ops source generates (XLA:CPU
    runs them) but that no kernel of the corpus holds."""
    from tpuperf_cli.features.opcodes import OPCODE_IDS
    from tpuperf_cli.generate.ops import NOT_GENERATED

    skipped = {op for ops in NOT_GENERATED.values() for op in ops.split()}
    return sorted(op for op in OPCODE_IDS if op not in skipped and op not in covered)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--top", type=int, default=40, help="opcodes listed (most kernels first)")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = ap.parse_args()
    sources, total, opcodes, made_for = survey()
    covered = set(opcodes) | set(made_for)
    missing = missing_opcodes(covered)
    if args.json:
        print(json.dumps({"sources": sources, "distinct_measured": total,
                          "opcodes": {k: dict(v) for k, v in opcodes.items()},
                          "ops_made_for": dict(made_for), "missing": missing}, indent=1))
        return
    names = list(sources)
    print(f"{total} distinct measured kernels in all; {len(opcodes)} record opcodes, "
          f"{len(made_for)} opcodes the ops source made kernels for")
    head = (f"{'source':9s} {'kernels':>8s} {'distinct':>8s} {'measured':>8s} {'new':>7s} "
            f"{'failed':>6s} {'opcodes':>7s} {'p10 us':>8s} {'p50 us':>8s} {'p90 us':>9s} {'noise':>6s}")
    print(head)
    print("-" * len(head))
    for name, s in sources.items():
        noise = f"{100 * s['noise_median']:5.1f}%" if s["noise_median"] is not None else "     -"
        print(f"{name:9s} {s['kernels']:8d} {s['distinct']:8d} {s['distinct_measured']:8d} "
              f"{s['new_distinct']:7d} {s['failed']:6d} {s['opcodes']:7d} {s['runtime_us_p10']:8.1f} "
              f"{s['runtime_us_p50']:8.1f} {s['runtime_us_p90']:9.1f} {noise}")
    print("('new': distinct kernels no source listed before it holds)")
    print()
    print(f"distinct measured kernels per record opcode (top {args.top}):")
    print(f"{'opcode':24s} " + " ".join(f"{n:>9s}" for n in names))
    ranked = sorted(opcodes.items(), key=lambda kv: -sum(kv[1].values()))
    for op, counts in ranked[:args.top]:
        print(f"{op:24s} " + " ".join(f"{counts.get(n, 0):9d}" for n in names))
    if len(ranked) > args.top:
        print(f"... and {len(ranked) - args.top} more")
    if made_for:
        few = sorted(made_for.items(), key=lambda kv: kv[1])[:10]
        print(f"\nops source, kernels per opcode it made them for: median "
              f"{statistics.median(made_for.values()):.0f}, fewest: "
              + ", ".join(f"{k} {v}" for k, v in few))
    print("\nopcodes XLA:CPU runs that no kernel holds: " + (", ".join(missing) or "none"))


if __name__ == "__main__":
    main()
