#!/usr/bin/env python3
"""Build a corpus on a machine with an accelerator, in one sitting.

Made for a lent GPU machine (reached with the `device` tool for up to half
an hour, its own Python with jax 0.11 and CUDA 13, no DGL, no zstandard),
and run there from a copy of the checkout:

    PYTHONPATH=$PWD python3 examples/gpu_corpus.py --work /tmp/gpu \\
        --budget 500 --archive $OUT/corpus-gpu.tar.xz

Steps, each skipped for what --work already holds (a second call goes on
where the first stopped, if the machine is still the same):

1. programs: the example programs (examples/make_programs.py) compiled by
   XLA for --backend on this machine, so the kernels are what XLA:GPU
   makes (its fusions, cuBLAS/cuDNN custom calls, Triton fusions), --jobs
   compiles at a time, each in its own process: work/hlo/P.hlo;
2. measure: `hlo-split P.hlo | measure --backend B` per program (the
   device's clock on GPU and TPU: measure --clock events), --jobs programs
   at a time, each in its own process (a GPU time-slices processes, so
   one process's kernels do not overlap another's: CUPTI's durations stay
   each kernel's own): work/kernels/P.msgpack;
3. noise: with --noise N, N distinct measured kernels are timed again in
   another process, in reverse order, and the two runs compared (the
   median and 90th percentile of |a/b - 1|, the worst ratio);
4. manifest: work/manifest.json names the device, driver, CUDA and jax
   versions (the records' target and nvidia-smi), the programs, kernel
   counts, failures, seconds and the noise figures;
5. archive: with --archive, one .tar.xz of hlo/, kernels/ and the
   manifest (the device tool brings back a few files of at most 16 MiB).

No new program is started past --budget seconds; work under way finishes.
Progress goes to stderr. Back home, examples/build_corpus.py-style shards
come from `tar xf` and `zstd` (the GPU machine has no zstandard).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
JAX_PLATFORM = {"gpu": "cuda", "tpu": "tpu", "cpu": "cpu"}


def log(msg):
    print(f"gpu_corpus: {msg}", file=sys.stderr, flush=True)


def tool(name):
    return [sys.executable, "-m", "tpuperf_cli", name]


def environment(backend):
    env = dict(os.environ, JAX_PLATFORMS=JAX_PLATFORM[backend],
               # every process gets the memory it uses, not 75% of the card
               XLA_PYTHON_CLIENT_PREALLOCATE="false")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    return env


def program_names(only):
    sys.path.insert(0, str(HERE))
    from make_programs import all_specs

    specs = all_specs()
    if only:
        specs = [s for s in specs if s.name in only or s.family in only]
    return [s.name for s in specs]


def build_program(name, work, env):
    dest = work / "hlo" / f"{name}.hlo"
    if dest.exists():
        return name, 0.0, None
    t0 = time.time()
    p = subprocess.run([sys.executable, str(HERE / "make_programs.py"), "--only", name,
                        "--out", str(work / "hlo"),
                        "--manifest", str(work / "hlo" / f".{name}.json")],
                       env=env, capture_output=True, text=True)
    if p.returncode != 0 or not dest.exists():
        return name, time.time() - t0, (p.stderr.strip().splitlines() or ["failed"])[-1]
    return name, time.time() - t0, None


def measure_program(name, work, backend, env, extra):
    dest = work / "kernels" / f"{name}.msgpack"
    if dest.exists():
        return name, 0.0, None
    t0 = time.time()
    tmp = dest.with_suffix(".tmp")
    with open(tmp, "wb") as out:
        split = subprocess.Popen(tool("hlo-split") + ["-p", name, str(work / "hlo" / f"{name}.hlo")],
                                 stdout=subprocess.PIPE, env=env)
        meas = subprocess.run(tool("measure") + ["--backend", backend, "--no-progress",
                                                 "--cache-dir", str(work / "cache")] + extra,
                              stdin=split.stdout, stdout=out, stderr=subprocess.PIPE,
                              env=env, text=True)
        split.stdout.close()
    if split.wait() != 0 or meas.returncode != 0:
        tmp.unlink(missing_ok=True)
        return name, time.time() - t0, (meas.stderr.strip().splitlines() or ["failed"])[-1]
    os.replace(tmp, dest)
    return name, time.time() - t0, None


def run_all(fn, names, jobs, deadline, what):
    """fn(name) for each name, jobs at a time, none started past deadline."""
    done, failed = {}, {}

    def one(name):
        if time.time() > deadline:
            return name, None, "budget"
        return fn(name)

    with ThreadPoolExecutor(jobs) as pool:
        for name, seconds, error in pool.map(one, names):
            if error == "budget":
                continue
            if error:
                failed[name] = error
                log(f"{what} {name}: {error}")
            else:
                done[name] = seconds
                if seconds:
                    log(f"{what} {name}: {seconds:.1f}s")
    return done, failed


def read(path):
    from tpuperf_cli.stream import read_records

    return list(read_records(str(path)))


def noise(work, backend, env, count, extra):
    """Time `count` distinct measured kernels again (reversed, no cache)
    and compare with the first run."""
    from tpuperf_cli.stream import RecordWriter

    first = {}
    for shard in sorted((work / "kernels").glob("*.msgpack")):
        for r in read(shard):
            if r.get("runtime_ns") and r.get("fingerprint") not in first:
                first[r["fingerprint"]] = r
    picked = list(first.values())[:count]
    if not picked:
        return None
    again_in = work / "noise-in.msgpack"
    with RecordWriter(str(again_in)) as w:
        for r in reversed(picked):
            w.write({k: v for k, v in r.items() if k not in ("runtime_ns", "runs", "noise",
                                                              "target", "error")})
    t0 = time.time()
    p = subprocess.run(tool("measure") + ["--backend", backend, "--no-cache", "--no-progress",
                                          str(again_in)] + extra,
                       env=env, capture_output=True)
    if p.returncode != 0:
        return {"error": p.stderr.decode()[-300:]}
    import io

    from tpuperf_cli.stream import read_records

    second = {r["fingerprint"]: r for r in read_records(io.BytesIO(p.stdout)) if r.get("runtime_ns")}
    ratios = sorted(first[f]["runtime_ns"] / second[f]["runtime_ns"] for f in second)
    if not ratios:
        return None
    spread = sorted(abs(x - 1) for x in ratios)
    return {"kernels": len(ratios), "median": spread[len(spread) // 2],
            "p90": spread[int(0.9 * (len(spread) - 1))],
            "max_ratio": max(max(ratios), 1 / min(ratios)),
            "median_ratio": ratios[len(ratios) // 2], "seconds": round(time.time() - t0, 1)}


def machine():
    """What nvidia-smi says of the GPU (name, driver, CUDA), if it is there."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return {}
    out = {}
    try:
        q = subprocess.run([smi, "--query-gpu=name,driver_version,memory.total",
                            "--format=csv,noheader"], capture_output=True, text=True, timeout=30)
        name, driver, memory = [x.strip() for x in q.stdout.splitlines()[0].split(",")]
        out.update(gpu=name, driver=driver, memory=memory)
        head = subprocess.run([smi], capture_output=True, text=True, timeout=30).stdout
        if "CUDA Version:" in head:
            out["cuda"] = head.split("CUDA Version:")[1].split()[0]
    except (OSError, subprocess.SubprocessError, IndexError, ValueError):
        pass
    return out


