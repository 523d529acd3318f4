"""tpuperf calibrate: kernels chosen across strata, timed through measure's
cache, a model written for this machine that predict and eval then use by
default; a second run reuses the cache."""

import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
from unittest import mock

import click
import pytest

from tpuperf_cli.calibrate import Candidate, hold_out, order
from tpuperf_cli.commands.calibrate import parse_budget
from tpuperf_cli.errors import TpuperfError
from tpuperf_cli.records import target_identity
from tpuperf_cli.stream import read_records

from conftest import write_stream

ROOT = pathlib.Path(__file__).resolve().parent.parent
GRAPHS = ROOT / "examples" / "corpus" / "graphs"
SMALL = ["autoenc_s_train", "seq2seq_s_fwd", "mlp_s_train", "autoenc_m_train", "mlp_m_train"]


def run(args, env, stdin=None):
    return subprocess.run([sys.executable, "-m", "tpuperf_cli", *args], env=env, input=stdin,
                          capture_output=True, timeout=300)


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory):
    """One quick calibrate run (20 s, 16 kernels, one sample each) on five
    small programs of the corpus, in a temporary data and cache directory."""
    tmp = tmp_path_factory.mktemp("calibrate")
    corpus = tmp / "corpus"
    corpus.mkdir()
    for name in SMALL:
        shutil.copy(GRAPHS / f"{name}.zst", corpus)
    env = dict(os.environ, PYTHONPATH=str(ROOT), XDG_DATA_HOME=str(tmp / "data"))
    args = ["calibrate", "--budget", "20s", "--max-kernels", "16", "--samples", "1",
            "--corpus", str(corpus), "--cache-dir", str(tmp / "cache")]
    first = run(args, env)
    assert first.returncode == 0, first.stderr.decode()
    second = run(args, env)
    assert second.returncode == 0, second.stderr.decode()
    return {"tmp": tmp, "env": env, "corpus": corpus, "first": first, "second": second}


def test_writes_a_model_for_this_machine(calibrated):
    from tpuperf_cli.model.calibrated import machine_target
    from tpuperf_cli.model.predict import load_model

    models = calibrated["tmp"] / "data" / "tpuperf" / "models"
    files = sorted(models.glob("*.pt"))
    assert len(files) == 1, os.listdir(models)
    model = load_model(str(files[0]))
    assert target_identity(model.target) == target_identity(machine_target())
    assert model.name.startswith("calibrated-")
    info = model.meta["trained"]["calibrated"]
    assert info["method"] in ("base", "scale", "head", "finetune")
    assert info["kernels"] >= 2


def test_the_calibrated_model_knows_every_kernel_it_timed_at_its_timing_here(calibrated):
    """Its known kernels (model.known) are what calibrate timed, fitted and
    held out alike, at the cache's runtimes for this machine: none of the
    base's (its own machine's labels of the whole corpus)."""
    import sqlite3

    from tpuperf_cli.model.predict import load_model

    model = load_model(str(next((calibrated["tmp"] / "data" / "tpuperf" / "models").glob("*.pt"))))
    info = model.meta["trained"]["calibrated"]
    assert model.known and len(model.known) == info["known_kernels"]
    assert info["known_kernels"] == info["kernels"] + info["held_out_kernels"]
    db = sqlite3.connect(calibrated["tmp"] / "cache" / "measurements.sqlite3")
    timed = {}
    for fp, ns in db.execute("SELECT fingerprint, runtime_ns FROM measurement"):
        timed.setdefault(fp, []).append(ns)
    for fp, ns in model.known.items():
        assert ns in timed[fp]
    held = {r["fingerprint"] for name in info["held_out_programs"]
            for r in read_records(str(calibrated["corpus"] / f"{name}.zst"))}
    # the held-out programs' kernels that were timed are known too
    assert bool(set(model.known) & held) == (info["held_out_kernels"] > 0)


def test_prints_held_out_figures_before_and_after(calibrated):
    out = calibrated["first"].stdout.decode()
    assert "held out:" in out
    if "no kernel of the held-out programs" not in out:
        # the base: the bundled seeds, or the model bundled for this machine's CPU
        assert re.search(r"before \((default-seeds|cpu-amd-epyc-26-2)-", out), out
        assert "after  (calibrated-" in out
        assert "MAPE" in out and "tau" in out
    err = calibrated["first"].stderr.decode()
    assert "left" in err                      # the time left, on stderr
    assert "wrote " in out


def test_second_run_reuses_the_cache_and_adapts_at_once(calibrated):
    err = calibrated["second"].stderr.decode()
    assert "already measured on this machine in the cache" in err
    assert "adapting at once" in err


