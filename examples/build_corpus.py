#!/usr/bin/env python3
"""Build the CPU training corpus from the example programs.

Every program listed in examples/programs.json (optimized XLA:CPU HLO in
examples/hlo/) goes through the project's own tools,

    hlo-split examples/hlo/P.hlo.zst | measure --backend cpu (steady defaults:
                                       one pinned CPU, process clock)   ->  kernels/P.zst
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

Generated kernels (`tpuperf generate`, the data engine) join them: the
`generate` step writes, for each source in turn (ops, then fusions, sweeps
and heavy side by side), and `measure` measures, nearest the programs
first (fusions, sweeps, heavy, ops, so a build cut short has the most
useful ones),

    tpuperf generate --source S --seed SEED --limit N [programs]
        --exclude <every kernel shard so far>                 ->  .work/S.zst
    measure --jobs J (chunks of CHUNK kernels)                ->  generated/S-NNN.zst
    featurize                                                 ->  graphs/generated/S-NNN.zst

A larger --plan extends a source, append-only: its list is generated
again, whole, with the larger limit, and the measured chunks are kept as
they are, the new list's kernels they lack going after them (the same
seed gives mostly the kernels it had first, but XLA may compile a swept
or fused program's kernels a little differently another day, so the
regenerated list need not begin with the committed kernels; only a
chunk whose kernels change, the last one when it was not full, is
measured again, its kernels already timed coming from the cache).
A smaller --plan trims a source: its chunks past the plan are removed, and
their graph shards with them (their labels may be another build's, another
machine's).

fusions and sweeps draw only from programs in the "train" list of every
split file (split.train_in_all), so nothing made from a valid or test
program enters training; the split files' train lists hold "ops:*",
"fusions:*", "sweeps:*", "heavy:*", "variants:*" and "indexed:*", the
pseudo-programs of generated records (program "ops:OPCODE",
"fusions:ORIGIN", "sweeps:SWEPT", "heavy:OPCODE", "variants:ORIGIN",
"indexed:OPCODE"). Every kernel
already in a shard (the programs' too) is excluded, so a generated kernel
is never a test program's kernel either. Chunks already measured are kept;
an interrupted chunk resumes from measure's cache.

Layout of examples/corpus/ (committed unless said):
    manifest.json     what was built: target machine, options, per-program
                      kernel counts, totals, failures, sizes, timings
    kernels/P.zst     kernel records + runtimes, one shard per program
    generated/S-NNN.zst  generated kernels + runtimes, CHUNK per shard
    graphs/P.zst      graph records + runtimes, one shard per program
                      (committed when they fit in 30 MB, else gitignored)
    graphs/generated/ graph shards of the generated kernels (gitignored:
                      `python examples/build_corpus.py featurize` rebuilds
                      them and the programs' from the kernel shards)
    .cache/           measure's sqlite cache (gitignored)
    .work/            generate's unmeasured output (gitignored)
    unlabelled/S.zst  kernels no one timed, for a teacher to label (`tpuperf
                      train --teacher-data`): the `unlabelled` step
                      generates them (fusions, variants and sweeps of
                      UNLABELLED_PLAN, seed 11, every kernel of the corpus
                      excluded); featurize writes graphs/unlabelled/
                      (gitignored)

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
                                                  # measure everything again (the
                                                  # generated kernels of .work/, or
                                                  # else of the committed chunks)
New programs in programs.json are measured by a plain run (existing kernel
shards are kept); kernels already in the cache are not timed again.

Two timings: `confirm` times every distinct measured kernel of the
programs' shards (with --confirm-generated the generated chunks' too) a
second time, with measure's settings and no cache, in another order, and
keeps each one's faster timing (interference only adds time); each record
keeps both in `timings` ([first, second], ns), measure's cache the faster,
and the manifest's `two_timings` says how far apart they were. Kernels with
two timings are skipped, so it runs once; an interrupted run keeps the
second timings it took (in CACHE_DIR/confirm) and a rerun goes on; a
rebuild with --force keeps the faster runtimes (from the cache) but not
`timings`. Run it with --jobs 1 on an otherwise idle machine, then
featurize:
    python examples/build_corpus.py confirm featurize manifest --jobs 1
On the AMD EPYC family 25 model 17 of 2026-12-06, after a --jobs 2
measure: 7,814 kernels in 8 minutes; of the 4,893 of 5 us or more, 7.3%
were over 1.25x slower the first time, 1.0% the second (README, "Two
timings"). --confirm-generated there took 76 minutes more (55,796
kernels) and found the generated kernels' first timings as sound as
their second: 1.3% and 1.2% over 1.25x slower of the 40,736 of 5 us or
more.

Labels of another machine: a model describes one machine, and the
committed shards hold the labels of the machine that measured them. A
corpus measured again whole elsewhere (below) can travel as its labels
alone, a few MB: `labels` writes every measured kernel's runtime, noise
and two timings, by fingerprint, with that machine's target, to --labels
FILE (one machine's corpus only); `relabel` copies the committed graphs
(after `featurize`) to --graphs-dir with FILE's labels, in a minute and
with no measuring, so that any machine can train and judge models of
that one:
    python examples/build_corpus.py measure featurize manifest --force --jobs 2 \\
        --cache-dir FRESH                      # in a worktree: it rewrites the shards
    python examples/build_corpus.py confirm featurize manifest labels --jobs 1 \\
        --cache-dir FRESH --labels examples/corpus/labels/NAME.zst
    python examples/build_corpus.py relabel --labels examples/corpus/labels/NAME.zst \\
        --graphs-dir /tmp/NAME-graphs
Kernels the file lacks (they failed on its machine) keep their graphs
with an error instead of a runtime, as a failed measurement does.

On another machine the corpus is measured again whole (a model describes
one machine; the cache times afresh for another target). How long that
takes here, before starting:
    python examples/build_corpus.py estimate [--jobs 2] [--plan ops=12000]
times 256 kernels of each part and prints each part's projected minutes.
On the AMD EPYC family 25 model 1 VM of 2026-11-26 (README, "Generating
kernels"): 191 minutes for the whole corpus with one job, 125 with
--jobs 2 (which times as one job does there), 73 with --jobs 2 and
--plan ops=12000 (the 60,000 other ops kernels cost the validation
programs about a point of MAPE). The corpus before was measured so
there, in 70 minutes, and ops=12000 is the default plan since; the
committed corpus (4,000 variants more) on an Intel Xeon family 6 model
207 that evening, in 68 minutes (and under 2 to generate variants), and
its 4,000 indexed kernels the next night on the same model in 4 more
(generated in 127 s):
    python examples/build_corpus.py generate measure featurize manifest \\
        --force --jobs 2 --cache-dir FRESH
    python examples/build_corpus.py confirm featurize manifest --jobs 1 --cache-dir FRESH
    python benchmarks/bench_measure_noise.py --json noise.json
    python examples/build_corpus.py manifest --noise-report noise.json
"""

