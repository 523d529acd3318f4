#!/usr/bin/env python3
"""Build the CPU training corpus from the example programs.

Every program listed in examples/programs.json (optimized XLA:CPU HLO in
examples/hlo/) goes through the project's own tools,

    hlo-split examples/hlo/P.hlo | measure --backend cpu (steady defaults:
                                   one pinned CPU, process clock)       ->  kernels/P.zst
    featurize < kernels/P.zst                                            ->  graphs/P.zst

so each program gets one zstd shard of kernel records with their measured
runtimes (runtime_ns, runs, noise, target; or error), and one shard of graph records
(the same records plus node/edge features) that `tpuperf train` reads.
featurize passes runtime fields through, so featurizing after measuring is the
same as `hlo-split | featurize | measure` in one pipe, and graphs can be
rebuilt with a newer featurize without measuring again.

A kernel seen in several programs (same fingerprint) is timed once: measure's
cache (--cache-dir, default examples/corpus/.cache, gitignored) holds every
measurement and makes an interrupted build resume where it stopped. Every
program's shard keeps all its kernels, repeated ones included.

Layout of examples/corpus/ (committed unless said):
    manifest.json     what was built: target machine, options, per-program
                      kernel counts, totals, failures, sizes, timings
    kernels/P.zst     kernel records + runtimes, one shard per program
    graphs/P.zst      graph records + runtimes, one shard per program
                      (committed when all graph shards fit in 30 MB;
                      otherwise gitignored and rebuilt with `featurize`)
    .cache/           measure's sqlite cache (gitignored)

Splits: examples/splits/random.json and examples/splits/manual.json (written
by examples/make_programs.py) split the programs, never kernels, into
"train", "valid" and "test" lists of program names, as the paper does:
"random" draws programs at random; "manual" holds out whole model families
(so the test programs are architectures the model never saw). The shard of
program P is graphs/P.zst; `--list SPLIT SET` prints the shard paths of one
set, e.g. `tpuperf train --data $(python examples/build_corpus.py --list
random train)`.

Rebuilding:
    python examples/build_corpus.py featurize     # graphs/ from kernels/ (no timing)
    python examples/build_corpus.py --force       # re-split and re-featurize all;
                                                  # timings come from .cache/, which
                                                  # is first filled from kernels/*.zst
                                                  # (same target only)
    rm -r examples/corpus/.cache && python examples/build_corpus.py --force
                                                  # measure everything again
New programs in programs.json are measured by a plain run (existing kernel
shards are kept); kernels already in the cache are not timed again.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CORPUS = HERE / "corpus"
GRAPH_LIMIT = 30 * 1024 * 1024


def tool(name):
    return [sys.executable, "-m", "tpuperf_cli", name]


def log(msg):
    print(f"build_corpus: {msg}", file=sys.stderr, flush=True)


def load_programs(only=None):
    manifest = json.loads((HERE / "programs.json").read_text())
    programs = manifest["programs"]
    if only:
        wanted = set(only)
        programs = [p for p in programs if p["name"] in wanted]
        missing = wanted - {p["name"] for p in programs}
        if missing:
            sys.exit(f"build_corpus: not in examples/programs.json: {', '.join(sorted(missing))}")
    return programs


def _write_atomic(records_pipe, dest):
    """Copy a record stream (a pipe) into dest (.zst), atomically."""
    sys.path.insert(0, str(ROOT))
    from tpuperf_cli.stream import RecordWriter, read_records

    tmp = dest.with_suffix(".tmp")
    n = 0
    with RecordWriter(str(tmp), compress=True) as w:
        for r in read_records(records_pipe, name=str(dest)):
            w.write(r)
            n += 1
    os.replace(tmp, dest)
    return n


def measure_program(prog, args):
    src = HERE / prog["file"]
    dest = CORPUS / "kernels" / f"{prog['name']}.zst"
    if dest.exists() and not args.force:
        return None
    t0 = time.time()
    split = subprocess.Popen(tool("hlo-split") + ["-p", prog["name"], str(src)],
                             stdout=subprocess.PIPE)
    cmd = tool("measure") + ["--backend", "cpu", "--min-time", args.min_time,
                             "--samples", str(args.samples), "--cache-dir", str(args.cache_dir),
                             "--cpus", str(args.cpus), "--clock", args.clock, "--no-progress"]
    if args.retry_errors:
        cmd.append("--retry-errors")
    meas = subprocess.Popen(cmd, stdin=split.stdout, stdout=subprocess.PIPE)
    split.stdout.close()
    n = _write_atomic(meas.stdout, dest)
    if split.wait() != 0 or meas.wait() != 0:
        dest.unlink(missing_ok=True)
        raise SystemExit(f"build_corpus: {prog['name']}: hlo-split or measure failed")
    log(f"{prog['name']}: {n} kernels measured in {time.time() - t0:.1f}s")
    return time.time() - t0


def seed_cache(cache_dir):
    """Put the runtimes of the committed kernel shards into measure's cache,
    so that a fresh checkout rebuilding with --force times only what is new
    (an entry counts only for the same target: another machine measures
    afresh)."""
    sys.path.insert(0, str(ROOT))
    from tpuperf_cli.measure.cache import Cache
    from tpuperf_cli.measure.target import METHOD, target_key
    from tpuperf_cli.stream import read_records

    cache = Cache(str(cache_dir))
    added = 0
    try:
        for shard in sorted((CORPUS / "kernels").glob("*.zst")):
            for r in read_records(str(shard)):
                if "runtime_ns" not in r or not r.get("target") or not r.get("fingerprint"):
                    continue
                if r["target"].get("method") != METHOD:
                    continue  # timed another way: measured afresh
                # the fingerprint hlo-split wrote is that of the text, measure's key
                key = target_key(r["target"])
                if cache.get(r["fingerprint"], key) is None:
                    cache.put(r["fingerprint"], key, r["target"], r["runtime_ns"], r["runs"],
                              noise=r.get("noise"))
                    added += 1
    finally:
        cache.close()
    if added:
        log(f"cache: {added} runtimes taken from the committed kernel shards")


def featurize_program(prog, out_dir):
    src = CORPUS / "kernels" / f"{prog['name']}.zst"
    dest = out_dir / f"{prog['name']}.zst"
    with open(src, "rb") as f:
        feat = subprocess.Popen(tool("featurize"), stdin=f, stdout=subprocess.PIPE)
        n = _write_atomic(feat.stdout, dest)
        if feat.wait() != 0:
            dest.unlink(missing_ok=True)
            raise SystemExit(f"build_corpus: {prog['name']}: featurize failed")
    return n


def summarize(programs, args, measure_seconds):
    sys.path.insert(0, str(ROOT))
    from collections import Counter

    from tpuperf_cli.stream import read_records

    old = {}
    mpath = CORPUS / "manifest.json"
    if mpath.exists():
        old = json.loads(mpath.read_text())
    from tpuperf_cli.measure.check import pick_references

    per_program, fingerprints, ok_fps, failed = [], set(), set(), Counter()
    measured = []
    target = None
    kernels = 0
    for prog in programs:
        shard = CORPUS / "kernels" / f"{prog['name']}.zst"
        if not shard.exists():
            continue
        recs = list(read_records(str(shard)))
        fps = {r["fingerprint"] for r in recs}
        n_ok = sum("runtime_ns" in r for r in recs)
        for r in recs:
            if "runtime_ns" in r:
                measured.append(r)
                ok_fps.add(r["fingerprint"])
                target = target or r.get("target")
            elif r.get("error"):
                failed[r["error"].split(":", 1)[0]] += 1
        fingerprints |= fps
        kernels += len(recs)
        graph = CORPUS / "graphs" / f"{prog['name']}.zst"
        per_program.append({
            "name": prog["name"], "family": prog.get("family"), "kernels": len(recs),
            "distinct": len(fps), "measured": n_ok, "failed": len(recs) - n_ok,
            "runtime_ns_sum": sum(r.get("runtime_ns", 0) * r.get("count", 1) for r in recs),
            "kernel_shard": str(shard.relative_to(HERE)), "kernel_bytes": shard.stat().st_size,
            "graph_shard": str(graph.relative_to(HERE)),
            "graph_bytes": graph.stat().st_size if graph.exists() else None,
        })
    seconds = measure_seconds or {}
    kb = sum(p["kernel_bytes"] for p in per_program)
    gb = sum(p["graph_bytes"] or 0 for p in per_program)
    manifest = {
        "built_by": "examples/build_corpus.py",
        "target": target,
        "measure_options": {"backend": "cpu", "min_time": args.min_time, "samples": args.samples,
                            "cpus": args.cpus, "clock": args.clock},
        "programs": len(per_program),
        "kernels": kernels,
        "distinct_kernels": len(fingerprints),
        "distinct_measured": len(ok_fps),
        "failed_kernels": dict(failed),
        "kernel_shards_mb": round(kb / 2**20, 2),
        "graph_shards_mb": round(gb / 2**20, 2) if gb else None,
        "graph_shards_committed": bool(gb) and gb <= GRAPH_LIMIT,
        # wall time of this build's measure step: kernels found in the cache
        # cost only the split and a cache look-up, so this is not the time
        # it takes to time the corpus from scratch (see the README)
        "last_build_measure_seconds": (round(sum(seconds.values()), 1) if seconds
                                       else old.get("last_build_measure_seconds")),
        # this machine's reference kernels, for `tpuperf machine --check`
        "reference_kernels": pick_references(measured),
        # bench_measure_noise.py's figures on the machine that measured it
        "measurement_noise": (json.loads(Path(args.noise_report).read_text())
                              if args.noise_report else old.get("measurement_noise")),
        "median_kernel_noise": (statistics.median(r["noise"] for r in measured if "noise" in r)
                                if any("noise" in r for r in measured) else None),
        "splits": {"random": "examples/splits/random.json",
                   "manual": "examples/splits/manual.json"},
        "per_program": per_program,
    }
    mpath.write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def write_gitignore(commit_graphs):
    lines = ["# written by examples/build_corpus.py", ".cache/", "*.tmp"]
    if not commit_graphs:
        lines.append("graphs/")
    (CORPUS / ".gitignore").write_text("\n".join(lines) + "\n")


def list_split(split, which):
    spec = json.loads((HERE / "splits" / f"{split}.json").read_text())
    if which not in spec:
        sys.exit(f"build_corpus: {split}.json has no set {which!r} (has: {', '.join(spec)})")
    kind = "graphs"
    for name in spec[which]:
        print(os.path.relpath(CORPUS / kind / f"{name}.zst"))


def main(argv=None):
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n", 2)[2],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("steps", nargs="*", metavar="STEP",
                    help="measure, featurize and/or manifest (default: measure featurize); "
                         "'featurize' alone rebuilds graphs/*.zst from the committed "
                         "kernels/*.zst; 'manifest' only rewrites manifest.json")
    ap.add_argument("--only", nargs="+", metavar="PROGRAM", help="only these programs")
    ap.add_argument("--min-time", default="0.5ms",
                    help="measure --min-time: shortest sample (default 0.5ms)")
    ap.add_argument("--samples", type=int, default=15, help="measure --samples (default 15)")
    ap.add_argument("--cpus", type=int, default=1,
                    help="measure --cpus (default 1: one pinned CPU, one XLA thread)")
    ap.add_argument("--clock", default="auto", choices=["auto", "wall", "process"],
                    help="measure --clock (default auto: on CPU the CPU time of the pinned "
                         "process, steady on a shared machine)")
    ap.add_argument("--cache-dir", type=Path, default=CORPUS / ".cache",
                    help="measure's cache (default examples/corpus/.cache)")
    ap.add_argument("--graphs-dir", type=Path, default=None,
                    help="where featurize writes graph shards (default examples/corpus/graphs)")
    ap.add_argument("--retry-errors", action="store_true",
                    help="measure again kernels whose cached measurement failed")
    ap.add_argument("--force", action="store_true",
                    help="rebuild kernel shards that exist (measurements still come from the cache)")
    ap.add_argument("--noise-report", metavar="JSON",
                    help="bench_measure_noise.py --json output to record in the manifest")
    ap.add_argument("--list", nargs=2, metavar=("SPLIT", "SET"),
                    help="print the graph shard paths of one split set (random|manual, "
                         "train|valid|test) and exit")
    args = ap.parse_args(argv)
    args.steps = args.steps or ["measure", "featurize"]
    bad = set(args.steps) - {"measure", "featurize", "manifest"}
    if bad:
        ap.error(f"unknown step(s): {', '.join(sorted(bad))} (choose measure, featurize, manifest)")
    if args.list:
        list_split(*args.list)
        return
    programs = load_programs(args.only)
    (CORPUS / "kernels").mkdir(parents=True, exist_ok=True)
    seconds = {}
    if "measure" in args.steps:
        seed_cache(args.cache_dir)
        log(f"measuring {len(programs)} programs (min-time {args.min_time}, "
            f"samples {args.samples})")
        t0 = time.time()
        for prog in programs:
            s = measure_program(prog, args)
            if s is not None:
                seconds[prog["name"]] = s
        log(f"measured in {time.time() - t0:.0f}s")
    if "featurize" in args.steps:
        out = args.graphs_dir or CORPUS / "graphs"
        out.mkdir(parents=True, exist_ok=True)
        t0 = time.time()
        for prog in programs:
            if (CORPUS / "kernels" / f"{prog['name']}.zst").exists():
                featurize_program(prog, out)
        log(f"featurized in {time.time() - t0:.0f}s")
    if not args.only:  # shards of programs no longer in programs.json go
        names = {p["name"] for p in load_programs()}
        for d in (CORPUS / "kernels", args.graphs_dir or CORPUS / "graphs"):
            for f in d.glob("*.zst") if d.exists() else []:
                if f.stem not in names:
                    f.unlink()
                    log(f"removed stale {f.relative_to(ROOT) if f.is_relative_to(ROOT) else f}")
    manifest = summarize(load_programs(), args, seconds)
    write_gitignore(manifest["graph_shards_committed"])
    log(f"{manifest['programs']} programs, {manifest['kernels']} kernels, "
        f"{manifest['distinct_kernels']} distinct ({manifest['distinct_measured']} measured), "
        f"kernel shards {manifest['kernel_shards_mb']} MB, graph shards "
        f"{manifest['graph_shards_mb']} MB")


if __name__ == "__main__":
    main()
