#!/usr/bin/env python3
"""Pick the fastest XLA flag setting of a training step with the model, then
measure every setting to see whether the pick was right.

For each of a few real training steps (models from make_programs.py,
written in plain JAX) and each of several XLA flag settings (passed per
compile as compiler_options: passes switched off, which changes XLA's
fusion decisions):

1. predict: the Python API compiles the step for each setting and ranks the
   settings by predicted runtime (tpuperf_cli.compare), without running them;
2. measure: the same optimized programs go through the tools,
   `hlo-split | featurize | measure --backend cpu | predict | score`, which times every
   kernel alone on XLA:CPU and sums the kernels x their counts (what the
   model is trained to predict);
3. run: each compiled step also runs end to end on real inputs (the
   minimum over repeated runs of this process's CPU time).

It reports, per step, the predicted and measured ranking, whether the
model's pick is the fastest setting by kernel sum and end to end, and how
much slower the pick is than the best ("regret").

The whole script runs on one CPU (pinned before jax starts), so that the
compiled programs, the kernel measurements (measure's defaults: one CPU,
the process's CPU time) and the end-to-end runs all see XLA:CPU on one
CPU.

    .venv/bin/python examples/xla_flags.py                 # writes examples/xla_flags.md
    .venv/bin/python examples/xla_flags.py --steps autoenc_s_train --out /tmp/x.md

About 7.5 minutes on the project's 2-core machine, shared with other work
(half of it compiling the 15 programs, most of the rest measuring
kernels; measure's cache in --cache makes a second run faster).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

# XLA flag settings, as compiler_options of jax's .compile(); each changes
# the optimized HLO of these steps (make_programs.py VARIANTS, and one more).
SETTINGS: dict[str, dict[str, str]] = {
    "default": {},
    "no fusion": {"xla_disable_hlo_passes": "fusion"},
    "no algsimp": {"xla_disable_hlo_passes": "algsimp"},
    "no tree reduction": {"xla_disable_hlo_passes": "tree_reduction_rewriter"},
    "no algsimp, no tree reduction": {"xla_disable_hlo_passes": "algsimp,tree_reduction_rewriter"},
}
# Training steps of the random split's test programs (the bundled model did
# not train on them; some of their variants it did, see the report).
STEPS = ("autoenc_s_train", "unet_s_train", "vit_s_train")


def tool(name):
    return [sys.executable, "-m", "tpuperf_cli", name]


def measure_programs(files, cache):
    """{program: program record} from hlo-split | featurize | measure |
    predict | score (score wants pred_ns; the tools' prediction is checked
    against the API's)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    cmds = [tool("hlo-split") + ["-q"] + [str(f) for f in files],
            tool("featurize") + ["-q"],
            tool("measure") + ["--backend", "cpu", "--cache-dir", str(cache)],
            tool("predict"),
            tool("score") + ["--format", "json"]]
    procs = []
    prev = None
    for n, cmd in enumerate(cmds):
        p = subprocess.Popen(cmd, stdin=prev, stdout=subprocess.PIPE, env=env,
                             stderr=None if n == 2 else subprocess.DEVNULL)
        if prev is not None:
            prev.close()
        prev = p.stdout
        procs.append(p)
    out = procs[-1].stdout.read()
    codes = [p.wait() for p in procs]
    if any(codes):
        raise SystemExit(f"xla_flags: the measure pipeline failed (exit codes {codes})")
    return {r["program"]: r for r in map(json.loads, out.decode().splitlines())}


def run_time(compiled, args, min_time=0.2, runs=5):
    """Minimum over `runs` runs of the process CPU time per call, each run
    repeating the call until it has taken min_time seconds."""
    import jax

    out = compiled(*args)
    jax.block_until_ready(out)
    best = float("inf")
    for _ in range(runs):
        n, start = 0, time.process_time_ns()
        while True:
            jax.block_until_ready(compiled(*args))
            n += 1
            elapsed = time.process_time_ns() - start
            if elapsed >= min_time * 1e9:
                break
        best = min(best, elapsed / n)
    return best


def inputs(specs):
    """Real arrays for abstract arguments: small random floats, zero ints."""
    import jax
    import numpy as np

    rng = np.random.default_rng(0)

    def make(s):
        if np.issubdtype(s.dtype, np.floating) or s.dtype == jax.numpy.bfloat16:
            return jax.numpy.asarray(rng.normal(0, 0.1, s.shape).astype(np.float32), s.dtype)
        return jax.numpy.zeros(s.shape, s.dtype)

    return jax.tree_util.tree_map(make, specs)