import argparse
import io
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CORPUS = HERE / "corpus"
GENERATED = CORPUS / "generated"
WORK = CORPUS / ".work"
GRAPH_LIMIT = 30 * 1024 * 1024
# kernels per measured shard of generated kernels
CHUNK = 4000
# how many kernels each source adds (--plan overrides): with the programs'
# 6,835, 62,631 distinct (106 sweeps and 98 variants kernels repeat an
# earlier source's). ops is the cheapest source to generate (a few
# hundred kernels a second); fusions and sweeps compile every candidate
# with XLA first (about 20 a second each). heavy's large convolutions and
# dots take longest to measure per kernel. ops was 72,000 until 2026-11-26:
# a fifth of it cost about a point of validation MAPE (README, "Generating
# kernels") and lets a 2-core machine measure the whole corpus in about
# an hour, as each new machine must.
# variants (fusions with their arithmetic changed, clamps added) joined
# the committed corpus on 2026-11-26, measured with the rest; indexed
# (gathers and scatters of many small slices) on 2026-11-27, measured on
# a machine of the corpus's model (`--plan indexed=4000`, 256 s).
PLAN = {"ops": 12000, "fusions": 12000, "sweeps": 12000, "heavy": 12000, "variants": 4000,
        "indexed": 4000}
SOURCES = tuple(PLAN)
# kernels generated for a teacher to label (`tpuperf train --teacher-data`),
# never measured: the `unlabelled` step writes them to unlabelled/S.zst
# with their own seed, every kernel of the corpus excluded; `featurize`
# makes their graphs in graphs/unlabelled/
UNLABELLED = CORPUS / "unlabelled"
UNLABELLED_PLAN = {"fusions": 8000, "variants": 4000, "sweeps": 6000}
UNLABELLED_SEED = 11
# generated kernels are measured nearest-to-the-programs first, so that a
# build cut short holds the most useful ones
MEASURE_ORDER = ("fusions", "variants", "sweeps", "indexed", "heavy", "ops")


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


def _write_atomic(records_pipe, dest, compact=False):
    """Copy a record stream (a pipe) into dest (.zst), atomically. compact:
    samples rounded to whole nanoseconds (msgpack then stores small ints,
    not 9-byte floats: most of a compressed kernel record otherwise).
    zstd level 19: the shards are committed, and the checkout must stay
    small enough to carry (19 makes kernel shards about a quarter smaller
    than a pipe's 10)."""
    sys.path.insert(0, str(ROOT))
    from tpuperf_cli.stream import read_records

    return write_records_atomic(read_records(records_pipe, name=str(dest)), dest, compact)


def write_records_atomic(records, dest, compact=False, level=19):
    """Write records to dest (.zst, zstd level 19 unless said) through a
    temporary file (see _write_atomic); returns how many."""
    sys.path.insert(0, str(ROOT))
    from tpuperf_cli.stream import RecordWriter

    tmp = dest.with_suffix(".tmp")
    n = 0
    with RecordWriter(str(tmp), compress=True, level=level) as w:
        for r in records:
            if compact and isinstance(r.get("runs"), list):
                r["runs"] = [round(x) for x in r["runs"]]
            w.write(r)
            n += 1
    os.replace(tmp, dest)
    return n


def measure_command(args):
    """measure with the corpus's settings (the options of this script)."""
    return tool("measure") + ["--backend", "cpu", "--min-time", args.min_time,
                              "--samples", str(args.samples), "--cache-dir", str(args.cache_dir),
                              "--cpus", str(args.cpus), "--clock", args.clock, "--no-progress",
                              "--jobs", str(args.jobs)]


def measure_program(prog, args):
    src = HERE / prog["file"]
    dest = CORPUS / "kernels" / f"{prog['name']}.zst"
    if dest.exists() and not args.force:
        return None
    t0 = time.time()
    split = subprocess.Popen(tool("hlo-split") + ["-p", prog["name"], str(src)],
                             stdout=subprocess.PIPE)
    cmd = measure_command(args)
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
    from tpuperf_cli.measure.target import method_of, target_key
    from tpuperf_cli.stream import read_records

    cache = Cache(str(cache_dir))
    added = 0
    try:
        for shard in sorted((CORPUS / "kernels").glob("*.zst")) + sorted(GENERATED.glob("*.zst")):
            for r in read_records(str(shard)):
                if "runtime_ns" not in r or not r.get("target") or not r.get("fingerprint"):
                    continue
                if r["target"].get("method") != method_of(r["target"].get("clock", "")):
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


def _splits():
    return sorted(str(p) for p in (HERE / "splits").glob("*.json"))


def draw_from():
    """The example programs generators may draw from: in the train list of
    every split file."""
    sys.path.insert(0, str(ROOT))
    from tpuperf_cli.split import train_in_all

    return [p for p in train_in_all(_splits()) if ":" not in p and "*" not in p]


def generated_chunks(source):
    return sorted(GENERATED.glob(f"{source}-*.zst"))


