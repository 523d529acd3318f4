"""Data-parallel training (model.dist): two processes on this machine give
the result of one."""

import json
import os
import socket
import subprocess
import sys

import numpy as np
import pytest

from synthetic import synthetic_records

torch = pytest.importorskip("torch")

from tpuperf_cli.errors import TpuperfError  # noqa: E402
from tpuperf_cli.model.data import Corpus  # noqa: E402
from tpuperf_cli.model.dist import Dist, owner  # noqa: E402
from tpuperf_cli.stream import RecordWriter  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORKER = os.path.join(ROOT, "tests", "dist_worker.py")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def env(**kw):
    e = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
             TPUPERF_THREADS="1", OMP_NUM_THREADS="1")
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        e.pop(k, None)
    e.update({k: str(v) for k, v in kw.items()})
    return e


def test_two_processes_step_as_one(tmp_path):
    """Same seed, same global batches: two ranks with half of each batch
    end with the weights of one process with the whole batch (the gradient
    is the example-weighted mean across ranks), and the weights moved far
    more than the tolerance."""
    one = tmp_path / "one.pt"
    two = tmp_path / "two.pt"
    port = free_port()
    procs = [subprocess.Popen([sys.executable, WORKER, str(two)], stderr=subprocess.PIPE, text=True,
                              env=env(RANK=r, LOCAL_RANK=r, WORLD_SIZE=2, MASTER_ADDR="127.0.0.1",
                                      MASTER_PORT=port))
             for r in range(2)]
    alone = subprocess.run([sys.executable, WORKER, str(one)], stderr=subprocess.PIPE, text=True, env=env())
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    assert alone.returncode == 0, alone.stderr
    a = torch.load(one, weights_only=True)
    b = torch.load(two, weights_only=True)
    assert a["world"] == 1 and b["world"] == 2
    # the whole batch's loss on every step
    np.testing.assert_allclose([x[0] for x in a["losses"]], [x[0] for x in b["losses"]])
    np.testing.assert_allclose([x[1] for x in a["losses"]], [x[1] for x in b["losses"]], rtol=1e-4)
    for key in ("net", "ema"):
        for name, w in a[key].items():
            torch.testing.assert_close(b[key][name], w, rtol=1e-4, atol=1e-5, msg=f"{key} {name}")
    moved = max(float((a["net"][k] - w).abs().max()) for k, w in a["init"].items())
    assert moved > 1e-2          # a thousand times the tolerance: the check can tell


def test_shards_split_the_examples(tmp_path):
    """Every example belongs to exactly one rank; tile groups stay whole;
    sizes count all ranks' examples."""
    records = synthetic_records(n_programs=3, kernels=10, seed=1)
    path = tmp_path / "a.zst"
    with RecordWriter(str(path)) as w:
        for r in records:
            w.write(r)
    whole = Corpus([str(path)]).scan(kernel_features=5)
    parts = [Corpus([str(path)], shard=(r, 3)).scan(kernel_features=5) for r in range(3)]
    seen = sorted(ex.group for c in parts for ex in c.iter_examples())
    assert seen == sorted(ex.group for ex in whole.iter_examples())
    assert all(c.sizes == whole.sizes and c.examples == whole.examples for c in parts)
    assert [c.local for c in parts] == [10, 10, 10]
    # streamed (over the memory budget): the same share, read again each time
    streamed = [Corpus([str(path)], memory_mb=1e-3, shard=(r, 3)).scan(kernel_features=5) for r in range(3)]
    assert all(c.streaming for c in streamed)
    assert [[ex.group for ex in c.iter_examples()] for c in streamed] == \
        [[ex.group for ex in c.iter_examples()] for c in parts]
    rng = np.random.default_rng(0)
    drawn = [ex.program for ex in streamed[1].epoch(rng)]
    assert 5 < len(drawn) < 20 and set(drawn) <= set(whole.sizes)
    assert owner(5, 3, ("p", "k")) == owner(6, 3, ("p", "k"))
    tile = tmp_path / "t.zst"
    with RecordWriter(str(tile)) as w:
        for r in synthetic_records(n_programs=1, kernels=12, seed=2, configs=4):
            w.write(r)
    ranks = [{ex.group for ex in Corpus([str(tile)], task="tile", shard=(r, 2)).scan(kernel_features=5)
              .iter_examples()} for r in range(2)]
    assert not ranks[0] & ranks[1] and len(ranks[0] | ranks[1]) == 12 and all(ranks)


