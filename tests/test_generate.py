"""tpuperf generate: the driver (determinism, limit, exclude, dedupe, errors)
and the ops source (records XLA parses, featurize reads and measure times;
the opcodes it reaches)."""

import io
import itertools
import subprocess
import sys

import pytest

from tpuperf_cli.errors import TpuperfError
from tpuperf_cli.features import featurize_kernel
from tpuperf_cli.features.opcodes import OPCODE_IDS, TOMBSTONES
from tpuperf_cli.generate import Failed, driver, ops
from tpuperf_cli.hlo.parser import parse_module
from tpuperf_cli.records import FINGERPRINT, KERNEL_FIELDS, SOURCE
from tpuperf_cli.stream import read_records

from conftest import write_stream

GENERATE = [sys.executable, "-m", "tpuperf_cli", "generate"]


def _records(n, seed=0, sources=("ops",)):
    summary = driver.Summary()
    return list(driver.run(list(sources), seed, [], n, set(), lambda m: None, summary)), summary


@pytest.fixture(scope="module")
def sample():
    """600 ops kernels of seed 0 (shared: making them is the slow part)."""
    return _records(600)[0]


def test_same_seed_same_kernels_other_seed_others(sample):
    again, _ = _records(50)
    assert [r[FINGERPRINT] for r in again] == [r[FINGERPRINT] for r in sample[:50]]
    assert [r["hlo"] for r in again] == [r["hlo"] for r in sample[:50]]
    other, _ = _records(50, seed=1)
    assert len({r[FINGERPRINT] for r in other} & {r[FINGERPRINT] for r in sample}) < 5


def test_records_are_kernel_records_xla_parses_and_featurize_reads(sample):
    from jax._src.lib import xla_client as xc

    for r in sample:
        assert all(f in r for f in KERNEL_FIELDS)
        assert r[SOURCE] == "ops" and r["program"].startswith("ops:")
        module = parse_module(r["hlo"], r["program"])
        assert module.entry is not None
        xc._xla.hlo_module_from_text(r["hlo"])        # XLA's own parser accepts it
        feats = featurize_kernel(r)
        assert feats["node_feat"].shape[0] >= 1


def test_ops_reaches_sixty_opcodes(sample):
    programs = {r["program"][4:] for r in sample}
    opcodes = {r["opcode"] for r in sample}
    assert len(programs) >= 60, sorted(programs)
    assert {"convolution", "dot", "fft", "sort", "gather", "scatter", "reduce-window",
            "select-and-scatter", "cholesky", "triangular-solve", "while", "topk",
            "custom-call", "rng-bit-generator", "dynamic-update-slice", "pad"} <= programs
    assert len(opcodes) >= 60, sorted(opcodes)


def test_every_opcode_of_the_table_is_generated_or_listed_as_not():
    listed = {o for ops_ in ops.NOT_GENERATED.values() for o in ops_.split()}
    generated = set(ops.GENERATORS)
    assert not listed & generated, listed & generated
    missing = set(OPCODE_IDS) - TOMBSTONES - listed - generated
    assert not missing, sorted(missing)


def test_convolutions_cover_dims_groups_and_dilations():
    import random

    g = ops._Gen(random.Random(5))
    texts = [ops._convolution(g)[1] for _ in range(300)]
    assert any("size=" in t and "x" not in t.split("size=")[1].split()[0] for t in texts)  # 1-D
    assert any(t.count("012") for t in texts)                                           # 3-D
    for attr in ("feature_group_count", "batch_group_count", "lhs_dilate", "rhs_dilate", "pad="):
        assert any(attr in t for t in texts), attr
    for fft_type in ("FFT", "IFFT", "RFFT", "IRFFT"):
        assert any(f"fft_type={fft_type}," in ops._fft(g)[1] for _ in range(60)), fft_type


def test_convolutions_and_dots_are_what_xla_emits(sample):
    """A generated convolution or dot is compiled by XLA first: its record
    holds the op as XLA emits it, which compiling again (alone or inside
    measure's timing loop) leaves in the same form: same dimension labels,
    same operand layouts."""
    import re

    from tpuperf_cli.generate.fusions import compile_cpu
    from tpuperf_cli.measure.device import Measurer

    LABELS = r"dim_labels=[^\s,]+|lhs_contracting_dims=\{[^}]*\}"

    def forms(text, op):
        return sorted(re.findall(rf"\S+ {op}\((.*)", text))

    picked = [r for r in sample if r["program"] in ("ops:convolution", "ops:dot")]
    assert len(picked) >= 10
    m = Measurer("cpu")
    for r in picked[:6]:
        op = r["program"].split(":")[1]
        assert op in r["hlo"]
        mine = [f.split("metadata=")[0].split(", metadata")[0] for f in forms(r["hlo"], op)]
        again = compile_cpu(r["hlo"])
        looped = m.compile(r["hlo"])[0].hlo_modules()[0].to_string()
        for text in (again, looped):
            got = [f.split("metadata=")[0].split(", metadata")[0] for f in forms(text, op)]
            labels = [re.findall(LABELS, f) for f in got]
            assert labels == [re.findall(LABELS, f)
                              for f in mine], (r["hlo"], text)


def test_while_kernels_are_the_bodys_ops_counted_by_trip():
    import random

    g = ops._Gen(random.Random(2))
    _, text = ops._while(g)
    from tpuperf_cli.generate import kernel_records_of

    records = kernel_records_of(text, source="ops", program="ops:while")
    opcodes = {r["opcode"] for r in records}
    assert {"dynamic-slice", "dynamic-update-slice", "compare"} <= opcodes
    trip = int(text.split('"n":"')[1].split('"')[0])
    assert {r["count"] for r in records if r["opcode"] == "dynamic-slice"} == {trip}