def _fingerprints(path):
    sys.path.insert(0, str(ROOT))
    from tpuperf_cli.stream import read_records

    return [r.get("fingerprint") for r in read_records(str(path))]


def _planned_kernels(source):
    """Kernels generated for a source so far: those of its measured chunks
    and of its unmeasured list in .work/, each once."""
    return len(unmeasured_kernels(source))


def generate_command(source, limit, args):
    """The tpuperf generate command writing .work/SOURCE.tmp.zst: it
    excludes every program kernel and the kernels of the sources before
    it in SOURCES (fusions, sweeps and heavy run side by side after ops)."""
    sys.path.insert(0, str(ROOT))
    from tpuperf_cli.generate.driver import PROGRAM_SOURCES

    cmd = tool("generate") + ["--source", source, "--seed", str(args.seed), "--limit", str(limit),
                              "-q", "-o", str(WORK / f"{source}.tmp.zst")]
    # they draw from the programs of every split's train list
    if source in PROGRAM_SOURCES:
        cmd += [str(HERE / "hlo" / f"{p}.hlo.zst") for p in draw_from()]
    shards = sorted((CORPUS / "kernels").glob("*.zst"))
    if source != "ops":
        shards += generated_chunks("ops") + ([WORK / "ops.zst"] if (WORK / "ops.zst").exists() else [])
    for shard in shards:
        cmd += ["--exclude", str(shard)]
    return cmd


def generate_all(plan, args):
    """.work/SOURCE.zst (unmeasured kernel records) for each planned source
    not generated yet: ops first, then fusions, variants, sweeps, heavy and
    indexed in parallel (each compiles with XLA)."""
    WORK.mkdir(parents=True, exist_ok=True)
    # a source whose chunks hold fewer kernels than planned is generated
    # again, whole; measure_generated keeps its chunks and appends the
    # kernels they lack (unmeasured_kernels)
    todo = [s for s in SOURCES if plan.get(s, 0) > 0 and _planned_kernels(s) < plan[s]]
    for wave in (["ops"], ["fusions", "variants", "sweeps", "heavy", "indexed"]):
        running = {}
        for source in wave:
            if source in todo:
                log(f"generate {source}: {plan[source]} kernels")
                running[source] = (subprocess.Popen(generate_command(source, plan[source], args)),
                                   time.time())
        for source, (proc, t0) in running.items():
            if proc.wait() != 0:
                raise SystemExit(f"build_corpus: tpuperf generate --source {source} failed")
            os.replace(WORK / f"{source}.tmp.zst", WORK / f"{source}.zst")
            log(f"generate {source}: done in {time.time() - t0:.0f}s")


def generate_unlabelled():
    """unlabelled/S.zst for each source of UNLABELLED_PLAN, side by side:
    kernels drawn from the programs of every split's train list, none of
    them a kernel of the corpus (the programs' or a generated chunk's),
    not measured (zstd level 19: they are committed)."""
    WORK.mkdir(parents=True, exist_ok=True)
    UNLABELLED.mkdir(parents=True, exist_ok=True)
    exclude = sorted((CORPUS / "kernels").glob("*.zst")) + sorted(GENERATED.glob("*.zst"))
    programs = [str(HERE / "hlo" / f"{p}.hlo.zst") for p in draw_from()]
    running = {}
    for source, limit in UNLABELLED_PLAN.items():
        tmp = WORK / f"unlabelled-{source}.zst"
        cmd = tool("generate") + ["--source", source, "--seed", str(UNLABELLED_SEED), "--limit",
                                  str(limit), "-q", "-o", str(tmp)]
        cmd += [a for shard in exclude for a in ("--exclude", str(shard))] + programs
        log(f"unlabelled {source}: {limit} kernels")
        running[source] = (subprocess.Popen(cmd), tmp, time.time())
    for source, (proc, tmp, t0) in running.items():
        if proc.wait() != 0:
            raise SystemExit(f"build_corpus: tpuperf generate --source {source} failed")
        _write_atomic(str(tmp), UNLABELLED / f"{source}.zst")
        tmp.unlink()
        log(f"unlabelled {source}: done in {time.time() - t0:.0f}s")


def featurize_unlabelled(out_dir):
    out_dir.mkdir(parents=True, exist_ok=True)
    for src in sorted(UNLABELLED.glob("*.zst")):
        featurize_file(src, out_dir / src.name, f"unlabelled {src.name}")


def unmeasured_kernels(source):
    """The generated kernel records of a source, unmeasured, in the order
    they are chunked: the kernels of the committed chunks with their
    measurements taken off, in chunk order (so --force on a fresh checkout
    measures the same kernels again), then those of .work/SOURCE.zst
    (generate's output) that the chunks lack, in its order (so a larger
    plan appends to the corpus and never reorders what it holds)."""
    sys.path.insert(0, str(ROOT))
    from tpuperf_cli.records import MEASURE_FIELDS
    from tpuperf_cli.stream import read_records

    records = []
    for chunk in generated_chunks(source):
        for r in read_records(str(chunk)):
            for measured in MEASURE_FIELDS:
                r.pop(measured, None)
            records.append(r)
    work = WORK / f"{source}.zst"
    if work.exists():
        held = {r.get("fingerprint") for r in records}
        records += [r for r in read_records(str(work)) if r.get("fingerprint") not in held]
    return records