def tau(a, b):
    """Kendall's tau between two score lists (ties count half)."""
    n, s = len(a), 0.0
    for i in range(n):
        for j in range(i + 1, n):
            x = (a[i] - a[j]) * (b[i] - b[j])
            s += 1 if x > 0 else (-1 if x < 0 else 0)
    return s / (n * (n - 1) / 2) if n > 1 else float("nan")


def ms(ns):
    return f"{ns / 1e6:.3f}"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", nargs="+", default=list(STEPS),
                    help=f"programs of make_programs.py (default: {' '.join(STEPS)})")
    ap.add_argument("--out", default=str(HERE / "xla_flags.md"), help="markdown report")
    ap.add_argument("--cache", default=None,
                    help="measure's cache directory (default: a temporary one)")
    a = ap.parse_args(argv)

    os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[-1]})     # before jax starts
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    sys.path[:0] = [str(ROOT), str(HERE)]
    import jax
    import make_programs as mp

    import tpuperf_cli as tp

    mp.setup_jax()
    t_start = time.time()
    load_start = os.getloadavg()[0]
    split = json.loads((HERE / "splits" / "random.json").read_text())
    trained_on = set(split["train"]) | set(split["valid"])
    variant_of = {json.dumps(v, sort_keys=True): k for k, v in mp.VARIANTS.items()}
    specs = {s.name: s for s in mp.all_specs()}
    tmp = Path(tempfile.mkdtemp(prefix="xla_flags-"))
    cache = Path(a.cache) if a.cache else tmp / "cache"
    results = {}
    files = []
    for step in a.steps:
        if step not in specs:
            raise SystemExit(f"xla_flags: unknown program {step} (make_programs.py --list)")
        fn, args = specs[step].build()
        lowered = jax.jit(fn).lower(*args)
        real = inputs(args)
        compiled = {}
        t0 = time.time()
        for setting, opts in SETTINGS.items():
            compiled[setting] = lowered.compile(compiler_options=opts) if opts else lowered.compile()
        cmp = tp.compare(compiled)
        t_pred = time.time() - t0
        rows = {}
        for est in cmp.estimates:
            f = tmp / f"{step}__{est.program.replace(' ', '_').replace(',', '')}.hlo"
            f.write_text(est.hlo)
            files.append(f)
            variant = variant_of.get(json.dumps(SETTINGS[est.program], sort_keys=True))
            corpus_name = step if variant == "base" else f"{step}_{variant}" if variant else None
            rows[est.program] = {"pred_ns": est.total_ns, "kernels": len(est.kernels),
                                 "file": f.stem,
                                 "trained": corpus_name in trained_on if corpus_name else False}
        for setting, c in compiled.items():
            rows[setting]["run_ns"] = run_time(c, real)
        results[step] = {"rows": rows, "compare": cmp, "predict_s": t_pred}
        print(f"xla_flags: {step}: predicted {len(SETTINGS)} settings in {t_pred:.1f}s "
              f"(compile included); best {cmp.best.program}", file=sys.stderr)

    print(f"xla_flags: measuring {len(files)} programs' kernels ...", file=sys.stderr)
    t0 = time.time()
    measured = measure_programs(files, cache)
    t_measure = time.time() - t0
    for step, r in results.items():
        for setting, row in r["rows"].items():
            m = measured.get(row["file"], {})
            row["measured_ns"] = m.get("runtime_ns")
            if m and abs(m["pred_ns"] - row["pred_ns"]) > 1e-6 * row["pred_ns"]:
                raise SystemExit(f"xla_flags: {row['file']}: the tools predict {m['pred_ns']} ns, "
                                 f"the API {row['pred_ns']} ns")
            row["measured_kernels"] = m.get("measured", m.get("kernels") if "runtime_ns" in m else 0)
    load = (load_start, os.getloadavg()[0])
    report = render(results, t_measure, time.time() - t_start, a.steps, load)
    Path(a.out).write_text(report)
    print(report)
    print(f"xla_flags: wrote {a.out} in {time.time() - t_start:.0f}s", file=sys.stderr)
    return 0