def manifest(work, names, built, measured, failures, noise_figures, seconds):
    programs, target, total, distinct = [], None, 0, set()
    for name in names:
        shard = work / "kernels" / f"{name}.msgpack"
        if not shard.exists():
            continue
        records = read(shard)
        ok = [r for r in records if r.get("runtime_ns")]
        target = target or next((r["target"] for r in ok if r.get("target")), None)
        total += len(records)
        distinct |= {r.get("fingerprint") for r in ok}
        errors = {}
        for r in records:
            if "error" in r:
                kind = str(r["error"]).split(":")[0]
                errors[kind] = errors.get(kind, 0) + 1
        programs.append({"name": name, "kernels": len(records), "measured": len(ok),
                         "failed": errors, "measure_seconds": measured.get(name),
                         "compile_seconds": built.get(name)})
    import jax

    doc = {"built_by": "examples/gpu_corpus.py", "target": target, "machine": machine(),
           "jax": jax.__version__, "programs": programs, "kernels": total,
           "distinct_measured": len(distinct), "failures": failures,
           "noise": noise_figures, "seconds": seconds}
    (work / "manifest.json").write_text(json.dumps(doc, indent=1) + "\n")
    return doc


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog=__doc__.split("\n\n", 1)[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", required=True, help="folder for hlo/, kernels/, the manifest")
    ap.add_argument("--backend", default="gpu", choices=sorted(JAX_PLATFORM))
    ap.add_argument("--only", nargs="+", help="these programs or families only")
    ap.add_argument("--jobs", type=int, default=8, help="processes at a time (default 8)")
    ap.add_argument("--budget", type=float, default=480,
                    help="seconds after which no new program is started (default 480)")
    ap.add_argument("--noise", type=int, default=0, metavar="N",
                    help="time N distinct kernels a second time and compare")
    ap.add_argument("--samples", type=int, default=15, help="measure --samples")
    ap.add_argument("--archive", help="write hlo/, kernels/ and manifest.json to this .tar.xz")
    a = ap.parse_args(argv)

    t0 = time.time()
    deadline = t0 + a.budget
    work = Path(a.work)
    (work / "hlo").mkdir(parents=True, exist_ok=True)
    (work / "kernels").mkdir(parents=True, exist_ok=True)
    env = environment(a.backend)
    names = program_names(set(a.only or ()))
    extra = ["--samples", str(a.samples)]
    log(f"{len(names)} programs, backend {a.backend}, {a.jobs} at a time, "
        f"budget {a.budget:.0f}s")
    built, failed_build = run_all(lambda n: build_program(n, work, env), names, a.jobs,
                                  deadline, "compile")
    ready = [n for n in names if (work / "hlo" / f"{n}.hlo").exists()]
    measured, failed_measure = run_all(lambda n: measure_program(n, work, a.backend, env, extra),
                                       ready, a.jobs, deadline, "measure")
    noise_figures = noise(work, a.backend, env, a.noise, extra) if a.noise else None
    doc = manifest(work, names, built, measured, {**failed_build, **failed_measure},
                   noise_figures, round(time.time() - t0, 1))
    log(f"{len(doc['programs'])} programs measured, {doc['kernels']} kernels, "
        f"{doc['distinct_measured']} distinct measured; noise {noise_figures}")
    if a.archive:
        with tarfile.open(a.archive, "w:xz") as tar:
            for sub in ("hlo", "kernels", "manifest.json"):
                tar.add(work / sub, arcname=sub,
                        filter=lambda info: None if info.name.endswith((".tmp", ".json"))
                        and info.name != "manifest.json" else info)
        log(f"wrote {a.archive} ({os.path.getsize(a.archive) / 2**20:.1f} MiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