def measure_generated(source, limit, args):
    """Measure the first `limit` kernels of the source (unmeasured_kernels)
    in chunks into generated/SOURCE-NNN.zst; returns the seconds spent
    timing."""
    sys.path.insert(0, str(ROOT))
    from tpuperf_cli.stream import RecordWriter

    GENERATED.mkdir(parents=True, exist_ok=True)
    WORK.mkdir(parents=True, exist_ok=True)     # a fresh checkout has none: chunks from generated/
    records = unmeasured_kernels(source)[:limit]
    spent = 0.0
    for k in range(0, len(records), CHUNK):
        dest = GENERATED / f"{source}-{k // CHUNK:03d}.zst"
        planned = [r.get("fingerprint") for r in records[k:k + CHUNK]]
        # a chunk that was not full under an earlier, shorter plan is
        # measured again (its kernels come from the cache)
        if dest.exists() and not args.force and _fingerprints(dest) == planned:
            continue
        chunk = WORK / f"{source}-{k // CHUNK:03d}.in.zst"
        with RecordWriter(str(chunk), compress=True) as w:
            for r in records[k:k + CHUNK]:
                w.write(r)
        t0 = time.time()
        cmd = measure_command(args) + [str(chunk)]
        meas = subprocess.Popen(cmd, stdout=subprocess.PIPE)
        n = _write_atomic(meas.stdout, dest, compact=True)
        if meas.wait() != 0:
            dest.unlink(missing_ok=True)
            raise SystemExit(f"build_corpus: measure of {chunk} failed")
        chunk.unlink()
        spent += time.time() - t0
        log(f"{dest.name}: {n} kernels measured in {time.time() - t0:.0f}s")
    # a smaller plan than the corpus holds: the chunks past it go (measured
    # by another plan, maybe on another machine, they must not stay beside
    # this build's)
    for extra in generated_chunks(source)[math.ceil(len(records) / CHUNK):]:
        extra.unlink()
        log(f"{extra.name}: removed (past --plan {source}={limit})")
    return spent