def test_predict_uses_the_calibrated_model_by_default(calibrated, tmp_path):
    env = calibrated["env"]
    # unmeasured records: the model of this machine
    records = []
    for r in read_records(str(GRAPHS / "mlp_s_train.zst")):
        for k in ("target", "runtime_ns", "runs", "noise"):
            r.pop(k, None)
        records.append(r)
    src = write_stream(tmp_path / "g.msgpack", records[:5])
    got = run(["predict", str(src), "-o", str(tmp_path / "p.msgpack")], env)
    assert got.returncode == 0, got.stderr.decode()
    assert "calibrated for this machine" in got.stderr.decode()
    assert all(r["model"].startswith("calibrated-")
               for r in read_records(str(tmp_path / "p.msgpack")))
    # --model overrides, and says nothing about a default
    got = run(["predict", str(src), "-m", "bundled", "-o", str(tmp_path / "b.msgpack")], env)
    assert got.returncode == 0 and b"calibrated" not in got.stderr
    assert all(r["model"].startswith("default-")
               for r in read_records(str(tmp_path / "b.msgpack")))
    # records measured on another machine: the bundled model
    elsewhere = []
    for r in read_records(str(GRAPHS / "mlp_s_train.zst")):
        r["target"] = dict(r["target"], chip="Another CPU", cpu={"vendor": "GenuineIntel"})
        elsewhere.append(r)
    src = write_stream(tmp_path / "e.msgpack", elsewhere[:5])
    got = run(["predict", str(src), "-o", str(tmp_path / "c.msgpack")], env)
    assert got.returncode == 0
    assert "no calibrated model for the records' target" in got.stderr.decode()


def test_eval_default_follows_the_records_target(calibrated, tmp_path):
    from tpuperf_cli.model.predict import load_model

    env = calibrated["env"]
    model = next((calibrated["tmp"] / "data" / "tpuperf" / "models").glob("*.pt"))
    target = load_model(str(model)).target
    records = list(read_records(str(GRAPHS / "mlp_s_train.zst")))
    for r in records:
        r["target"] = target          # as if measured on this machine
    src = write_stream(tmp_path / "m.msgpack", records)
    got = run(["eval", "-m", "default", str(src)], env)
    assert got.returncode == 0, got.stderr.decode()
    assert "calibrated for the records' target" in got.stderr.decode()


def test_timing_order_covers_every_stratum_first():
    records = []
    for i in range(60):
        kind = ["dot", "fusion", "convolution"][i % 3]
        records.append({"type": "graph", "hlo": "x", "fingerprint": f"f{i}", "program": f"p{i % 5}",
                        "opcode": kind, "runtime_ns": 10.0 ** (3 + i % 4)})
    cands = [Candidate(r) for r in records]
    for i, c in enumerate(cands):
        c.doubt = float(i)
    strata = {c.stratum for c in cands}
    ordered = order(cands, seed=0)
    assert len(ordered) == len(cands)
    assert {c.stratum for c in ordered[:len(strata)]} == strata
    # the first kernel of each stratum is its most doubtful one
    for s in strata:
        first = next(c for c in ordered if c.stratum == s)
        assert first.doubt == max(c.doubt for c in cands if c.stratum == s)
    held = hold_out(cands, 0.2, seed=0)
    assert len(held) == 1 and all(c.held_out == (c.group in held) for c in cands)


def test_budget_durations():
    assert parse_budget(None, None, "10m") == 600
    assert parse_budget(None, None, "1m30s") == 90
    assert parse_budget(None, None, "45") == 45
    with pytest.raises(click.BadParameter):
        parse_budget(None, None, "ten minutes")


def test_ctrl_c_keeps_the_kernels_timed_and_the_next_run_adapts_with_them(tmp_path):
    import signal
    import sqlite3
    import time

    # the whole corpus, so that timing outlasts the poll on a fast machine
    # (five small programs' 182 kernels took 4 s to time, and 2 more to
    # adapt, on an AMD EPYC of 2026: the run ended before the signal)
    corpus = GRAPHS
    env = dict(os.environ, PYTHONPATH=str(ROOT), XDG_DATA_HOME=str(tmp_path / "data"))
    cache = tmp_path / "cache"
    args = [sys.executable, "-m", "tpuperf_cli", "calibrate", "--budget", "60s", "--samples", "1",
            "--corpus", str(corpus), "--cache-dir", str(cache), "--max-kernels", "3000"]
    # SIGINT as a terminal delivers it: a shell without job control starts
    # background commands (and so a CI job's) with it ignored
    proc = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    rows = 0
    t_end = time.monotonic() + 120
    # at least 2 kernels (the least --max-kernels takes): a fast machine may
    # be caught after its first one
    while rows < 2 and time.monotonic() < t_end and proc.poll() is None:
        time.sleep(0.1)
        try:
            with sqlite3.connect(cache / "measurements.sqlite3") as db:
                rows = db.execute("SELECT COUNT(*) FROM measurement").fetchone()[0]
        except sqlite3.Error:
            pass
    assert rows >= 2 and proc.poll() is None, "calibrate timed under 2 kernels, or finished first"
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err.decode()
    assert b"kept in the cache" in err
    assert not list((tmp_path / "data").rglob("*.pt"))      # no model from an interrupted run
    again = subprocess.run(args[:4] + ["--budget", "30s", "--samples", "1", "--corpus", str(corpus),
                                       "--cache-dir", str(cache), "--max-kernels", str(rows)],
                           env=env, capture_output=True, timeout=120)
    assert again.returncode == 0, again.stderr.decode()
    assert b"adapting at once" in again.stderr, again.stderr.decode()