def test_batch_smaller_than_processes():
    with pytest.raises(TpuperfError, match="--batch-size 1 is smaller than the 2 processes"):
        Dist(0, 2).local_batch(1)
    assert [Dist(r, 3).local_batch(8) for r in range(3)] == [3, 3, 2]


@pytest.fixture
def corpus(tmp_path):
    d = tmp_path / "shards"
    d.mkdir()
    by = {}
    for r in synthetic_records(n_programs=4, kernels=24, seed=3):
        by.setdefault(r["program"], []).append(r)
    for prog, rs in by.items():
        with RecordWriter(str(d / f"{prog}.zst")) as w:
            for r in rs:
                w.write(r)
    split = tmp_path / "split.json"
    split.write_text(json.dumps({"train": ["synth0", "synth1", "synth2"], "valid": ["synth3"], "test": []}))
    return d, split


@pytest.mark.slow
def test_torchrun_trains_like_one_process(tmp_path, corpus):
    """`torchrun --nproc_per_node 2 -m tpuperf_cli train`: one model file,
    progress once, a resume file with each rank's sampling state that a
    resumed two-process run continues from, and a validation loss within
    the spread of one process's seeds (the ranks draw their own examples,
    so not the same weights: which examples is as random as a seed, and
    one process's seeds land 0.02 to 0.07 apart after 20 epochs, 0.07 to
    0.5 after 6), all far below an untrained model's. That the steps'
    arithmetic is one process's is test_two_processes_step_as_one's."""
    d, split = corpus
    args = ["train", "--data", str(d / "*.zst"), "--split", str(split), "--epochs", "20",
            "--batch-size", "8", "--lr", "0.01", "--hidden", "16", "--opcode-dim", "8",
            "--layers", "2", "--threads", "1"]
    two = tmp_path / "two.pt"
    one = tmp_path / "one.pt"
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                "-m", "tpuperf_cli"]
    r2 = subprocess.run([*torchrun, *args, "-o", str(two), "--keep-state"], capture_output=True, text=True,
                        env=env(), timeout=300)
    assert r2.returncode == 0, r2.stderr
    state = torch.load(str(two) + ".resume", weights_only=True)
    assert len(state["rank_rngs"]) == 2 and state["rank_rngs"][0] != state["rank_rngs"][1]
    ones = [tmp_path / f"one{seed}.pt" for seed in range(3)]
    for seed, one in enumerate(ones):
        r1 = subprocess.run([sys.executable, "-m", "tpuperf_cli", *args, "-o", str(one), "--seed", str(seed)],
                            capture_output=True, text=True, env=env(), timeout=300)
        assert r1.returncode == 0, r1.stderr
    assert r2.stderr.count("train: wrote") == 1 and r2.stderr.count("epoch  20/20") == 1, r2.stderr
    assert "2 processes (gloo), 4 graphs per process per step" in r2.stderr
    # resumed, still on two processes
    r3 = subprocess.run([*torchrun, *args, "-o", str(two), "--resume", "--epochs", "21"], capture_output=True,
                        text=True, env=env(), timeout=300)
    assert r3.returncode == 0, r3.stderr
    assert r3.stderr.count("resuming") == 1 and r3.stderr.count("epoch  21/21") == 1, r3.stderr
    assert not os.path.exists(str(two) + ".resume")
    m1s = [torch.load(one, weights_only=True)["trained"] for one in ones]
    m2 = torch.load(two, weights_only=True)["trained"]
    assert m2["processes"] == 2 and all("processes" not in m1 for m1 in m1s)
    assert all(m1["examples"] == m2["examples"] == 72 for m1 in m1s)
    l1s = [m1["valid_figures"]["valid_loss"] for m1 in m1s]
    l2 = m2["valid_figures"]["valid_loss"]
    untrained = 1.0         # predicting the training mean: the standardised target's variance
    assert max(l1s) < untrained / 3 and l2 < untrained / 3, (l1s, l2)
    assert min(l1s) / 2 < l2 < 2 * max(l1s), (l1s, l2)
