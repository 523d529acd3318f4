"""Crash tests (issue 13): SIGKILL `measure` and `train` at random points,
run them again, and check what was done survives whole.

measure: every measurement committed to the cache before a kill is still
there, unchanged (its measured_at stamp too: nothing is timed twice), the
output written so far is a valid stream, and the last run takes exactly the
cached kernels from the cache. train: after every kill the model file and
its resume state load as plain data (never half-written), and the run
resumed to the end gives the same weights as an uninterrupted one.

The kill points are drawn from a seeded generator ($TPUPERF_CRASH_SEED,
default 13) so a failure can be replayed.
"""

import io
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

from tpuperf_cli.records import new_record
from tpuperf_cli.stream import read_records

from conftest import stream_bytes, write_stream
from synthetic import synthetic_records

TOOL = [sys.executable, "-m", "tpuperf_cli"]
SEED = int(os.environ.get("TPUPERF_CRASH_SEED", "13"))


def matmul_hlo(n):
    return f"""HloModule mm{n}, entry_computation_layout={{(f32[{n},{n}]{{1,0}}, f32[{n},{n}]{{1,0}})->f32[{n},{n}]{{1,0}}}}

ENTRY %main (a: f32[{n},{n}], b: f32[{n},{n}]) -> f32[{n},{n}] {{
  %a = f32[{n},{n}]{{1,0}} parameter(0)
  %b = f32[{n},{n}]{{1,0}} parameter(1)
  ROOT %dot = f32[{n},{n}]{{1,0}} dot(%a, %b), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
}}
"""


def _rows(cache_dir):
    path = cache_dir / "measurements.sqlite3"
    if not path.exists():
        return {}
    with sqlite3.connect(path) as db:
        return {fp: (rt, at) for fp, rt, at in
                db.execute("SELECT fingerprint, runtime_ns, measured_at FROM measurement")}


def _wait_for(predicate, seconds):
    deadline = time.time() + seconds
    while not predicate():
        if time.time() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_measure_killed_at_random_points_loses_nothing_and_times_nothing_twice(tmp_path):
    rng = random.Random(SEED)
    kernels = [new_record("kernel", program="t", kernel=f"mm{n}", index=i, count=1, hlo=matmul_hlo(n),
                          opcode="dot", computation="main") for i, n in enumerate(range(8, 8 + 40))]
    stream = tmp_path / "kernels.msgpack"
    stream.write_bytes(stream_bytes(kernels))
    cache_dir = tmp_path / "cache"
    args = TOOL + ["measure", "--backend", "cpu", "--min-time", "2ms", "--samples", "3",
                   "--batch", "2", "--cache-dir", str(cache_dir), "--no-progress", str(stream)]
    kills = 0
    for attempt in range(3):
        before = _rows(cache_dir)
        out_path = tmp_path / f"out{attempt}.msgpack"
        with open(out_path, "wb") as out:
            p = subprocess.Popen(args, stdout=out, stderr=subprocess.PIPE, start_new_session=True)
            started = _wait_for(lambda: out_path.stat().st_size > 0 or p.poll() is not None, 120)
            assert started
            time.sleep(rng.uniform(0, 1.5))
            if p.poll() is None:
                os.kill(p.pid, signal.SIGKILL)     # measure itself; its worker must go on its own
                kills += 1
            p.wait(30)
            p.stderr.close()
        try:
            # the worker process notices its parent is gone and ends
            assert _wait_for(lambda: subprocess.run(["pgrep", "-s", str(p.pid)],
                                                    capture_output=True).returncode != 0, 30)
        finally:
            subprocess.run(["pkill", "-KILL", "-s", str(p.pid)], capture_output=True)
        after = _rows(cache_dir)
        # nothing committed before the kill is lost or timed again
        assert all(after.get(fp) == row for fp, row in before.items())
        got = list(read_records(str(out_path)))        # a valid stream up to the kill
        assert all(r["runtime_ns"] > 0 for r in got)
        assert len(after) >= len(before)
    assert kills >= 2
    cached = _rows(cache_dir)
    assert 0 < len(cached) < len(kernels)
    p = subprocess.run(args, capture_output=True, timeout=300)
    assert p.returncode == 0, p.stderr.decode()
    err = p.stderr.decode()
    assert f"{len(kernels) - len(cached)} timed now, {len(cached)} from the cache" in err, err
    final = _rows(cache_dir)
    assert len(final) == len(kernels)
    assert all(final[fp] == row for fp, row in cached.items())
    out = list(read_records(io.BytesIO(p.stdout)))
    assert [r["kernel"] for r in out] == [k["kernel"] for k in kernels]
    assert all(r["runtime_ns"] > 0 for r in out)


def _loads_as_plain_data(path):
    import torch

    d = torch.load(path, map_location="cpu", weights_only=True)
    assert isinstance(d, dict) and d
    return d


@pytest.mark.slow
def test_train_killed_at_random_points_resumes_to_the_same_model(tmp_path):
    import torch

    rng = random.Random(SEED)
    data = tmp_path / "d"
    data.mkdir()
    records = synthetic_records(n_programs=3, kernels=20, seed=5)
    for program in ("synth0", "synth1", "synth2"):
        write_stream(data / f"{program}.zst", [r for r in records if r["program"] == program])
    base = ["train", "--data", str(data / "*.zst"), "--epochs", "25", "--batch-size", "8",
            "--hidden", "8", "--layers", "1", "--opcode-dim", "4", "--threads", "1", "--seed", "0"]
    ref = tmp_path / "ref.pt"
    p = subprocess.run(TOOL + base + ["-o", str(ref)], capture_output=True, timeout=600)
    assert p.returncode == 0, p.stderr.decode()

    out = tmp_path / "m.pt"
    state = str(out) + ".resume"
    kills = 0
    def stamp():
        return os.stat(state).st_mtime_ns if os.path.exists(state) else None

    for attempt in range(8):
        args = TOOL + base + ["-o", str(out)] + (["--resume"] if os.path.exists(state) else [])
        was = stamp()
        p = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        # a new epoch's state marks progress; kill somewhere after it (4 times, then let it end)
        _wait_for(lambda: stamp() != was or p.poll() is not None, 120)
        time.sleep(rng.uniform(0, 0.6))
        if p.poll() is None and kills < 4:
            os.kill(p.pid, signal.SIGKILL)
            kills += 1
        code = p.wait(60)
        err = p.stderr.read().decode()
        p.stderr.close()
        # never half-written, whatever moment the kill came
        if out.exists():
            assert "state_dict" in _loads_as_plain_data(out)
        if os.path.exists(state):
            assert {"epoch", "weights"} <= set(_loads_as_plain_data(state))
        if code == 0:
            break
        assert code == -signal.SIGKILL, err
    assert code == 0 and kills >= 2, (code, kills)
    a = torch.load(ref, weights_only=True)
    b = torch.load(out, weights_only=True)
    assert all(torch.equal(a["state_dict"][k], b["state_dict"][k]) for k in a["state_dict"])
    assert json.dumps(a.get("trained", {}).get("history")) == json.dumps(b.get("trained", {}).get("history"))