def _sample(records, k):
    """k records spread evenly over the list (all when it has no more)."""
    if len(records) <= k:
        return list(records)
    return [records[i * len(records) // k] for i in range(k)]


def write_untimed(records, path):
    """Write records to path (.zst, in WORK) with their measurements taken
    off, for measure_afresh."""
    sys.path.insert(0, str(ROOT))
    from tpuperf_cli.records import MEASURE_FIELDS
    from tpuperf_cli.stream import RecordWriter

    WORK.mkdir(parents=True, exist_ok=True)
    with RecordWriter(str(path), compress=True) as w:
        for r in records:
            w.write({k: v for k, v in r.items() if k not in MEASURE_FIELDS})


def measure_afresh(args, path, *extra):
    """The measure command that times path's kernels again: the corpus's
    settings, no cache, no summary."""
    return measure_command(args) + ["--no-cache", *extra, "-q", str(path)]


def _time_measure(records, args, batch):
    """Seconds `measure` (the corpus's settings, no cache) takes on records."""
    path = WORK / "estimate.in.zst"
    write_untimed(records, path)
    t0 = time.time()
    p = subprocess.run(measure_afresh(args, path, "--batch", str(batch)), stdout=subprocess.DEVNULL)
    seconds = time.time() - t0
    path.unlink()
    if p.returncode != 0:
        raise SystemExit("build_corpus: estimate: measure failed")
    return seconds


def estimate(plan, args):
    """How long measuring the whole corpus of this plan takes here: a sample
    of each part (the programs' distinct kernels, each planned source) timed
    with the corpus's settings and --jobs, start-up taken off, times its
    kernel count. Prints a table on stdout; touches nothing of the corpus."""
    sys.path.insert(0, str(ROOT))
    from tpuperf_cli.measure.target import cpu_identity, usable_cpus
    from tpuperf_cli.stream import read_records

    programs = {}
    for shard in sorted((CORPUS / "kernels").glob("*.zst")):
        for r in read_records(str(shard)):
            programs.setdefault(r.get("fingerprint"), r)
    parts = [("programs", list(programs.values()))] if programs else []
    for source in MEASURE_ORDER:
        if plan.get(source, 0) > 0:
            records = unmeasured_kernels(source)[:plan[source]]
            if records:
                parts.append((source, records))
            else:
                log(f"estimate: {source}: nothing generated yet (run the generate step first)")
    if not parts:
        raise SystemExit("build_corpus: estimate: no kernels to time (no kernel shards, nothing "
                         "generated)")
    # chunks for every job: a round of samples spreads over a batch
    batch = max(8, args.estimate_sample // (2 * args.jobs))
    startup = _time_measure(_sample(parts[0][1], 1), args, batch)
    log(f"estimate: measure's start-up {startup:.1f}s (taken off each part's time)")
    rows, total = [], 0.0
    for name, records in parts:
        sample = _sample(records, args.estimate_sample)
        seconds = _time_measure(sample, args, batch)
        per = max(seconds - startup, 0.0) / len(sample)
        rows.append((name, len(records), per, per * len(records)))
        total += per * len(records)
        log(f"estimate: {name}: {len(sample)} kernels in {seconds:.0f}s")
    print(f"measuring the corpus here (`measure --jobs {args.jobs}`, {args.samples} samples, "
          f"min-time {args.min_time}; {args.estimate_sample} kernels timed a part):")
    cpu = cpu_identity()
    print(f"on {cpu['name']} (family {cpu.get('family')} model {cpu.get('model')}), "
          f"{usable_cpus()} CPUs, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print(f"{'part':<10} {'kernels':>8} {'s/kernel':>9} {'minutes':>8}")
    for name, n, per, secs in rows:
        print(f"{name:<10} {n:>8,} {per:>9.3f} {secs / 60:>8.1f}")
    print(f"{'total':<10} {sum(r[1] for r in rows):>8,} {total / sum(r[1] for r in rows):>9.3f} "
          f"{total / 60:>8.1f}")


# the confirm step times kernels a second time in this order (a seeded
# shuffle: another order than the first pass's, so that a kernel's two
# timings have other neighbours in their batch and fall at other moments)
CONFIRM_SEED = 1
CONFIRM_CHUNK = 1000
# a kernel whose two timings are further apart than this counts as "apart"
# in the step's summary and the manifest (the faster is kept either way)
CONFIRM_APART = 1.25


def confirm_shards(args):
    """The kernel shards the confirm step times again: the programs', and
    with --confirm-generated the generated chunks too."""
    shards = sorted((CORPUS / "kernels").glob("*.zst"))
    if args.confirm_generated:
        shards += sorted(GENERATED.glob("*.zst"))
    return shards


def confirm(args):
    """Time every distinct measured kernel of confirm_shards() once more
    (measure with the corpus's settings and no cache, chunk by chunk) and
    keep, for each, the faster of its two timings: interference only adds
    time, and on a 2-core VM it can last longer than a kernel's 30 samples
    (README, "Two timings"). Kernels that already have two timings
    (`timings` in their records) are skipped. Each record gets `timings`,
    [first, second] in ns, and the faster one's runtime_ns, runs and noise;
    measure's cache gets the faster too, so a rebuild keeps it. The second
    timings go into a cache of their own (CACHE_DIR/confirm) chunk by
    chunk, so an interrupted run (Ctrl-C) goes on where it stopped, the
    shards untouched until every kernel has its second. Returns the
    seconds spent, or None when nothing needed a second timing."""
    sys.path.insert(0, str(ROOT))
    import random

    from tpuperf_cli.measure.cache import Cache
    from tpuperf_cli.measure.target import target_key
    from tpuperf_cli.stream import read_records

    shards = confirm_shards(args)
    first = {}                              # fingerprint -> its record, timed once
    for shard in shards:
        for r in read_records(str(shard)):
            if "runtime_ns" in r and len(r.get("timings") or ()) < 2:
                first.setdefault(r["fingerprint"], r)
    if not first:
        log("confirm: every measured kernel has two timings already")
        return None
    order = sorted(first)
    random.Random(CONFIRM_SEED).shuffle(order)
    # second timings are kept as they come in a cache of their own, so that
    # an interrupted run goes on where it stopped
    seconds_dir = Path(args.cache_dir) / "confirm"
    done = Cache(str(seconds_dir))
    second, todo = {}, []
    for fp in order:
        hit = done.get(fp, target_key(first[fp]["target"]))
        if hit and hit.get("runtime_ns"):
            second[fp] = hit
        else:
            todo.append(fp)
    log(f"confirm: timing {len(todo)} distinct kernels of {len(shards)} shards a second time"
        + (f" ({len(second)} timed again before, kept in {seconds_dir})" if second else ""))
    path = WORK / "confirm.in.zst"
    t0 = time.time()
    try:
        for start in range(0, len(todo), CONFIRM_CHUNK):
            chunk = todo[start:start + CONFIRM_CHUNK]
            write_untimed((first[fp] for fp in chunk), path)
            p = subprocess.run(measure_afresh(args, path), stdout=subprocess.PIPE)
            if p.returncode != 0:
                raise SystemExit("build_corpus: confirm: measure failed; the corpus is unchanged")
            for r in read_records(io.BytesIO(p.stdout), name="measure's output"):
                if "runtime_ns" not in r:
                    continue
                key = target_key(first[r["fingerprint"]]["target"])
                if target_key(r["target"]) != key:
                    raise SystemExit("build_corpus: confirm: this machine is not the one that "
                                     "measured the corpus; measure it here first (measure "
                                     "--force with a fresh --cache-dir)")
                second[r["fingerprint"]] = r
                done.put(r["fingerprint"], key, r["target"], r["runtime_ns"], r.get("runs"),
                         noise=r.get("noise"))
            log(f"confirm: {start + len(chunk)}/{len(todo)} timed again "
                f"({time.time() - t0:.0f}s)")
    except KeyboardInterrupt:
        raise SystemExit(f"build_corpus: confirm: interrupted; the {len(second)} second timings "
                         f"so far are kept in {seconds_dir}, and a rerun goes on from there; "
                         f"the corpus is unchanged") from None
    finally:
        done.close()
        path.unlink(missing_ok=True)
    kept = {}
    cache = Cache(str(args.cache_dir))
    try:
        for fp, r in first.items():
            s = second.get(fp)
            if s is None:                   # failed the second time: one timing stays
                continue
            faster = s if s["runtime_ns"] < r["runtime_ns"] else r
            kept[fp] = {"runtime_ns": faster["runtime_ns"], "runs": faster.get("runs"),
                        "noise": faster.get("noise"),
                        "timings": [r["runtime_ns"], s["runtime_ns"]]}
            if faster is s:
                cache.put(fp, target_key(s["target"]), s["target"], s["runtime_ns"], s.get("runs"),
                          noise=s.get("noise"))
    finally:
        cache.close()
    for shard in shards:
        records = list(read_records(str(shard)))
        confirmed = [r.get("fingerprint") in kept and "timings" not in r for r in records]
        if any(confirmed):
            write_records_atomic((dict(r, **kept[r["fingerprint"]]) if c else r
                                  for r, c in zip(records, confirmed)), shard, compact=True)
    apart = confirm_summary(kept.values())
    log(f"confirm: {len(kept)} kernels have two timings ({len(first) - len(kept)} failed the "
        f"second); {apart['slower_first']} were over {CONFIRM_APART}x slower the first time, "
        f"{apart['slower_second']} the second; median gap {100 * apart['median_gap']:.1f}%; "
        f"{time.time() - t0:.0f}s")
    return time.time() - t0


def confirm_summary(records):
    """How far apart the two timings of records with `timings` are: their
    count, the median gap (slower / faster - 1), and how many were over
    CONFIRM_APART x slower the first time, and the second."""
    pairs = [r["timings"] for r in records if len(r.get("timings") or ()) == 2]
    gaps = [max(a, b) / min(a, b) - 1 for a, b in pairs if min(a, b) > 0]
    return {"kernels": len(pairs), "median_gap": statistics.median(gaps) if gaps else None,
            "slower_first": sum(a > CONFIRM_APART * b for a, b in pairs),
            "slower_second": sum(b > CONFIRM_APART * a for a, b in pairs)}


def export_labels(dest):
    """Write one machine's labels of the corpus to dest (.zst): for every
    distinct measured kernel of the programs' shards and the generated
    chunks, its runtime, noise and two timings (where confirm took them),
    by fingerprint (a kernel in several shards: its first record's, the
    programs' before the generated chunks'), with the target that
    measured them and the manifest's account of how
    (tpuperf_cli/measure/labels.py has the format), so that another
    machine's corpus, an hour of measuring, travels in a file of a few MB
    and `relabel` gives the committed graphs those labels in seconds.
    Refuses a corpus measured on more than one machine. Returns how many
    kernels."""
    sys.path.insert(0, str(ROOT))
    from tpuperf_cli.measure.labels import label_record
    from tpuperf_cli.measure.target import target_key
    from tpuperf_cli.model.known import FINGERPRINT
    from tpuperf_cli.stream import read_records

    labels, target, first_shard = {}, None, None
    for shard in sorted((CORPUS / "kernels").glob("*.zst")) + sorted(GENERATED.glob("*.zst")):
        for i, r in enumerate(read_records(str(shard))):
            if "runtime_ns" not in r:
                continue
            if target is None:
                target, first_shard = r.get("target") or {}, shard
            elif target_key(r.get("target") or {}) != target_key(target):
                raise SystemExit(f"build_corpus: labels: {shard} record {i + 1} was measured on "
                                 f"another machine than {first_shard}'s; a label file holds one "
                                 f"machine's timings (measure the corpus again whole: measure "
                                 f"--force with a fresh --cache-dir)")
            fp = r.get("fingerprint")
            if type(fp) is not str or not FINGERPRINT.match(fp):
                raise SystemExit(f"build_corpus: labels: {shard} record {i + 1}: no fingerprint "
                                 f"(32 hex digits) to label it by")
            timings = r.get("timings") or []
            labels.setdefault(fp, (r["runtime_ns"], r.get("noise"), timings if len(timings) == 2 else None))
    if not labels:
        raise SystemExit("build_corpus: labels: no measured kernel in kernels/ or generated/")
    manifest = json.loads((CORPUS / "manifest.json").read_text()) \
        if (CORPUS / "manifest.json").exists() else {}
    record = label_record(target, labels, manifest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    write_records_atomic([record], dest)
    return len(labels)


def write_labels(dest):
    n = export_labels(dest)
    log(f"labels: {n} kernels' labels written to {dest} ({dest.stat().st_size / 1e6:.1f} MB)")


def read_labels(path):
    """(target, {fingerprint: (runtime_ns, noise or None, [t1, t2] or None)})
    of a file export_labels wrote; SystemExit naming the file for anything
    else."""
    sys.path.insert(0, str(ROOT))
    from tpuperf_cli.errors import TpuperfError
    from tpuperf_cli.measure.labels import read_label_file

    try:
        target, _, table = read_label_file(path)
    except TpuperfError as e:
        raise SystemExit(f"build_corpus: relabel: {e}") from None
    return target, table


def relabel(labels_path, out_dir):
    """Copy the corpus's graph shards (graphs/*.zst and graphs/generated/,
    as featurize made them) to out_dir with another machine's labels
    (read_labels): each record whose kernel the file holds gets its
    runtime, noise, timings and target, and loses the samples (runs) of
    the corpus's machine; a record it lacks (that kernel failed there, or
    it is not in the file) keeps its graph with an error instead, as a
    failed measurement does, so a program's kernels stay whole. Shards
    in out_dir (and its generated/) that the corpus lacks are removed.
    Returns (labelled, unlabelled) counts."""
    sys.path.insert(0, str(ROOT))
    from tpuperf_cli.stream import read_records

    target, table = read_labels(labels_path)
    src = CORPUS / "graphs"
    shards = sorted(src.glob("*.zst")) + sorted((src / "generated").glob("*.zst"))
    if not shards or not any((src / "generated").glob("*.zst")):
        raise SystemExit(f"build_corpus: relabel: no graph shards in {src} and {src / 'generated'}; "
                         f"run `python examples/build_corpus.py featurize` first")
    if out_dir.resolve() == src.resolve():
        raise SystemExit(f"build_corpus: relabel: --graphs-dir {out_dir} is the corpus's own graphs/; "
                         f"name another directory (the committed graphs keep their labels)")
    missing = f"unlabelled: not in {labels_path}"
    counts = [0, 0]

    def swapped(records):
        for r in records:
            r = {k: v for k, v in r.items() if k not in ("runtime_ns", "runs", "noise", "timings",
                                                         "target", "error")}
            label = table.get(r.get("fingerprint"))
            if label is None:
                r["error"] = missing
                counts[1] += 1
            else:
                r.update(runtime_ns=label[0], target=target)
                if label[1] is not None:
                    r["noise"] = label[1]
                if label[2] is not None:
                    r["timings"] = label[2]
                counts[0] += 1
            yield r

    t0 = time.time()
    written = {out_dir / shard.relative_to(src) for shard in shards}
    for folder in (out_dir, out_dir / "generated"):
        for stale in set(folder.glob("*.zst")) - written:
            stale.unlink()      # an earlier relabel's shard the corpus no longer has
    for shard in shards:
        dest = out_dir / shard.relative_to(src)
        dest.parent.mkdir(parents=True, exist_ok=True)
        write_records_atomic(swapped(read_records(str(shard))), dest, level=3)   # not committed
    log(f"relabel: {counts[0]} graphs labelled from {labels_path}, {counts[1]} not in it "
        f"(kept with an error), {len(shards)} shards in {out_dir}, {time.time() - t0:.0f}s")
    return tuple(counts)


def featurize_generated(out_dir):
    out_dir.mkdir(parents=True, exist_ok=True)
    for stale in set(p.name for p in out_dir.glob("*.zst")) - set(p.name for p in GENERATED.glob("*.zst")):
        (out_dir / stale).unlink()  # its kernel chunk went with a smaller --plan
    for src in sorted(GENERATED.glob("*.zst")):
        # always: a newer featurize changes graphs whose kernels did not change
        featurize_file(src, out_dir / src.name, src.name)


def featurize_file(src, dest, what):
    """featurize < src > dest (atomically); the number of records written."""
    with open(src, "rb") as f:
        feat = subprocess.Popen(tool("featurize"), stdin=f, stdout=subprocess.PIPE)
        n = _write_atomic(feat.stdout, dest)
        if feat.wait() != 0:
            dest.unlink(missing_ok=True)
            raise SystemExit(f"build_corpus: {what}: featurize failed")
    return n


def featurize_program(prog, out_dir):
    return featurize_file(CORPUS / "kernels" / f"{prog['name']}.zst",
                          out_dir / f"{prog['name']}.zst", prog["name"])


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
    # generated kernels, by source
    per_source = {}
    opcodes = Counter()
    origins = set()
    for shard in sorted(GENERATED.glob("*.zst")):
        source = shard.stem.rsplit("-", 1)[0]
        entry = per_source.setdefault(source, {"shards": 0, "kernels": 0, "measured": 0,
                                               "failed": 0, "bytes": 0, "opcodes": Counter()})
        entry["shards"] += 1
        entry["bytes"] += shard.stat().st_size
        for r in read_records(str(shard)):
            entry["kernels"] += 1
            fingerprints.add(r["fingerprint"])
            if r.get("origin"):
                origins.add(r["origin"])
            if "runtime_ns" in r:
                entry["measured"] += 1
                measured.append(r)
                ok_fps.add(r["fingerprint"])
                entry["opcodes"][r.get("opcode")] += 1
                target = target or r.get("target")
            elif r.get("error"):
                entry["failed"] += 1
                failed[r["error"].split(":", 1)[0]] += 1
            kernels += 1
    for entry in per_source.values():
        opcodes.update(entry["opcodes"])
        entry["distinct_opcodes"] = len(entry["opcodes"])
        entry["opcodes"] = dict(entry["opcodes"].most_common())
    program_opcodes = Counter(r.get("opcode") for r in measured if not r.get("source"))
    allowed = set(draw_from()) if per_source else set()
    leaked = sorted(origins - allowed)
    if leaked:
        raise SystemExit(f"build_corpus: generated kernels drawn from programs outside the "
                         f"train list of a split: {', '.join(leaked)}")
    seconds = measure_seconds or {}
    kb = sum(p["kernel_bytes"] for p in per_program)
    kb += sum(e["bytes"] for e in per_source.values())
    gb_generated = sum(f.stat().st_size for f in (CORPUS / "graphs" / "generated").glob("*.zst"))
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
        "distinct_opcodes": len(set(opcodes) | set(program_opcodes)),
        "generated": {"plan_seed": getattr(args, "seed", None),
                      "drawn_from": sorted(origins),
                      "sources": per_source} if per_source else old.get("generated"),
        "kernel_shards_mb": round(kb / 2**20, 2),
        "graph_shards_mb": round(gb / 2**20, 2) if gb else None,
        "graph_shards_committed": bool(gb) and gb <= GRAPH_LIMIT,
        "generated_graph_shards_mb": round(gb_generated / 1e6, 2),
        # wall time of this build's measure step: kernels found in the cache
        # cost only the split and a cache look-up, so this is not the time
        # it takes to time the corpus from scratch (see the README)
        "last_build_measure_seconds": (round(sum(seconds.values()), 1) if seconds
                                       else old.get("last_build_measure_seconds")),
        # this machine's reference kernels, for `tpuperf machine --check`:
        # the programs' kernels (the check finds their text through
        # per_program), never generated ones
        "reference_kernels": pick_references(r for r in measured if not r.get("source")),
        # bench_measure_noise.py's figures on the machine that measured it
        "measurement_noise": noise_report(args.noise_report, old.get("measurement_noise"), target),
        "median_kernel_noise": (statistics.median(r["noise"] for r in measured if "noise" in r)
                                if any("noise" in r for r in measured) else None),
        # the confirm step's second timings: how many distinct kernels have
        # two, and how far apart (the records keep the faster)
        "two_timings": confirm_summary({r["fingerprint"]: r for r in measured}.values()),
        "splits": {"random": "examples/splits/random.json",
                   "manual": "examples/splits/manual.json"},
        "per_program": per_program,
    }
    mpath.write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def noise_report(path, kept, target):
    """The noise figures to record: --noise-report's, else the manifest's
    own, and only while they were taken the way the corpus was timed (one
    machine, one method): a report from another machine is refused, and
    a kept one from before a re-measure dropped."""
    sys.path.insert(0, str(ROOT))
    from tpuperf_cli.measure.target import same_machine

    def matches(report):
        t = (report or {}).get("target") or {}
        return (target is not None and not same_machine(t, target)
                and t.get("method") == target.get("method"))

    if path:
        report = json.loads(Path(path).read_text())
        if not matches(report):
            raise SystemExit(f"build_corpus: {path}: the noise report was taken on another "
                             f"machine or with another method than the corpus's")
        return report
    if kept and not matches(kept):
        log("the manifest's noise figures were another machine's or method's: dropped "
            "(--noise-report records this machine's)")
        return None
    return kept


def write_gitignore(commit_graphs):
    # graphs of generated kernels are rebuilt by `build_corpus.py featurize`
    # (a minute or two): the checkout stays small enough to carry
    lines = ["# written by examples/build_corpus.py", ".cache/", ".work/", "*.tmp",
             "graphs/generated/", "graphs/unlabelled/"]
    if not commit_graphs:
        lines.append("graphs/")
    (CORPUS / ".gitignore").write_text("\n".join(lines) + "\n")


def list_split(split, which):
    spec = json.loads((HERE / "splits" / f"{split}.json").read_text())
    if which not in spec:
        sys.exit(f"build_corpus: {split}.json has no set {which!r} (has: {', '.join(spec)})")
    for name in spec[which]:
        if ":" in name:  # generated kernels ("ops:*"): their graph shards
            source = name.split(":", 1)[0]
            found = sorted((CORPUS / "graphs" / "generated").glob(f"{source}-*.zst"))
            if not found and generated_chunks(source):
                log(f"warning: no graph shards of the generated {source} kernels (not "
                    f"committed); build them with: python examples/build_corpus.py featurize")
            for shard in found:
                print(os.path.relpath(shard))
        else:
            print(os.path.relpath(CORPUS / "graphs" / f"{name}.zst"))


def main(argv=None):
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n", 2)[2],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("steps", nargs="*", metavar="STEP",
                    help="generate, measure, confirm, featurize and/or manifest (default: measure "
                         "featurize), or estimate alone; 'generate' writes the generated kernels "
                         "(--plan) to .work/, 'estimate' times a sample of each part (--jobs, "
                         "--plan) and prints how long measuring the whole corpus takes here, "
                         "'measure' times the programs' kernels and then the generated ones; "
                         "'confirm' times the programs' measured kernels a second time and "
                         "keeps each one's faster timing; "
                         "'featurize' alone rebuilds graphs/ from the committed kernel shards; "
                         "'manifest' only rewrites manifest.json; 'unlabelled' alone writes "
                         "unlabelled/ (kernels for a teacher to label, never measured); 'labels' "
                         "writes the corpus's labels (this machine's, after measure and confirm) "
                         "to --labels FILE; 'relabel' alone copies graphs/ to --graphs-dir with "
                         "the labels of --labels FILE (another machine's corpus, no measuring)")
    ap.add_argument("--plan", nargs="+", metavar="SOURCE=N",
                    help="kernels per generated source (default: "
                         + " ".join(f"{k}={v}" for k, v in PLAN.items()) + ")")
    ap.add_argument("--seed", type=int, default=0, help="tpuperf generate --seed (default 0)")
    ap.add_argument("--jobs", type=int, default=1,
                    help="measure --jobs (default 1: one pinned worker timing, compiling on "
                         "every CPU while it waits; 2 on a 2-core machine: 1.3x to 1.4x as fast, "
                         "fair where `benchmarks/bench_measure_jobs.py` says two jobs time as "
                         "one does, as on the machines of 2026-11-25 and 26, not on that of "
                         "11-23)")
    ap.add_argument("--estimate-sample", type=int, default=256, metavar="N",
                    help="the estimate step: kernels timed for each part (default 256)")
    ap.add_argument("--only", nargs="+", metavar="PROGRAM", help="only these programs")
    ap.add_argument("--min-time", default="0.5ms",
                    help="measure --min-time: shortest sample (default 0.5ms)")
    ap.add_argument("--samples", type=int, default=30, help="measure --samples (default 30)")
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
    ap.add_argument("--confirm-generated", action="store_true",
                    help="the confirm step times the generated kernels again too (about 8x "
                         "the programs' kernels; where their first timings were sound it "
                         "changes little: README, 'Two timings')")
    ap.add_argument("--force", action="store_true",
                    help="rebuild kernel shards that exist (measurements still come from the cache)")
    ap.add_argument("--labels", type=Path, metavar="FILE",
                    help="the labels and relabel steps: a label file (one machine's runtimes of "
                         "every corpus kernel, a few MB; e.g. examples/corpus/labels/NAME.zst)")
    ap.add_argument("--noise-report", metavar="JSON",
                    help="bench_measure_noise.py --json output to record in the manifest")
    ap.add_argument("--list", nargs=2, metavar=("SPLIT", "SET"),
                    help="print the graph shard paths of one split set (random|manual, "
                         "train|valid|test) and exit")
    args = ap.parse_args(argv)
    args.steps = args.steps or ["measure", "featurize"]
    bad = set(args.steps) - {"measure", "confirm", "generate", "featurize", "manifest", "estimate",
                             "unlabelled", "labels", "relabel"}
    if bad:
        ap.error(f"unknown step(s): {', '.join(sorted(bad))} (choose measure, confirm, generate, "
                 f"featurize, manifest, estimate, unlabelled, labels, relabel)")
    if {"labels", "relabel"} & set(args.steps) and args.labels is None:
        ap.error("the labels and relabel steps need --labels FILE")
    plan = dict(PLAN)
    for item in args.plan or []:
        name, _, n = item.partition("=")
        if name not in PLAN or not n.isdigit():
            ap.error(f"--plan {item}: expected SOURCE=N with SOURCE one of {', '.join(PLAN)}")
        plan[name] = int(n)
    if args.list:
        list_split(*args.list)
        return
    if args.steps == ["labels"]:
        write_labels(args.labels)
        return
    if "relabel" in args.steps:
        if len(args.steps) > 1 or args.graphs_dir is None:
            ap.error("relabel is a step of its own, and needs --graphs-dir (where the relabelled "
                     "graphs go)")
        relabel(args.labels, args.graphs_dir)
        return
    if "unlabelled" in args.steps:
        if len(args.steps) > 1:
            ap.error("unlabelled is a step of its own: it writes unlabelled/, measuring nothing")
        generate_unlabelled()
        return
    if "estimate" in args.steps:
        if len(args.steps) > 1:
            ap.error("estimate is a step of its own: it measures samples, not the corpus")
        estimate(plan, args)
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
    if "generate" in args.steps:
        generate_all(plan, args)
    if "measure" in args.steps:
        for source in MEASURE_ORDER:
            if plan.get(source, 0) > 0 and ((WORK / f"{source}.zst").exists()
                                            or generated_chunks(source)):
                seconds[f"generated:{source}"] = measure_generated(source, plan[source], args)
    if "confirm" in args.steps:
        confirm(args)
    if "featurize" in args.steps:
        out = args.graphs_dir or CORPUS / "graphs"
        out.mkdir(parents=True, exist_ok=True)
        t0 = time.time()
        for prog in programs:
            if (CORPUS / "kernels" / f"{prog['name']}.zst").exists():
                featurize_program(prog, out)
        featurize_generated(out / "generated")
        featurize_unlabelled(out / "unlabelled")
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
    if "labels" in args.steps:      # last: the file carries the manifest just written
        write_labels(args.labels)


if __name__ == "__main__":
    main()