def test_compile_jobs_reach_measure_and_a_bad_count_is_one_line(tmp_path):
    """calibrate compiles on measure's pool: --compile-jobs goes to the same
    check as measure's, which names the option and the CPUs there are."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    shutil.copy(GRAPHS / f"{SMALL[0]}.zst", corpus)
    env = dict(os.environ, PYTHONPATH=str(ROOT), XDG_DATA_HOME=str(tmp_path / "data"))
    cpus = len(os.sched_getaffinity(0))
    got = run(["calibrate", "--budget", "20s", "--max-kernels", "4", "--samples", "1",
               "--compile-jobs", str(cpus + 1), "--corpus", str(corpus),
               "--cache-dir", str(tmp_path / "cache")], env)
    err = got.stderr.decode()
    assert got.returncode == 1, err
    assert f"--compile-jobs {cpus + 1}: this process may use {cpus} CPU(s)" in err
    assert "Traceback" not in err


def test_predict_bad_input_is_one_line_before_any_model_note(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT), XDG_DATA_HOME=str(tmp_path))
    got = run(["predict", str(tmp_path / "missing.zst"), "-o", str(tmp_path / "p.msgpack")], env)
    assert got.returncode == 1
    assert len(got.stderr.decode().strip().splitlines()) == 1, got.stderr.decode()


def test_generated_kernels_are_candidates_the_model_reads():
    from tpuperf_cli.calibrate import generated_candidates, set_sizes
    from tpuperf_cli.model.predict import load_model

    made = generated_candidates(12, seed=0, log=lambda m: None)
    assert len(made) >= 10
    assert all(c.record["program"].startswith("ops:") and c.record["hlo"] for c in made)
    from tpuperf_cli.model import default_model_path

    set_sizes(made, load_model(default_model_path()))
    # sized by the model's prediction (without one every size would be -1)
    assert len({c.stratum[1] for c in made}) >= 3


def generated_and_program_candidates():
    records = []
    for i in range(200):
        program = f"p{i % 10}" if i < 120 else f"ops:k{i % 7}"
        records.append({"type": "graph", "hlo": "x", "fingerprint": f"f{i}", "program": program,
                        "opcode": ["dot", "add"][i % 2]})
    return [Candidate(r) for r in records]


def test_generated_kernels_are_never_held_out_and_come_last():
    from tpuperf_cli.calibrate import timing_order
    from tpuperf_cli.model.data import is_generated

    cands = generated_and_program_candidates()
    held = hold_out(cands, 0.5, seed=0)
    assert len(held) == 5 and not any(is_generated(p) for p in held)
    assert not any(c.held_out for c in cands if is_generated(c.group))
    # every kernel is in the order (beyond the 64 per stratum doubt is scored
    # for), the programs' kernels before any generated one
    ordered = timing_order(cands, None, seed=0)
    assert sorted(id(c) for c in ordered) == sorted(id(c) for c in cands)
    kinds = [is_generated(c.group) for c in ordered]
    assert kinds == sorted(kinds) and kinds.count(False) == 120
    # a quick run: at most `pool` per stratum and part
    assert len(timing_order(cands, None, seed=0, pool=3)) == 3 * 2 * 2


def test_generated_kernels_never_validate_the_method():
    from types import SimpleNamespace

    from tpuperf_cli.calibrate import split_groups

    examples = [SimpleNamespace(program=f"p{i}") for i in range(10)]
    examples += [SimpleNamespace(program=f"ops:k{i}") for i in range(50)]
    fit, valid = split_groups(examples, 0.2, seed=0)
    assert len({e.program for e in valid}) == 2
    assert all(not e.program.startswith("ops:") for e in valid)
    assert all(e in fit for e in examples if e.program.startswith("ops:"))


def test_fitting_stops_after_patience_epochs_without_a_better_validation_error():
    """With lr 0 no epoch is better than the start: the fitter stops after
    `patience` epochs, keeps the start (epoch 0), and does not run to
    max_epochs although its time is far from spent."""
    from tpuperf_cli.calibrate import Fitter, all_params
    from tpuperf_cli.model import default_model_path
    from tpuperf_cli.model.examples import example
    from tpuperf_cli.model.predict import build, read_model_file

    records = [r for r in read_records(str(GRAPHS / "mlp_s_train.zst")) if r.get("runtime_ns")]
    examples = [example(r, i, "measured") for i, r in enumerate(records[:10], 1)]
    for i, ex in enumerate(examples):
        ex.program = f"p{i % 2}"
    train, valid = examples[:6], examples[6:]
    model = build(read_model_file(default_model_path()), default_model_path())
    fitted_batches = []
    batch = model.batch

    def counting(chunk, *a, **k):
        if all(any(ex is t for t in train) for ex in chunk):
            fitted_batches.append(len(chunk))
        return batch(chunk, *a, **k)

    model.batch = counting
    fitter = Fitter(model, log=lambda m: None, threads=1)
    _, best_epoch = fitter.train(model, train, valid, all_params, lr=0.0, seconds=600,
                                 max_epochs=400, patience=3)
    assert best_epoch == 0
    assert len(fitted_batches) == 3     # one batch of 6 kernels an epoch, 3 epochs


def test_fitting_trains_with_the_loss_the_base_was_trained_with(monkeypatch):
    """A base trained with --loss huber is adapted with the Huber loss of the
    log error (in natural-log units: the standardised error times the
    scale's std), squared within the base's --huber-within; one trained with
    MSE with MSE."""
    import copy

    import numpy as np
    import torch

    from tpuperf_cli.calibrate import Fitter, all_params
    from tpuperf_cli.model import default_model_path
    from tpuperf_cli.model.examples import example
    from tpuperf_cli.model.predict import build, read_model_file
    from tpuperf_cli.model.train import HUBER_DELTA

    records = [r for r in read_records(str(GRAPHS / "mlp_s_train.zst")) if r.get("runtime_ns")]
    examples = [example(r, i, "measured") for i, r in enumerate(records[:6], 1)]
    calls = []
    huber = torch.nn.functional.huber_loss

    def counting(pred, y, delta):
        calls.append(delta)
        return huber(pred, y, delta=delta)

    monkeypatch.setattr(torch.nn.functional, "huber_loss", counting)
    for loss, within, expected in (("mse", None, []), ("huber", None, [HUBER_DELTA] * 2),
                                   ("huber", 1.1, [pytest.approx(np.log(1.1))] * 2)):
        calls.clear()
        model = build(read_model_file(default_model_path()), default_model_path())
        trained = dict(model.meta.get("trained") or {})
        trained["options"] = dict(trained.get("options") or {}, huber_within=within)
        model.meta = dict(model.meta, loss=loss, trained=trained)
        Fitter(model, log=lambda m: None, threads=1).train(
            copy.copy(model), examples, [], all_params, lr=1e-4, seconds=600, max_epochs=2)
        assert calls == expected, loss      # one batch of 6 kernels an epoch


def stretched_examples():
    """40 kernels of mlp_s_train in 8 programs, as another machine times
    them: their runtimes stretched past what scale fits."""
    from tpuperf_cli.model.examples import example

    records = [r for r in read_records(str(GRAPHS / "mlp_s_train.zst")) if r.get("runtime_ns")]
    examples = [example(r, i, "measured") for i, r in enumerate(records[:40], 1)]
    for i, ex in enumerate(examples):
        ex.program = f"p{i % 8}"
        ex.runtime = ex.runtime ** 1.6 / 50.0
    return examples


def base_of_seeds(count):
    """(the bundled model as an ensemble of `count` seeds, their networks):
    copies of its network with distinct output biases."""
    import copy

    import torch

    from tpuperf_cli.model import default_model_path
    from tpuperf_cli.model.net import EnsembleNet
    from tpuperf_cli.model.predict import build, read_model_file

    base = build(read_model_file(default_model_path()), default_model_path())
    nets = [copy.deepcopy(base.net) for _ in range(count)]
    for i, net in enumerate(nets):
        with torch.no_grad():
            net.head[-1].bias += 0.1 * i
    base.net = EnsembleNet(nets)
    return base, nets


def test_the_winner_is_fitted_on_other_splits_and_joined_into_one_saved_ensemble(tmp_path):
    """adapt fits the winning method again on other splits of the programs
    and joins the fits: the model predicts their geometric mean, and it
    saves and loads as one model file that predicts the same."""
    import copy

    import numpy as np
    import torch

    from tpuperf_cli.calibrate import adapt
    from tpuperf_cli.model import default_model_path
    from tpuperf_cli.model.predict import build, load_model, model_dict, read_model_file, save_atomic

    examples = stretched_examples()
    base = build(read_model_file(default_model_path()), default_model_path())
    result = adapt(base, examples, log=lambda m: None, seconds=30, methods=("finetune",),
                   threads=1, members=3)
    model = result["model"]
    assert result["method"] == "finetune" and result["members"] == 3
    assert len(model.net.members) == 3
    first, second = (m.state_dict() for m in model.net.members[:2])
    assert any(not torch.allclose(first[k], second[k]) for k in first)   # fits, not the base thrice
    each = []
    for member in model.net.members:
        one = copy.copy(model)
        one.net, one._memo = member, {}
        each.append(np.log(one.predict_examples(examples)))
    joined = model.predict_examples(examples)
    assert np.allclose(np.log(joined), np.mean(each, axis=0), atol=1e-4)
    path = tmp_path / "cal.pt"
    save_atomic(model_dict(model.net, model.scaler, "cal", "fusion", "mse", None, {}), path)
    assert np.allclose(load_model(str(path)).predict_examples(examples), joined, rtol=1e-4)


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_base_that_is_an_ensemble_fits_each_of_its_networks(jobs):
    """At most 3 networks in all: a base ensemble of 4 seeds gives 3 fits,
    each from its own network (not 3 copies of one), whether the fits run
    one after another or side by side in child processes."""


    from tpuperf_cli.calibrate import adapt

    examples = stretched_examples()
    base, nets = base_of_seeds(4)
    result = adapt(base, examples, log=lambda m: None, seconds=30, methods=("finetune",),
                   threads=1, jobs=jobs)
    assert result["method"] == "finetune" and result["members"] == 3
    fitted = result["model"].net.members
    assert len(fitted) == 3
    # each fit moved little from the network it started from: nearer its
    # own seed's bias than any other's
    for i, net in enumerate(fitted):
        gaps = [float((net.head[-1].bias - n.head[-1].bias).abs().sum()) for n in nets]
        assert min(range(4), key=gaps.__getitem__) == i


def test_side_by_side_methods_are_chosen_by_their_mean_over_the_members_splits():
    """With fits side by side, each trained method is fitted once on each
    member's split and scored by its mean validation error over them, the
    base and scale scored on the same splits; the winner's fits are the
    members, with no further fits."""
    import re

    import numpy as np

    from tpuperf_cli.calibrate import adapt, program_mape, split_groups

    examples = stretched_examples()
    base, nets = base_of_seeds(3)
    lines = []
    result = adapt(base, examples, log=lines.append, seconds=60, threads=1, jobs=2, seed=5)
    scores = result["scores"]
    for m in ("head", "finetune"):
        line = next(x for x in lines if x.startswith(f"calibrate: {m}: validation program MAPE")
                    and "on 3 splits" in x)
        errs = [float(e) for e in re.findall(r"([\d.]+)%", line.split("the mean of", 1)[1].split("splits")[0])]
        assert len(errs) == 3 and scores[m] == pytest.approx(np.mean(errs), abs=0.06), (line, scores)
    valids = [split_groups(examples, 0.2, 5 + i)[1] for i in range(3)]
    assert scores["base"] == pytest.approx(np.mean([program_mape(base, v) for v in valids]))
    assert result["method"] == min(scores, key=scores.get)
    if result["method"] in ("head", "finetune"):
        assert result["members"] == 3 and len(result["model"].net.members) == 3
    assert not any("more on other splits" in x for x in lines), lines


def test_with_time_left_each_member_is_the_mean_of_two_fits_from_its_own_network():
    """Side by side, once the winner's fits on the members' splits stop on
    their patience with time to spare, each member is fitted again from the
    same network on another split and the two fits' weights averaged: still
    3 networks, each near the seed it started from."""


    from tpuperf_cli.calibrate import adapt

    examples = stretched_examples()
    base, nets = base_of_seeds(3)
    lines = []
    result = adapt(base, examples, log=lines.append, seconds=120, methods=("finetune",),
                   threads=1, jobs=2)
    assert result["method"] == "finetune", result["scores"]
    assert result["members"] == 3 and result["averaged"] == 2, lines
    assert sum("second fit's validation program MAPE" in x for x in lines) == 3, lines
    fitted = result["model"].net.members
    assert len(fitted) == 3
    for i, net in enumerate(fitted):
        gaps = [float((net.head[-1].bias - n.head[-1].bias).abs().sum()) for n in nets]
        assert min(range(3), key=gaps.__getitem__) == i


def test_side_by_side_runs_tasks_in_child_processes_and_keeps_their_order():
    import os

    from tpuperf_cli.calibrate import side_by_side

    pids = side_by_side([lambda i=i: (i, os.getpid()) for i in range(3)], jobs=2)
    assert [i for i, _ in pids] == [0, 1, 2]
    assert os.getpid() not in {pid for _, pid in pids}
    # one job: in this process, one after another
    assert side_by_side([os.getpid, os.getpid], jobs=1) == [os.getpid()] * 2


def test_a_fit_that_fails_in_its_process_is_one_error_naming_it():
    from tpuperf_cli.calibrate import side_by_side

    def bad():
        raise ValueError("weights of the wrong shape")

    with pytest.raises(TpuperfError, match="a fit failed: ValueError: weights of the wrong shape"):
        side_by_side([lambda: 1, bad], jobs=2)


def test_fit_jobs_default_to_two_and_follow_threads_and_the_environment(monkeypatch):
    from tpuperf_cli.calibrate import fit_jobs

    monkeypatch.delenv("TPUPERF_THREADS", raising=False)
    assert fit_jobs() == min(2, len(os.sched_getaffinity(0)))
    assert fit_jobs(3) == 3
    monkeypatch.setenv("TPUPERF_THREADS", "1")
    assert fit_jobs() == 1


def test_the_default_cpu_base_is_the_bundled_model_and_two_more_seeds():
    """calibrate's base on a CPU: three networks of the bundled model's
    recipe, the first of them the bundled model's own."""
    import copy

    import numpy as np

    from tpuperf_cli.model import DEFAULT_SEEDS_MODEL, default_model_path
    from tpuperf_cli.model.examples import example
    from tpuperf_cli.model.predict import load_model

    seeds = load_model(default_model_path(DEFAULT_SEEDS_MODEL), engine="dgl")
    bundled = load_model(default_model_path(), engine="dgl")
    seeds.known = bundled.known = None      # their networks, not the kernels both know
    assert len(seeds.net.members) == 3
    records = [r for r in read_records(str(GRAPHS / "mlp_s_train.zst")) if r.get("runtime_ns")]
    examples = [example(r, i, "measured") for i, r in enumerate(records[:30], 1)]
    first = copy.copy(seeds)
    first.net, first._memo = seeds.net.members[0], {}
    assert np.allclose(first.predict_examples(examples), bundled.predict_examples(examples),
                       rtol=1e-4)
    others = copy.copy(seeds)
    others.net, others._memo = seeds.net.members[1], {}
    assert not np.allclose(others.predict_examples(examples), bundled.predict_examples(examples),
                           rtol=1e-2)


def test_join_average_makes_one_network_of_the_fits_mean_weights():
    import numpy as np

    from tpuperf_cli.calibrate import adapt
    from tpuperf_cli.model import default_model_path
    from tpuperf_cli.model.examples import example
    from tpuperf_cli.model.net import EnsembleNet
    from tpuperf_cli.model.predict import build, read_model_file

    records = [r for r in read_records(str(GRAPHS / "mlp_s_train.zst")) if r.get("runtime_ns")]
    examples = [example(r, i, "measured") for i, r in enumerate(records[:40], 1)]
    for i, ex in enumerate(examples):
        ex.program = f"p{i % 8}"
        ex.runtime = ex.runtime ** 1.6 / 50.0   # stretched past what scale's slope can fit
    base = build(read_model_file(default_model_path()), default_model_path())
    result = adapt(base, examples, log=lambda m: None, seconds=30, methods=("finetune",),
                   threads=1, join="average")
    net = result["model"].net
    assert result["members"] == 3 and not isinstance(net, EnsembleNet)
    states = [f.net.state_dict() for f in result["fits"]]
    assert any(not np.allclose(states[0][k].numpy(), states[1][k].numpy()) for k in states[0])
    for name, value in net.state_dict().items():
        if value.is_floating_point():
            want = np.mean([s[name].numpy() for s in states], axis=0)
            assert np.allclose(value.numpy(), want, atol=1e-6), name
    assert np.all(np.isfinite(result["model"].predict_examples(examples)))


def test_a_tree_base_is_calibrated_into_trees(tmp_path):
    """calibrate of a gradient-boosted trees base (train --learner gbdt)
    times kernels here, adapts with scale and boost, and writes trees."""
    import torch

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for name in SMALL:
        shutil.copy(GRAPHS / f"{name}.zst", corpus)
    env = dict(os.environ, PYTHONPATH=str(ROOT), XDG_DATA_HOME=str(tmp_path / "data"))
    base = tmp_path / "trees.pt"
    res = run(["train", "--learner", "gbdt", "--data", str(corpus / "*.zst"), "--trees", "50", "-q",
               "-o", str(base)], env)
    assert res.returncode == 0, res.stderr.decode()
    res = run(["calibrate", "--model", str(base), "--budget", "20s", "--max-kernels", "16", "--samples",
               "1", "--corpus", str(corpus), "--cache-dir", str(tmp_path / "cache"), "-o",
               str(tmp_path / "cal.pt")], env)
    assert res.returncode == 0, res.stderr.decode()
    d = torch.load(tmp_path / "cal.pt", weights_only=True)
    assert d["config"]["learner"] == "gbdt" and d["config"]["trees"] >= 50
    assert d["trained"]["calibrated"]["method"] in ("base", "scale", "boost")
    assert d["target"]["platform"] == "cpu" and d["trained"]["calibrated"]["base"].startswith("trees-")


def test_a_base_of_networks_joined_with_trees_is_calibrated_into_both(tmp_path):
    """calibrate of `tpuperf ensemble NET TREES`: the networks adapt by the
    network methods, the trees by boost on the same kernels, and the model
    written joins both again; calibrate prints the networks alone too."""
    import numpy as np
    import torch

    from tpuperf_cli.model.examples import example
    from tpuperf_cli.model.predict import load_model

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for name in SMALL:
        shutil.copy(GRAPHS / f"{name}.zst", corpus)
    env = dict(os.environ, PYTHONPATH=str(ROOT), XDG_DATA_HOME=str(tmp_path / "data"))
    data = ["--data", str(corpus / "*.zst"), "-q", "--kernel-features", "16"]
    for args in (["--epochs", "2", "--hidden", "16", "-o", str(tmp_path / "net.pt")],
                 ["--learner", "gbdt", "--trees", "50", "-o", str(tmp_path / "trees.pt")]):
        res = run(["train", *data, *args], env)
        assert res.returncode == 0, res.stderr.decode()
    res = run(["ensemble", str(tmp_path / "net.pt"), str(tmp_path / "trees.pt"), "-o",
               str(tmp_path / "joined.pt")], env)
    assert res.returncode == 0, res.stderr.decode()
    res = run(["calibrate", "--model", str(tmp_path / "joined.pt"), "--budget", "40s", "--max-kernels",
               "24", "--samples", "1", "--corpus", str(corpus), "--cache-dir", str(tmp_path / "cache"),
               "-o", str(tmp_path / "cal.pt")], env)
    assert res.returncode == 0, res.stderr.decode()
    d = torch.load(tmp_path / "cal.pt", weights_only=True)
    assert d["version"] == 4 and d["trees"]["config"]["learner"] == "gbdt"
    assert d["trees"]["config"]["trees"] >= 50           # the base's trees, and any boost added
    assert d["trained"]["calibrated"]["method"].endswith(" + boost")
    out = res.stdout.decode()
    if "held out:" in out and "before (" in out:
        assert "after, its networks alone:" in out, out
    model = load_model(str(tmp_path / "cal.pt"))
    assert model.trees is not None and model.target["platform"] == "cpu"
    records = [r for r in read_records(str(corpus / "mlp_s_train.zst")) if r.get("type") == "graph"]
    pred = model.predict_examples([example(r) for r in records[:20]])
    assert np.all(np.isfinite(pred)) and np.all(pred > 0)


def test_on_a_gpu_calibrate_starts_from_the_gpu_model_and_corpus():
    """--backend gpu without --model or --corpus: the bundled H200 model,
    and the GPU corpus's kernel records, featurized as they are read."""
    import numpy as np

    from tpuperf_cli.calibrate import corpus_shards, default_base, load_candidates
    from tpuperf_cli.model.examples import example
    from tpuperf_cli.model.predict import load_model

    assert pathlib.Path(default_base("gpu")[0]).name == "gpu-nvidia-h200.pt"
    # on a CPU: the model bundled for this machine's CPU, else the bundled seeds
    amd = json.loads((ROOT / "tpuperf_cli/data/cpu-amd-epyc-26-2.target.json").read_text())["target"]
    with mock.patch("tpuperf_cli.model.calibrated.machine_target", lambda: amd):
        assert default_base("cpu") == (str(ROOT / "tpuperf_cli/data/cpu-amd-epyc-26-2.pt"),
                                       "the model bundled for this machine")
    elsewhere = dict(amd, cpu=dict(amd["cpu"], family="25", model="17"))
    with mock.patch("tpuperf_cli.model.calibrated.machine_target", lambda: elsewhere):
        for backend in ("cpu", "tpu", None):
            assert pathlib.Path(default_base(backend)[0]).name == "default-seeds.pt"
    shards = corpus_shards((), "gpu")
    assert all(pathlib.Path(s).parent == ROOT / "examples/corpus-gpu/kernels" for s in shards)
    assert pathlib.Path(corpus_shards((), "cpu")[0]).parent == GRAPHS
    candidates = load_candidates([s for s in shards if s.endswith("mlp_s_train.zst")])
    assert candidates and all(c.record["type"] == "graph" and "node_feat" in c.record for c in candidates)
    assert any(c.corpus_ns for c in candidates)       # the H200's timings size the strata
    pred = load_model(default_base("gpu")[0]).predict_examples([example(c.record) for c in candidates])
    assert np.all(np.isfinite(pred)) and np.all(pred > 0)


def test_too_few_kernels_to_hold_any_out_are_all_fitted():
    from tpuperf_cli.calibrate import fit_and_held_out

    cands = [Candidate({"type": "graph", "hlo": "x", "fingerprint": f"f{i}", "program": p,
                        "opcode": "add"}) for i, p in enumerate(["a", "b", "b"])]
    for c in cands:
        c.held_out = c.record["program"] == "b"
    pairs = [(c, c.record) for c in cands]
    # two of three held out would leave one kernel to fit: all are fitted
    fit, held = fit_and_held_out(pairs)
    assert fit == pairs and held == []
    # with two to fit, the held-out program stays held out
    cands[1].held_out = False
    fit, held = fit_and_held_out(pairs)
    assert [c.record["fingerprint"] for c, _ in fit] == ["f0", "f1"] and len(held) == 1
    # one kernel alone is too few either way (calibrate's error then)
    assert fit_and_held_out(pairs[2:]) == ([], pairs[2:])


def ratio_examples():
    """Real graphs of four programs, their 'corpus runtime' the one
    measured, this machine's a ratio by kind: fusions 0.5x, the rest 2x."""
    from tpuperf_cli.model.examples import example

    out, there = [], []
    for name in ["mlp_m_train", "autoenc_m_train", "bnmlp_m_train", "cnn_s_train", "mlp_s_train"]:
        for i, r in enumerate(read_records(str(GRAPHS / f"{name}.zst")), 1):
            if r.get("runtime_ns"):
                ex = example(r, i, name)
                ex.program = name
                out.append(ex)
                there.append(r["runtime_ns"])
                ex.runtime = r["runtime_ns"] * (0.5 if r.get("opcode") == "fusion" else 2.0)
    return out, there


def test_relabel_ratio_model_learns_what_one_scale_cannot():
    import numpy as np

    from tpuperf_cli.calibrate import RatioModel
    from tpuperf_cli.model import default_model_path
    from tpuperf_cli.model.predict import build, read_model_file

    examples, there = ratio_examples()
    assert len(examples) >= 300
    model = build(read_model_file(default_model_path()), default_model_path())
    fit_idx = [i for i, e in enumerate(examples) if e.program != "cnn_s_train"]
    test_idx = [i for i, e in enumerate(examples) if e.program == "cnn_s_train"]
    ratio = RatioModel(model).fit([examples[i] for i in fit_idx], [there[i] for i in fit_idx])
    assert ratio.booster is not None
    pred = ratio.predict([examples[i] for i in test_idx], [there[i] for i in test_idx])
    truth = np.array([examples[i].runtime for i in test_idx])
    # a program the ratio model never saw: its fusions and the rest apart
    err = np.abs(pred / truth - 1)
    one_scale = np.abs(np.array([there[i] for i in test_idx]) * np.exp(ratio.shift) / truth - 1)
    # (one scale gets only one of the two kinds right)
    assert np.mean(err < 0.1) > 0.7 > 0.6 > np.mean(one_scale < 0.1), (err, one_scale)


def test_relabel_leaves_out_kernels_generated_from_validation_programs():
    from tpuperf_cli.calibrate import relabelled
    from tpuperf_cli.model import default_model_path
    from tpuperf_cli.model.predict import build, read_model_file

    examples, there = ratio_examples()
    model = build(read_model_file(default_model_path()), default_model_path())
    fit = [e for e in examples if e.program != "mlp_s_train"]
    valid = [e for e in examples if e.program == "mlp_s_train"]
    there_of = {id(e): t for e, t in zip(examples, there)}
    pool = examples[:30]
    origins = ["mlp_s_train" if i % 3 == 0 else None for i in range(30)]
    out = relabelled(model, fit, valid, there_of, pool, there[:30], origins, seed=0)
    assert len(out) == 20
    # copies relabelled for this machine: the pool's own examples are untouched
    assert all(o is not p for o, p in zip(out, pool))
    assert all(abs(o.runtime / t - r) < 0.5 * r for o, t, r in zip(
        out, [t for t, g in zip(there[:30], origins) if g is None],
        [e.runtime / t for e, t, g in zip(pool, there[:30], origins) if g is None]))


def test_relabel_epochs_draw_as_many_relabelled_kernels_as_measured_ones():
    from tpuperf_cli.calibrate import Fitter, all_params
    from tpuperf_cli.model import default_model_path
    from tpuperf_cli.model.predict import build, read_model_file

    examples, _ = ratio_examples()
    model = build(read_model_file(default_model_path()), default_model_path())
    train, extra = examples[:10], examples[100:300]
    seen = []
    batch = model.batch

    def counting(chunk, *a, **k):
        if model.net.training:
            seen.extend(id(e) for e in chunk)
        return batch(chunk, *a, **k)

    model.batch = counting
    Fitter(model, log=lambda m: None, threads=1).train(model, train, [], all_params, lr=0.0,
                                                       seconds=600, max_epochs=2, extra=extra)
    from_extra = [i for i in seen if i in {id(e) for e in extra}]
    assert len(seen) == 40 and len(from_extra) == 20 and len(set(from_extra)) >= 15


def test_an_excluded_programs_shared_kernels_stay_only_when_asked():
    """exclude_programs leaves out every kernel of those programs, also the
    ones another program has; with exclude_shared=False only their own
    records go (as if their shards were not in the corpus), so the kernels
    they share with other programs stay candidates, owned by those."""
    from tpuperf_cli.calibrate import load_candidates

    shards = [str(GRAPHS / "mlp_s_train.zst"), str(GRAPHS / "bnmlp_s_train.zst")]
    fps = {p: {r["fingerprint"] for r in read_records(GRAPHS / f"{p}.zst")}
           for p in ("mlp_s_train", "bnmlp_s_train")}
    shared = fps["mlp_s_train"] & fps["bnmlp_s_train"]
    assert shared                                   # 16 in the committed corpus

    def chosen(**kw):
        cands = load_candidates(shards, ("mlp_s_train",), **kw)
        assert all(c.programs == {"bnmlp_s_train"} for c in cands)
        return {c.record["fingerprint"] for c in cands}

    strict, lenient = chosen(), chosen(exclude_shared=False)
    assert not strict & fps["mlp_s_train"] and strict <= fps["bnmlp_s_train"]
    assert lenient - strict == shared and lenient <= fps["bnmlp_s_train"]
    assert {c.record["fingerprint"] for c in load_candidates(shards)} >= fps["mlp_s_train"] - strict
