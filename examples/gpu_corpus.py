#!/usr/bin/env python3
"""Build a corpus on a machine with an accelerator, in one sitting.

Made for a GPU machine held for minutes at a time (its own Python with
jax 0.11 and CUDA 13, no DGL, no zstandard, nothing to install from),
and run there from a copy of the checkout:

    PYTHONPATH=$PWD python3 examples/gpu_corpus.py --work /tmp/gpu \\
        --budget 300 --stop 400 --sweeps --archive $OUT/corpus-gpu

Each program is one task, --jobs tasks at a time, each step in its own
process:

1. compile: an example program (examples/make_programs.py), or with
   --sweeps one of them at another batch, size or dtype (the grid of
   `tpuperf generate --source sweeps`, in its seeded order, after the
   example programs; only of the programs on the train side of every
   split in examples/splits, so nothing made from a valid or test program
   enters training; each program once), compiled by XLA for --backend on this machine, so
   the kernels are what XLA:GPU makes (its fusions, cuBLAS/cuDNN custom
   calls, Triton fusions): work/hlo/P.hlo and work/hlo/P.json (the spec);
2. measure: `hlo-split P.hlo | measure --backend B --cpus all` (the
   device's clock on GPU and TPU: measure --clock events; the measure
   processes share one cache, so a kernel two programs hold is timed
   once): work/kernels/P.msgpack.

The first program runs alone first: if it fails, the set-up is broken (a
missing package, a parser that does not read this compiler's HLO) and the
run stops at once with the logs, instead of failing every program. No task
starts past --budget seconds; at --stop seconds the ones still running are
stopped and the kernels they measured so far are kept. A second run on
the same work folder goes on where the first stopped: it skips what is
done and measures again the programs --stop cut short (their kernels come
from the cache). Each step's stderr goes to work/logs/.

Then: manifest: work/manifest.json names the device, driver, CUDA and jax
versions (the records' target and nvidia-smi), the programs (with their
family), kernel counts, failures and seconds (of every run on the work
folder, and their sum); archive: with --archive,
xz archives of hlo/, logs/ and the manifest, and of kernels/ in --parts
parts (files of a few MiB, small enough to carry back from a machine
that returns only small files). The noise figures come from
benchmarks/bench_measure_noise.py --kernels work/kernels, run after this.
Progress goes to stderr.

To grow an installed corpus on a later GPU (which may be another machine
of the same kind), `--grow DIR`: the --check programs (a few of DIR's)
are measured again first, then only the programs DIR lacks (with
--sweeps, the sweep points it lacks, in the same seeded order); at home
`--install W --merge` adds the new programs to DIR, refuses records of
another target, and writes the check programs' ratios to DIR's labels
(median, p10, p90) into the manifest's `grown` list, so that whether the
new machine times as the corpus's did is on record.

Back home (the GPU machine has no zstandard), with the archives unpacked
into one folder W (`tar xJf` each):

    .venv/bin/python examples/gpu_corpus.py --install W --into examples/corpus-gpu \
        --noise noise.json

writes DIR/kernels/P.zst (each program's measured kernel records; a
sweep's as DIR/kernels/sweeps-P.zst, its records' program "sweeps:P", as
`tpuperf generate --source sweeps` names them, and the sweeps of programs
outside some split's train list, which an older run made, left out) and
DIR/manifest.json: the machine, the programs (each with its family, and
`partial` where --stop cut its measuring short: fewer records than
hlo-split makes of its HLO), the failures by kind and the noise figures of
bench_measure_noise.py's --json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
JAX_PLATFORM = {"gpu": "cuda", "tpu": "tpu", "cpu": "cpu"}
SWEEP_SEED = 0
# --grow's check: small programs of the corpus, quick to compile, that hold
# each kind of GPU kernel (Triton GEMMs, loop and input fusions, cuDNN
# convolutions, gathers and scatters)
CHECK_PROGRAMS = ("mlp_s_train", "cnn_s_train", "bnmlp_s_train", "embedattn_s_train")


def log(msg):
    print(f"gpu_corpus: {msg}", file=sys.stderr, flush=True)


def tool(name):
    return [sys.executable, "-m", "tpuperf_cli", name]


def environment(backend):
    env = dict(os.environ, JAX_PLATFORMS=JAX_PLATFORM[backend],
               # every process gets the memory it uses, not 75% of the card
               XLA_PYTHON_CLIENT_PREALLOCATE="false", TF_CPP_MIN_LOG_LEVEL="1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    return env


def make_programs():
    sys.path.insert(0, str(HERE))
    import make_programs as mp

    return mp


def trainable():
    """The example programs on the train side of every split file: the only
    ones whose sweeps may enter training (build_corpus.draw_from, the
    programs the CPU corpus's generators draw from)."""
    sys.path.insert(0, str(HERE))
    import build_corpus

    return set(build_corpus.draw_from())


def tasks(only, sweeps, grow=None, check=(), limit=None):
    """[(name, point)], each name once: the example programs (point None),
    then with sweeps the sweep grid's points (program, batch, dtype, k) of
    the trainable ones (two points can make one program: the first is
    kept).

    With `grow` (an installed corpus's manifest): the `check` programs
    first (measured again, to compare with the corpus's labels: is this the
    corpus's machine?), then only what the corpus lacks, at most `limit`."""
    mp = make_programs()
    specs = [s for s in mp.all_specs() if not only or s.name in only or s.family in only]
    out = {s.name: None for s in specs}
    if sweeps:
        from tpuperf_cli.generate.sweeps import sweep_points

        keep = trainable()
        for point in sweep_points([s.name for s in specs if s.name in keep], SWEEP_SEED):
            out.setdefault(mp.sweep_spec(*point).name, list(point))
    todo = list(out.items())
    if grow is not None:
        have = {p["name"] for p in grow["programs"]} | set(grow.get("sweeps_left_out", ()))
        missing = [c for c in check if c not in have]
        if missing:
            raise SystemExit(f"gpu_corpus: --check {' '.join(missing)}: not in the corpus")
        todo = [(c, None) for c in check] + [t for t in todo if t[0] not in have]
    if limit is not None:
        todo = todo[:len(check) + limit]
    return todo


def compile_one(name, point, hlo_dir):
    """In a child process: compile one program for jax's default backend."""
    mp = make_programs()
    mp.setup_jax()
    spec = mp.sweep_spec(*point) if point else {s.name: s for s in mp.all_specs()}[name]
    t0 = time.time()
    text = mp.compile_text(spec)
    (hlo_dir / f"{name}.hlo").write_text(text)
    (hlo_dir / f"{name}.json").write_text(json.dumps({
        "name": name, "family": spec.family, "size": spec.size, "mode": spec.mode,
        "batch": spec.batch, "dtype": spec.dtype, "variant": spec.variant,
        "sweep_of": point[0] if point else None, "k": point[3] if point else 1,
        "compile_seconds": round(time.time() - t0, 2),
        "max_elements": mp.max_elements(text)}) + "\n")


class Runner:
    """Runs the child processes of the tasks; stop() kills them all."""

    def __init__(self, work, backend, extra, stop_at):
        self.work, self.backend, self.extra, self.stop_at = work, backend, extra, stop_at
        self.env = environment(backend)
        self.procs, self.lock, self.stopped = set(), threading.Lock(), False

    def _start(self, cmd, **kw):
        with self.lock:
            if self.stopped:
                return None
            p = subprocess.Popen(cmd, env=self.env, start_new_session=True, **kw)
            self.procs.add(p)
            return p

    def _done(self, *procs):
        with self.lock:
            self.procs.difference_update(procs)

    def stop(self):
        with self.lock:
            self.stopped = True
            for p in self.procs:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except OSError:
                    pass

    def build(self, name, point):
        hlo = self.work / "hlo" / f"{name}.hlo"
        if hlo.exists():
            return None
        errlog = self.work / "logs" / f"{name}.compile.err"
        with open(errlog, "w") as err:
            p = self._start([sys.executable, str(Path(__file__).resolve()), "--work",
                             str(self.work), "--compile-one", json.dumps([name, point])],
                            stdout=err, stderr=err)
            if p is None:
                return "stopped"
            try:
                p.wait(timeout=max(1.0, self.stop_at - time.time()))
            except subprocess.TimeoutExpired:
                self.stop()
                p.wait()
            self._done(p)
        if p.returncode != 0 or not hlo.exists():
            hlo.unlink(missing_ok=True)
            return "compile: " + last_line(errlog)
        return None

    def measure(self, name):
        dest = self.work / "kernels" / f"{name}.msgpack"
        if measured_whole(dest):
            return None
        cut = dest.with_suffix(".partial")
        tmp = dest.with_suffix(".tmp")
        errlog = self.work / "logs" / f"{name}.measure.err"
        with open(tmp, "wb") as out, open(errlog, "w") as err:
            split = self._start(tool("hlo-split") + ["-p", name, str(self.work / "hlo" / f"{name}.hlo")],
                                stdout=subprocess.PIPE, stderr=err)
            if split is None:
                return "stopped"
            meas = self._start(tool("measure") + ["--backend", self.backend, "--no-progress",
                                                  "--cache-dir", str(self.work / "cache")]
                               + self.extra, stdin=split.stdout, stdout=out, stderr=err)
            split.stdout.close()
            if meas is None:
                split.kill()
                split.wait()
                return "stopped"
            meas.wait()
            split.wait()
            self._done(split, meas)
        if split.returncode != 0 or meas.returncode != 0:
            kept = salvage(tmp, dest)
            why = "split" if split.returncode != 0 else "measure"
            if self.stopped:
                if kept:      # the next run measures it whole (its kernels are in the cache)
                    cut.touch()
                return f"stopped at --stop ({kept} kernels kept)" if kept else "stopped at --stop"
            return f"{why}: " + last_line(errlog)
        os.replace(tmp, dest)
        cut.unlink(missing_ok=True)
        return None


def measured_whole(dest):
    """Whether a program's kernels are all measured: its shard is there and
    no .partial beside it says --stop cut it short (a later run on the same
    work folder measures such a one again, its kernels from the cache)."""
    return dest.exists() and not dest.with_suffix(".partial").exists()


def last_line(path):
    lines = [x for x in Path(path).read_text(errors="replace").splitlines() if x.strip()]
    return lines[-1][:300] if lines else "failed, no message"


def salvage(tmp, dest):
    """Keep the whole records of a stopped measure's output; how many."""
    from tpuperf_cli.stream import RecordWriter, read_records

    records = []
    try:
        for r in read_records(str(tmp)):
            records.append(r)
    except Exception:
        pass          # the record cut off by the kill, and nothing after it
    tmp.unlink(missing_ok=True)
    if records:
        with RecordWriter(str(dest)) as w:
            for r in records:
                w.write(r)
    return len(records)


def read(path):
    from tpuperf_cli.stream import read_records

    return list(read_records(str(path)))


def machine():
    """What nvidia-smi says of the GPU (name, driver, CUDA), if it is there."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return {}
    out = {}
    try:
        q = subprocess.run([smi, "--query-gpu=name,driver_version,memory.total,clocks.max.sm",
                            "--format=csv,noheader"], capture_output=True, text=True, timeout=30)
        name, driver, memory, clock = [x.strip() for x in q.stdout.splitlines()[0].split(",")]
        out.update(gpu=name, driver=driver, memory=memory, max_sm_clock=clock)
        head = subprocess.run([smi], capture_output=True, text=True, timeout=30).stdout
        if "CUDA Version:" in head:
            out["cuda"] = head.split("CUDA Version:")[1].split()[0]
    except (OSError, subprocess.SubprocessError, IndexError, ValueError):
        pass
    return out


def tally(records):
    """(the measured records, {error kind: count} of the others)."""
    ok, errors = [], {}
    for r in records:
        if r.get("runtime_ns"):
            ok.append(r)
        else:
            kind = str(r.get("error", "none")).split(":")[0]
            errors[kind] = errors.get(kind, 0) + 1
    return ok, errors


def manifest(work, names, failures, seconds):
    """work/manifest.json; `seconds` is this run's, added to the earlier
    runs' on the same work folder (work/runs.json)."""
    runs_file = work / "runs.json"
    runs = json.loads(runs_file.read_text()) if runs_file.exists() else []
    runs.append(seconds)
    runs_file.write_text(json.dumps(runs) + "\n")
    programs, target, total, distinct = [], None, 0, set()
    for name in names:
        spec_file = work / "hlo" / f"{name}.json"
        shard = work / "kernels" / f"{name}.msgpack"
        if not shard.exists():
            continue
        spec = json.loads(spec_file.read_text()) if spec_file.exists() else {"name": name}
        records = read(shard)
        ok, errors = tally(records)
        target = target or next((r["target"] for r in ok if r.get("target")), None)
        total += len(records)
        distinct |= {r.get("fingerprint") for r in ok}
        programs.append({**spec, "kernels": len(records), "measured": len(ok), "failed": errors,
                         "partial": name in failures})
    import jax

    doc = {"built_by": "examples/gpu_corpus.py", "target": target, "machine": machine(),
           "jax": jax.__version__, "python": sys.version.split()[0], "programs": programs,
           "kernels": total, "distinct_measured": len(distinct), "failures": failures,
           "seconds": round(sum(runs), 1), "runs_seconds": runs,
           "finished_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    (work / "manifest.json").write_text(json.dumps(doc, indent=1) + "\n")
    return doc


def archive(work, prefix, parts):
    """PREFIX-meta.tar.xz (the manifest, hlo/, logs/) and the kernel shards
    in `parts` archives PREFIX-kernels-I.tar.xz (each a few MiB: small
    files travel back from a lent machine), compressed in parallel."""
    shards = sorted((work / "kernels").glob("*.msgpack"))
    Path(prefix).parent.mkdir(parents=True, exist_ok=True)
    jobs = [(f"{prefix}-meta.tar.xz", [work / "manifest.json", work / "hlo", work / "logs"])]
    jobs += [(f"{prefix}-kernels-{i}.tar.xz", shards[i::parts]) for i in range(parts)]

    def write(job):
        path, members = job
        with tarfile.open(path, "w:xz", preset=3) as tar:
            for m in members:
                if m.exists():
                    tar.add(m, arcname=str(m.relative_to(work)),
                            filter=lambda info: None if info.name.endswith(".tmp") else info)
        return path

    with ThreadPoolExecutor(len(jobs)) as pool:
        for path in pool.map(write, jobs):
            log(f"wrote {path} ({os.path.getsize(path) / 2**20:.1f} MiB)")


def shard_name(p):
    """A program's shard in the corpus folder: a sweep's is a generated
    pseudo-program's (`sweeps-P`)."""
    return f"sweeps-{p['name']}" if p.get("sweep_of") else p["name"]


def machine_check(into, work, names):
    """The `check` programs of a --grow run against the corpus's labels:
    the ratio of each kernel's new runtime to its corpus runtime (kernels
    measured in both, by fingerprint)."""
    import numpy as np

    from tpuperf_cli.stream import read_records

    old, new = {}, {}
    for name in names:
        for r in read_records(str(into / "kernels" / f"{name}.zst")):
            if r.get("runtime_ns"):
                old[r["fingerprint"]] = r["runtime_ns"]
        for r in read(work / "kernels" / f"{name}.msgpack"):
            if r.get("runtime_ns"):
                new[r["fingerprint"]] = r["runtime_ns"]
    both = sorted(old.keys() & new.keys())
    if not both:
        return {"programs": sorted(names), "kernels": 0}
    ratio = np.array([new[f] / old[f] for f in both])
    return {"programs": sorted(names), "kernels": len(both),
            "median_ratio": round(float(np.median(ratio)), 3),
            "p10": round(float(np.percentile(ratio, 10)), 3),
            "p90": round(float(np.percentile(ratio, 90)), 3)}


def install(work, into, noise_json=None, merge=False):
    """The unpacked archives in `work` as a corpus folder `into` (see the
    module docstring). With `merge`, a --grow run's programs join the
    corpus already in `into` (which must be of the same target): its check
    programs are compared with the corpus's labels, not installed."""
    from tpuperf_cli.hlo.parser import parse_module
    from tpuperf_cli.hlo.split import kernel_records
    from tpuperf_cli.records import ORIGIN, SOURCE, target_identity
    from tpuperf_cli.stream import RecordWriter, read_records

    doc = json.loads((work / "manifest.json").read_text())
    base = None
    if merge:
        base = json.loads((into / "manifest.json").read_text())
        if target_identity(doc["target"]) != target_identity(base["target"]):
            raise SystemExit(f"gpu_corpus: {work} was measured on {doc['target']}, the corpus in "
                             f"{into} on {base['target']}: a corpus comes from one machine")
    (into / "kernels").mkdir(parents=True, exist_ok=True)
    keep = trainable()
    programs, left_out = {}, set(base.get("sweeps_left_out", ())) if base else set()
    installed = {p["name"] for p in base["programs"]} if base else set()
    check = [p["name"] for p in doc["programs"] if p["name"] in installed]
    for p in doc["programs"]:         # each once (an older run listed some twice)
        if p.get("sweep_of") and p["sweep_of"] not in keep:
            left_out.add(p["name"])      # made from a valid or test program of a split
        elif p["name"] not in installed:
            programs.setdefault(p["name"], p)
    new = list(programs.values())
    for p in new:
        records = read(work / "kernels" / f"{p['name']}.msgpack")
        shard = shard_name(p)
        if p.get("sweep_of"):
            # a generated pseudo-program, as `tpuperf generate --source sweeps`
            # names its records: the splits' "sweeps:*" puts it in training
            for r in records:
                r.update(program=f"sweeps:{p['name']}", **{SOURCE: "sweeps", ORIGIN: p["sweep_of"]})
        hlo = work / "hlo" / f"{p['name']}.hlo"
        whole = sum(1 for _ in kernel_records(parse_module(hlo.read_text(), str(hlo)), p["name"]))
        p["partial"] = len(records) < whole
        p["kernels_in_program"] = whole
        with RecordWriter(str(into / "kernels" / f"{shard}.zst"), compress=True, level=19) as w:
            for r in records:
                w.write(r)
    if base:
        run = {"machine": doc["machine"], "jax": doc["jax"], "finished_utc": doc.get("finished_utc"),
               "seconds": doc["seconds"],
               "programs_added": len(new), "check": machine_check(into, work, check)}
        log(f"the corpus's programs measured again: {run['check']}")
        doc = dict(base, programs=base["programs"] + new, grown=base.get("grown", []) + [run])
    else:
        doc["programs"] = new
    # the totals, over every shard of the corpus
    failed, distinct, measured = {}, set(), 0
    for p in doc["programs"]:
        records = list(read_records(str(into / "kernels" / f"{shard_name(p)}.zst")))
        ok, errors = tally(records)
        measured += len(ok)
        distinct |= {r["fingerprint"] for r in ok}
        for kind, n in errors.items():
            failed[kind] = failed.get(kind, 0) + n
    doc.update(kernels=sum(p["kernels"] for p in doc["programs"]), measured=measured,
               distinct_measured=len(distinct), failed_kernels=failed,
               partial_programs=sorted(p["name"] for p in doc["programs"] if p["partial"]))
    doc.pop("failures", None)     # per run; `partial` says what --stop cut short
    if left_out:
        doc["sweeps_left_out"] = sorted(left_out)
        log(f"left out {len(left_out)} sweep program(s) of programs outside some split's "
            f"train list (nothing made from a valid or test program enters training)")
    if noise_json:
        doc["measurement_noise"] = json.loads(Path(noise_json).read_text())
    doc["installed_by"] = "examples/gpu_corpus.py --install"
    (into / "manifest.json").write_text(json.dumps(doc, indent=1) + "\n")
    log(f"{into}: {len(doc['programs'])} programs, {doc['kernels']} kernel records, "
        f"{measured} measured ({len(distinct)} distinct), failed {failed}, "
        f"{len(doc['partial_programs'])} partial")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog=__doc__.split("\n\n", 1)[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", help="folder for hlo/, kernels/, logs/, the manifest")
    ap.add_argument("--backend", default="gpu", choices=sorted(JAX_PLATFORM))
    ap.add_argument("--only", nargs="+", help="these programs or families only")
    ap.add_argument("--sweeps", action="store_true",
                    help="after the example programs, the sweep grid's points of them")
    ap.add_argument("--jobs", type=int, default=8, help="programs at a time (default 8)")
    ap.add_argument("--budget", type=float, default=300,
                    help="seconds after which no program is started (default 300)")
    ap.add_argument("--stop", type=float, default=None,
                    help="seconds after which running programs are stopped, their measured "
                         "kernels kept (default: --budget + 120)")
    ap.add_argument("--samples", type=int, default=15, help="measure --samples")
    ap.add_argument("--archive", metavar="PREFIX",
                    help="write PREFIX-meta.tar.xz (the manifest, hlo/, logs/) and "
                         "PREFIX-kernels-I.tar.xz (kernels/, in --parts parts)")
    ap.add_argument("--parts", type=int, default=4, help="kernel archives (default 4)")
    ap.add_argument("--install", metavar="W",
                    help="write the unpacked archives in W as a corpus folder (--into)")
    ap.add_argument("--into", default=str(HERE / "corpus-gpu"),
                    help="with --install: the corpus folder (default examples/corpus-gpu)")
    ap.add_argument("--noise", metavar="JSON",
                    help="with --install: bench_measure_noise.py's --json for the manifest")
    ap.add_argument("--grow", metavar="DIR",
                    help="add to the corpus installed in DIR: measure the --check programs again, "
                         "then only the programs (with --sweeps, the sweeps) DIR lacks")
    ap.add_argument("--check", nargs="+", default=list(CHECK_PROGRAMS),
                    help="with --grow: the corpus's programs measured again, to compare with its "
                         f"labels (default {' '.join(CHECK_PROGRAMS)})")
    ap.add_argument("--limit", type=int, help="at most this many programs (after --check's)")
    ap.add_argument("--merge", action="store_true",
                    help="with --install: add a --grow run's programs to the corpus in --into "
                         "(the same target), comparing its --check programs with the corpus")
    ap.add_argument("--compile-one", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)

    if a.grow and not (Path(a.grow) / "manifest.json").is_file():
        ap.error(f"--grow {a.grow}: no manifest.json there (an installed corpus folder)")
    if a.install and a.merge and not (Path(a.into) / "manifest.json").is_file():
        ap.error(f"--merge: {a.into} has no manifest.json to add to")
    if a.install:
        install(Path(a.install), Path(a.into), a.noise, merge=a.merge)
        return 0
    if not a.work:
        ap.error("--work is required (or --install)")
    work = Path(a.work)
    if a.compile_one:
        name, point = json.loads(a.compile_one)
        compile_one(name, point, work / "hlo")
        return 0
    t0 = time.time()
    for sub in ("hlo", "kernels", "logs"):
        (work / sub).mkdir(parents=True, exist_ok=True)
    grow = json.loads((Path(a.grow) / "manifest.json").read_text()) if a.grow else None
    todo = tasks(set(a.only or ()), a.sweeps, grow, a.check if grow else (), a.limit)
    extra = ["--samples", str(a.samples), "--cpus", "all"]
    runner = Runner(work, a.backend, extra, t0 + (a.stop or a.budget + 120))
    timer = threading.Timer(max(0.0, runner.stop_at - time.time()), runner.stop)
    timer.daemon = True
    timer.start()
    failures = {}

    def one(task, first=False):
        name, point = task
        if not first and (time.time() > t0 + a.budget or runner.stopped):
            return name, "budget"
        started = time.time()
        why = runner.build(name, point) or runner.measure(name)
        if why:
            failures[name] = why
            log(f"{name}: {why}")
        else:
            log(f"{name}: {time.time() - started:.1f}s (at {time.time() - t0:.0f}s)")
        return name, why

    log(f"{len(todo)} programs, backend {a.backend}, {a.jobs} at a time, budget {a.budget:.0f}s")
    first, why = one(todo[0], first=True)       # whatever the budget: the set-up's check
    ok = not why and (work / "kernels" / f"{first}.msgpack").exists() and any(
        r.get("runtime_ns") for r in read(work / "kernels" / f"{first}.msgpack"))
    if not ok:
        log(f"the first program failed ({why or 'no kernel timed'}): stopping; see {work}/logs")
    else:
        with ThreadPoolExecutor(a.jobs) as pool:
            list(pool.map(one, todo[1:]))
    timer.cancel()
    this_run = round(time.time() - t0, 1)
    doc = manifest(work, [n for n, _ in todo], failures, this_run)
    log(f"{len(doc['programs'])} programs measured, {doc['kernels']} kernels, "
        f"{doc['distinct_measured']} distinct measured, in {this_run:.0f}s "
        f"({doc['seconds']:.0f}s over {len(doc['runs_seconds'])} run(s))")
    if a.archive:
        archive(work, a.archive, a.parts)
    return 0 if ok else 3


if __name__ == "__main__":
    sys.exit(main())