def test_duplicates_failures_and_stale_sources_are_counted(monkeypatch):
    one = _records(2)[0]

    def fake(seed, programs, log):
        yield one[0]
        yield Failed("this one did not compile")
        yield dict(one[0])
        yield one[1]

    monkeypatch.setattr(driver, "source", lambda name: fake)
    summary = driver.Summary()
    out = list(driver.run(["ops"], 0, [], None, set(), print, summary))
    assert [r[FINGERPRINT] for r in out] == [one[0][FINGERPRINT], one[1][FINGERPRINT]]
    assert (summary.duplicates, summary.failures, summary.written) == (1, 1, 2)
    assert "this one did not compile" in "\n".join(summary.lines("g"))
    summary = driver.Summary()
    out = list(driver.run(["ops"], 0, [], None, {one[1][FINGERPRINT]}, print, summary))
    assert len(out) == 1 and summary.excluded == 1


def test_a_missing_source_module_is_one_line(monkeypatch):
    monkeypatch.setitem(driver.SOURCES, "fusions", "no_such_module_here")
    with pytest.raises(TpuperfError, match="source fusions is not available in this build"):
        driver.load_sources(["fusions"])


def test_program_files_are_checked(tmp_path):
    with pytest.raises(TpuperfError, match="missing.hlo: no such file"):
        driver.check_programs(["fusions"], [str(tmp_path / "missing.hlo")])
    with pytest.raises(TpuperfError, match="draws from no programs"):
        driver.check_programs(["ops"], ["x.hlo"])
    driver.check_programs(["sweeps"], ["resnet_s_train"])     # sweeps takes names too
    with pytest.raises(TpuperfError, match="resnet_s_train: no such file"):
        driver.check_programs(["fusions"], ["resnet_s_train"])


def _cli(args, **kw):
    return subprocess.run(GENERATE + args, capture_output=True, **kw)


def test_cli_limit_zst_exclude_and_summary(tmp_path):
    first = tmp_path / "first.zst"
    p = _cli(["--source", "ops", "--limit", "25", "--seed", "4", "-o", str(first)])
    assert p.returncode == 0, p.stderr
    recs = list(read_records(str(first)))
    assert len(recs) == 25 and len({r[FINGERPRINT] for r in recs}) == 25
    assert b"25 kernels (25 ops)" in p.stderr and b"kernels per opcode" in p.stderr
    # the same seed again, excluding the first 25: the next ones, none repeated
    p = _cli(["--source", "ops", "--limit", "10", "--seed", "4", "--exclude", str(first), "-q"])
    assert p.returncode == 0 and p.stderr == b""
    more = list(read_records(io.BytesIO(p.stdout)))
    assert len(more) == 10
    assert not {r[FINGERPRINT] for r in more} & {r[FINGERPRINT] for r in recs}


def test_cli_bad_input_is_one_line(tmp_path):
    bad = tmp_path / "bad.zst"
    bad.write_bytes(b"not a stream")
    for args, needle in (
            (["--source", "ops", "--exclude", str(tmp_path / "none.zst")], b"no such file"),
            (["--source", "ops", "--exclude", str(bad)], b"bad.zst"),
            (["--source", "ops", str(tmp_path / "p.hlo")], b"draws from no programs"),
            (["--source", "nope"], b"'nope' is not one of")):
        p = _cli(args)
        assert p.returncode != 0, args
        assert needle in p.stderr, (args, p.stderr)
        assert b"Traceback" not in p.stderr


def test_cli_refuses_a_terminal_and_needs_a_source():
    p = _cli([])
    assert p.returncode == 2 and b"--source" in p.stderr


def test_a_sample_measures_on_cpu():
    """A handful of the heavier kinds compiles and runs on XLA:CPU."""
    import random

    from tpuperf_cli.generate import kernel_record
    from tpuperf_cli.measure.device import MeasureError, Measurer

    g = ops._Gen(random.Random(9))
    texts = []
    for name in ("convolution", "dot", "fft", "sort", "gather", "scatter", "reduce-window",
                 "select-and-scatter", "custom-call", "triangular-solve"):
        _, text = ops.GENERATORS[name](g)
        texts.append(kernel_record(text, source="ops", program=f"ops:{name}")["hlo"])
    measurer = Measurer("cpu", samples=5, min_time=0.002)
    # one at a time: in one bundle (measure's METHOD 4) a cheap dot with a
    # large output beside a convolution came out untimed (reported)
    results = [measurer.measure_many([t])[0] for t in texts]
    errors = [f"{t.splitlines()[-2]}: {r}" for t, r in zip(texts, results) if isinstance(r, MeasureError)]
    assert not errors, errors
    assert all(r.runtime_ns > 0 for r in results)


def test_generated_records_pipe_through_featurize(tmp_path):
    p = _cli(["--source", "ops", "--limit", "8", "-q"])
    f = subprocess.run([sys.executable, "-m", "tpuperf_cli", "featurize"], input=p.stdout,
                       capture_output=True)
    assert f.returncode == 0, f.stderr
    graphs = list(read_records(io.BytesIO(f.stdout)))
    assert len(graphs) == 8 and all(g["type"] == "graph" for g in graphs)
    write_stream(tmp_path / "g.msgpack", graphs)
    assert next(itertools.islice(read_records(str(tmp_path / "g.msgpack")), 1))["source"] == "ops"