def render(results, t_measure, t_total, steps, load):
    import jax
    import jaxlib

    lines = ["# Choosing XLA flags with the model: was its pick right?", "",
             "Written by `examples/xla_flags.py` (run it to redo this page). For each",
             "training step, the settings are ranked by the bundled model's",
             "prediction (`tpuperf_cli.compare`), then measured: **kernel sum** is",
             "`hlo-split | featurize | measure --backend cpu | predict | score`",
             "(every kernel timed alone with measure's defaults: on one CPU, in",
             "the process's CPU time; times its count: what the model is trained",
             "to predict); **end to end** runs the whole compiled step on",
             "real inputs (minimum of 5 runs, process CPU time). Everything ran",
             "pinned to one CPU. Times are in ms. \"trained\" marks a program whose",
             "exact HLO is in the bundled model's training or validation data",
             "(`examples/splits/random.json`).", ""]
    picks_sum = picks_run = 0
    for step in steps:
        r = results[step]
        rows = r["rows"]
        order = [e.program for e in r["compare"].estimates]
        lines += [f"## {step}", "",
                  "| setting | kernels | predicted | kernel sum | end to end | end to end / kernel sum | trained |",
                  "|---|---:|---:|---:|---:|---:|:---:|"]
        for s in order:
            row = rows[s]
            meas = ms(row["measured_ns"]) if row["measured_ns"] else \
                f"({row['measured_kernels']} of {row['kernels']} measured)"
            ratio = f"{row['run_ns'] / row['measured_ns']:.2f}" if row["measured_ns"] else "-"
            lines.append(f"| {s} | {row['kernels']} | {ms(row['pred_ns'])} | {meas} | "
                         f"{ms(row['run_ns'])} | {ratio} | {'yes' if row['trained'] else ''} |")
        pick = order[0]
        complete = [s for s in order if rows[s]["measured_ns"]]
        lines.append("")
        if len(complete) == len(order):
            best_sum = min(order, key=lambda s: rows[s]["measured_ns"])
            regret = 100 * (rows[pick]["measured_ns"] / rows[best_sum]["measured_ns"] - 1)
            t_sum = tau([rows[s]["pred_ns"] for s in order], [rows[s]["measured_ns"] for s in order])
            picks_sum += pick == best_sum
            lines.append(f"- By kernel sum: the model picks **{pick}**; the fastest is "
                         f"**{best_sum}** ({'right' if pick == best_sum else 'wrong'}; the pick "
                         f"is {regret:.1f}% slower than the best). Kendall's tau of the "
                         f"predicted against the measured order: {t_sum:.2f}.")
        else:
            lines.append("- By kernel sum: some kernels could not be measured; no verdict.")
        best_run = min(order, key=lambda s: rows[s]["run_ns"])
        regret = 100 * (rows[pick]["run_ns"] / rows[best_run]["run_ns"] - 1)
        t_run = tau([rows[s]["pred_ns"] for s in order], [rows[s]["run_ns"] for s in order])
        picks_run += pick == best_run
        lines.append(f"- End to end: the fastest is **{best_run}** "
                     f"({'right' if pick == best_run else 'wrong'}; the pick is {regret:.1f}% "
                     f"slower than the best). Kendall's tau: {t_run:.2f}.")
        diffs = r["compare"].table(top=3).split("\n\n", 1)
        if len(diffs) > 1:
            lines += ["", "Kernels whose predicted time differs most from the predicted "
                      "fastest setting (`tpuperf compare` prints the same):", "", "```",
                      diffs[1].rstrip(), "```"]
        lines.append("")
    n = len(steps)
    far = [(step, s) for step in steps for s, row in results[step]["rows"].items()
           if row["measured_ns"] and row["run_ns"] > 2 * row["measured_ns"]]
    lines += ["## Summary", "",
              f"- The model's pick was the fastest setting by kernel sum for {picks_sum} of "
              f"{n} steps, and end to end for {picks_run} of {n}."]
    if far:
        lines.append("- End to end took over twice the kernel sum for "
                     + ", ".join(f"{step} ({s})" for step, s in far)
                     + ": the whole program runs slower than its kernels timed one by one "
                       "(measure compiles each kernel anew, alone), so neither the kernel sum "
                       "nor a model trained on such sums can see it.")
    lines += ["- Settings: " + "; ".join(f"{k}: `{v or 'XLA defaults'}`"
                                         for k, v in SETTINGS.items()) + ".",
              f"- Measuring the kernels took {t_measure:.0f} s, the whole script "
              f"{t_total:.0f} s, on {os.cpu_count()} CPUs at a load average of "
              f"{load[0]:.1f} (start) and {load[1]:.1f} (end), other work included; "
              f"jax/jaxlib {jax.__version__}/{jaxlib.__version__}.",
              ""]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
