"""tpuperf import: real TPU tuning JSON and TpuGraphs tile .npz files -> records."""

import io
import json
import pathlib
import subprocess
import sys

import numpy as np
import pytest
from click.testing import CliRunner

from tpuperf_cli.cli import tpuperf
from tpuperf_cli.errors import TpuperfError
from tpuperf_cli.stream import decode_array, read_records
from tpuperf_cli.tile import tpugraphs as tg
from tpuperf_cli.tile import tuning_json as tj

ROOT = pathlib.Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "examples" / "tile" / "tpu_tile_sample.json"
needs_sample = pytest.mark.skipif(not SAMPLE.exists(), reason="TPU sample data not here")

COPY_HLO = """HloModule copy.24, is_scheduled=true

ENTRY %copy.24 (parameter.0: bf16[32,5,5,256]) -> bf16[32,5,5,256] {
  %parameter.0 = bf16[32,5,5,256]{3,0,2,1:T(8,128)(2,1)} parameter(0)
  ROOT %copy.24 = bf16[32,5,5,256]{3,2,1,0:T(8,128)(2,1)} copy(%parameter.0), metadata={op_type="MaxPool"}
}
"""


def _records(data):
    return list(read_records(io.BytesIO(data)))


class Run:
    """What `tpuperf ARGS` did, in-process: exit_code, stdout_bytes, and stderr
    as the CLI prints it (a TpuperfError becomes `tpuperf: error: msg`, the
    way cli.main reports it; test_cli_error_format checks that for real)."""

    def __init__(self, args):
        res = CliRunner().invoke(tpuperf, args)
        self.stdout_bytes = res.stdout_bytes
        self.stderr = res.stderr
        self.exit_code = res.exit_code
        if isinstance(res.exception, TpuperfError):
            self.stderr += f"tpuperf: error: {res.exception}\n"
            self.exit_code = res.exception.exit_code
        elif res.exception and not isinstance(res.exception, SystemExit):
            raise res.exception


_run = Run


def _kernel(fp=7, hlo=COPY_HLO, configs=None):
    return {"kernel_fingerprint": fp, "hlo": hlo, "configs": configs if configs is not None else [
        {"tile": {"output_bounds": [16, 5, 1, 2]}, "runtime_ns": 3967, "is_default": True},
        {"tile": {"output_bounds": [8, 1, 1, 1], "kernel_bounds": [2]}, "runtime_ns": 9352,
         "is_default": False},
    ]}


# ---------------------------------------------------------------- tuning json

@needs_sample
def test_tuning_json_sample_gives_one_record_per_config():
    data = json.loads(SAMPLE.read_text())
    recs = list(tj.records(str(SAMPLE)))
    assert len(recs) == sum(len(k["configs"]) for k in data) == 87
    kernels = {}
    for r in recs:
        kernels.setdefault(r["kernel"], []).append(r)
    assert len(kernels) == 3
    for k, (name, rs) in zip(data, kernels.items()):
        assert name == f"kernel_{k['kernel_fingerprint']:016x}"
        assert [r["config_index"] for r in rs] == list(range(len(k["configs"])))
        assert [r["runtime_ns"] for r in rs] == [float(c["runtime_ns"]) for c in k["configs"]]
        assert sum(r["is_default"] for r in rs) == 1
        assert all(r["hlo"] == k["hlo"] and r["kernel_fingerprint"] == k["kernel_fingerprint"]
                   for r in rs)
        assert len({r["fingerprint"] for r in rs}) == 1
    r = recs[0]
    assert r["type"] == "kernel" and r["v"] == 1 and r["program"] == "tpu_tile_sample"
    assert r["opcode"] == "fusion" and r["fusion_kind"] == "kLoop"
    assert r["computation"] == "fusion.232"
    assert r["config"] == {"kernel_bounds": [], "output_bounds": [2, 26, 4, 2],
                           "input_bounds": []}
    assert r["target"]["platform"] == "tpu"
    last = recs[-1]
    assert last["opcode"] == "copy" and last["fusion_kind"] is None and last["index"] == 2
    # the second kernel is a kOutput fusion tiled in kernel and output bounds
    second = kernels[list(kernels)[1]][0]
    assert second["fusion_kind"] == "kOutput"
    assert second["config"]["kernel_bounds"] == [4, 1]


@needs_sample
def test_tuning_json_cli_writes_zst_and_program_option(tmp_path):
    out = tmp_path / "tile.zst"
    res = _run(["import", "tuning-json", "--program", "resnet", "--device-kind", "TPU v4",
                str(SAMPLE), "-o", str(out)])
    assert res.exit_code == 0, res.stderr
    assert out.read_bytes()[:4] == b"\x28\xb5\x2f\xfd"
    recs = list(read_records(str(out)))
    assert len(recs) == 87
    assert {r["program"] for r in recs} == {"resnet"}
    assert recs[0]["target"]["device_kind"] == "TPU v4"


def _import_hlo(tmp_path, hlo, name="k.json"):
    path = tmp_path / name
    path.write_text(json.dumps([_kernel(hlo=hlo)]))
    return list(tj.records(str(path)))


def test_identical_kernels_share_hlo_splits_fingerprint(tmp_path):
    renamed = COPY_HLO.replace("copy.24", "copy.99").replace("parameter.0", "p").replace(
        'metadata={op_type="MaxPool"}', 'metadata={op_name="x"}')
    other = COPY_HLO.replace("bf16[32,5,5,256]", "bf16[32,5,5,128]")
    fp = _import_hlo(tmp_path, COPY_HLO)[0]["fingerprint"]
    assert _import_hlo(tmp_path, renamed)[0]["fingerprint"] == fp
    assert _import_hlo(tmp_path, other)[0]["fingerprint"] != fp
    # the same kernel split out of a program by hlo-split has the same fingerprint
    from tpuperf_cli.hlo.parser import parse_module
    from tpuperf_cli.hlo.split import kernel_records

    program = COPY_HLO.replace("ROOT %copy.24", "%copy.24").replace(
        "\n}", "\n  ROOT %n = bf16[32,5,5,256]{3,2,1,0:T(8,128)(2,1)} negate(%copy.24)\n}")
    split = {r["opcode"]: r["fingerprint"] for r in kernel_records(parse_module(program))}
    assert split["copy"] == fp


def _write_json(tmp_path, data, name="bad.json"):
    p = tmp_path / name
    p.write_text(json.dumps(data) if not isinstance(data, str) else data)
    return str(p)


@pytest.mark.parametrize("data, words", [
    ([_kernel(configs=[{"tile": {}, "is_default": True, "runtime_ns": "fast"}])],
     ["kernel 0", "kernel_fingerprint 7", "configs[0]", "'runtime_ns'", "or null"]),
    ([_kernel(configs=[{"tile": {}, "runtime_ns": None}, {"runtime_ns": 5}])],
     ["no configuration has a runtime and a tile", "1 runtime_ns null, 1 tile absent"]),
    ([{"hlo": COPY_HLO, "configs": []}], ["kernel 0", "missing key 'kernel_fingerprint'"]),
    ([_kernel(configs=[{"tile": {"output_bounds": [1, "x"]}, "runtime_ns": 5}])],
     ["configs[0]", "tile.output_bounds"]),
    ([_kernel(configs=[{"tile": {"warp_bounds": [1]}, "runtime_ns": 5}])],
     ["configs[0]", "warp_bounds"]),
    # found by the slow fuzz suite: a bound past 64 bits reached the record writer
    ([_kernel(configs=[{"tile": {"output_bounds": [2 ** 64]}, "runtime_ns": 5}])],
     ["configs[0]", "tile.output_bounds", "below 2**63"]),
    ([dict(_kernel(), kernel_fingerprint=2 ** 64)], ["kernel 0", "'kernel_fingerprint' must be a 64-bit"]),
    # found by the fuzz suite: a key with a newline made a two-line error
    ([_kernel(configs=[{"tile": {"a\nb": None}, "runtime_ns": 5}])],
     ["configs[0]", "unknown bounds 'a\\nb'"]),
    ([_kernel(configs=[{"runtime_ns": -3}])], ["configs[0]", "'runtime_ns'", "positive"]),
    ([_kernel(configs=[])], ["'configs'", "non-empty"]),
    ([_kernel(hlo="%fusion.1 = f32[8]{0} fusion(%p), kind=kLoop, calls=%c")],
     ["'hlo'", "HloModule"]),
    ([_kernel(hlo="HloModule m\n\nENTRY %c (p: f32[8]) -> f32[8] {\n  ROOT %p = f32[8] parameter(0)\n}\n")],
     ["'hlo'", "ENTRY root 'p' (parameter) is not a kernel"]),
    ([_kernel(configs=[{"runtime_ns": 5, "is_default": True}, {"runtime_ns": 6, "is_default": True}])],
     ["is_default", "2 configurations"]),
    ({"kernel_fingerprint": 1}, ["list of kernels"]),
])
def test_malformed_tuning_json_names_file_and_key(tmp_path, data, words):
    path = _write_json(tmp_path, data)
    res = _run(["import", "tuning-json", path])
    assert res.exit_code == 1
    assert res.stderr.startswith("tpuperf: error: ") and "Traceback" not in res.stderr
    assert res.stderr.count("\n") == 1
    assert path in res.stderr
    for w in words:
        assert w in res.stderr, (w, res.stderr)


def test_failed_configs_are_skipped_and_counted(tmp_path):
    # real tuning files hold failed runs: runtime_ns null (or absent), or no tile
    good = {"tile": {"output_bounds": [16, 5, 1, 2]}, "runtime_ns": 3967, "is_default": True}
    configs = [good,
               {"tile": {"output_bounds": [8, 1, 1, 1]}, "runtime_ns": None},
               {"tile": {"output_bounds": [4, 1, 1, 1]}},
               {"runtime_ns": 5000},
               {"tile": None, "runtime_ns": None},
               {"tile": {"output_bounds": [2, 1, 1, 1]}, "runtime_ns": 7000}]
    all_failed = [{"tile": {"output_bounds": [1]}, "runtime_ns": None}]
    path = _write_json(tmp_path, [_kernel(fp=1, configs=configs), _kernel(fp=2, configs=all_failed)])
    res = _run(["import", "tuning-json", path])
    assert res.exit_code == 0, res.stderr
    recs = _records(res.stdout_bytes)
    assert [(r["kernel"], r["config_index"], r["runtime_ns"]) for r in recs] == [
        ("kernel_0000000000000001", 0, 3967.0), ("kernel_0000000000000001", 5, 7000.0)]
    assert res.stderr == (f"import tuning-json: {path}: skipped 5 failed configuration(s) "
                          f"(3 runtime_ns null, 2 tile absent)\n")


def test_train_and_eval_leave_out_configs_without_a_finite_runtime():
    # a failed config that reaches them anyway (null, NaN, inf, 0, a string)
    # is neither fast nor slow: left out, and counted
    from tpuperf_cli.eval.report import EvalData

    recs = [{"program": "p", "kernel": "k", "runtime_ns": rt, "config": {"kernel_bounds": [i]}}
            for i, rt in enumerate([100.0, None, float("nan"), float("inf"), 0, "9", 200])]
    d = EvalData(recs)
    assert list(d.runtime) == [100.0, 200.0] and d.skipped == 5


def test_hlo_that_does_not_parse_is_exit_2_naming_kernel_and_line(tmp_path):
    path = _write_json(tmp_path, [_kernel(fp=3, hlo=COPY_HLO.replace("copy(", "cpy("))])
    res = _run(["import", "tuning-json", path])
    assert res.exit_code == 2
    assert f"{path}: kernel 0 (kernel_fingerprint 3): hlo:5:" in res.stderr
    assert "cpy" in res.stderr
    no_entry = "HloModule m\n\n%c (p: f32[8]) -> f32[8] {\n  ROOT %p = f32[8] parameter(0)\n}\n"
    path = _write_json(tmp_path, [_kernel(fp=3, hlo=no_entry)])
    res = _run(["import", "tuning-json", path])
    assert res.exit_code == 2 and f"{path}: kernel 0 (kernel_fingerprint 3): hlo:" in res.stderr
    assert "ENTRY" in res.stderr, res.stderr


def test_json_that_does_not_parse_is_exit_2_with_line(tmp_path):
    path = _write_json(tmp_path, '[\n  {"kernel_fingerprint": 1,\n   "hlo": }\n]')
    res = _run(["import", "tuning-json", path])
    assert res.exit_code == 2
    assert f"{path}:3:" in res.stderr and "not valid JSON" in res.stderr


def test_missing_file_is_a_clear_error(tmp_path):
    res = _run(["import", "tuning-json", str(tmp_path / "nope.json")])
    assert res.exit_code == 1 and "nope.json" in res.stderr and "No such file" in res.stderr


def test_good_kernels_before_a_bad_one_are_written(tmp_path):
    path = _write_json(tmp_path, [_kernel(fp=1), _kernel(fp=2, configs=[{"tile": {}, "runtime_ns": -1}])])
    out = subprocess.run([sys.executable, "-m", "tpuperf_cli", "import", "tuning-json", path],
                         capture_output=True)
    assert out.returncode == 1
    assert b"kernel 1 (kernel_fingerprint 2): configs[0]: key 'runtime_ns' must be a positive" in out.stderr
    recs = _records(out.stdout)
    assert [r["kernel"] for r in recs] == ["kernel_0000000000000001"] * 2


def test_repeated_kernel_keeps_both_apart(tmp_path):
    path = _write_json(tmp_path, [_kernel(fp=5), _kernel(fp=5)], name="two.json")
    names = [r["kernel"] for r in tj.records(path)]
    assert names == ["kernel_0000000000000005"] * 2 + ["kernel_0000000000000005#2"] * 2
    # two files into one --program: the same kernel in both stays apart too
    other = _write_json(tmp_path, [_kernel(fp=5)], name="three.json")
    res = _run(["import", "tuning-json", "--program", "p", path, other])
    names = [r["kernel"] for r in _records(res.stdout_bytes)]
    assert names[-2:] == ["kernel_0000000000000005#3"] * 2
    res = _run(["import", "tuning-json", path, other])      # programs two, three
    recs = _records(res.stdout_bytes)
    assert [(r["program"], r["kernel"]) for r in recs][-2:] == [
        ("three", "kernel_0000000000000005")] * 2


# ---------------------------------------------------------------- TpuGraphs

def make_tile_npz(path, n=5, m=4, c=6, seed=0, **override):
    """A small file in exactly the TpuGraphs tile format (dtypes as released)."""
    rng = np.random.default_rng(seed)
    config_feat = np.zeros((c, 24), dtype=np.float32)
    for j in range(c):
        out = rng.integers(1, 9, size=3)
        config_feat[j, 8:11] = out
        config_feat[j, 14] = out.sum()
        config_feat[j, 15] = out.prod()
    arrays = {
        "node_feat": rng.random((n, 140)).astype(np.float32),
        "node_opcode": rng.integers(0, 120, size=n).astype(np.uint8),
        "edge_index": np.stack([np.arange(1, m + 1) % n, np.arange(m) % n], 1).astype(np.int64),
        "config_feat": config_feat,
        "config_runtime": rng.integers(1000, 90000, size=c).astype(np.int64),
        "config_runtime_normalizers": rng.integers(40000, 60000, size=c).astype(np.int64),
    }
    arrays.update(override)
    arrays = {k: v for k, v in arrays.items() if v is not None}
    np.savez_compressed(path, **arrays)
    return arrays


def test_tpugraphs_file_gives_graph_records_normalised(tmp_path):
    path = tmp_path / "alexnet_train_batch_32_-1bae27a41d70f4dc.npz"
    a = make_tile_npz(path)
    recs = list(tg.records(str(path)))
    assert len(recs) == 6
    ratio = a["config_runtime"] / a["config_runtime_normalizers"]
    for j, r in enumerate(recs):
        assert r["type"] == "graph" and r["config_index"] == j
        assert r["program"] == "alexnet_train_batch_32"
        assert r["kernel"] == "kernel_-1bae27a41d70f4dc"
        assert r["runtime_norm"] == pytest.approx(ratio[j])
        assert r["runtime_raw"] == a["config_runtime"][j]
        assert r["runtime_ns"] == pytest.approx(ratio[j] * a["config_runtime_normalizers"].mean())
        assert r["node_feat"].dtype == np.float32 and r["node_feat"].shape == (5, 140)
        assert r["node_opcode"].dtype == np.int32
        np.testing.assert_array_equal(r["node_opcode"], a["node_opcode"])
        assert r["edge_index"].dtype == np.int32
        np.testing.assert_array_equal(r["edge_index"], a["edge_index"])
        np.testing.assert_array_equal(r["config_feat"], a["config_feat"][j])
        out = [int(x) for x in a["config_feat"][j, 8:11]]
        assert r["config"] == {"kernel_bounds": [], "output_bounds": out, "input_bounds": []}
        assert r["target"]["platform"] == "tpu" and "is_default" not in r
    # the normalised order is kept, whatever runtime_ns holds
    assert np.argsort([r["runtime_ns"] for r in recs]).tolist() == np.argsort(ratio).tolist()
    raw = [r["runtime_ns"] for r in tg.records(str(path), runtime="raw")]
    assert raw == a["config_runtime"].astype(float).tolist()
    rat = [r["runtime_ns"] for r in tg.records(str(path), runtime="ratio")]
    np.testing.assert_allclose(rat, ratio)


def test_tpugraphs_cli_reads_directories_and_samples_configs(tmp_path):
    d = tmp_path / "npz" / "tile" / "xla" / "train"
    d.mkdir(parents=True)
    make_tile_npz(d / "prog_aaaaaaaaaaaaaaaa.npz", c=40, seed=1)
    make_tile_npz(d / "prog_bbbbbbbbbbbbbbbb.npz", c=3, seed=2)
    (d / "README.txt").write_text("not data")
    res = _run(["import", "tpugraphs", str(tmp_path / "npz"), "--max-configs", "10"])
    assert res.exit_code == 0, res.stderr
    recs = _records(res.stdout_bytes)
    assert len(recs) == 13
    first = [r for r in recs if r["kernel"] == "kernel_aaaaaaaaaaaaaaaa"]
    idx = [r["config_index"] for r in first]
    assert len(idx) == 10 and idx == sorted(idx) and len(set(idx)) == 10
    assert [r["index"] for r in recs if r["config_index"] == 0][-1] == 1
    # arrays travel as plain maps and decode back
    assert decode_array(recs[0]["node_feat"]).shape == (5, 140)
    again = _records(_run(["import", "tpugraphs", str(d), "--max-configs", "10"]).stdout_bytes)
    assert [r["config_index"] for r in again] == [r["config_index"] for r in recs]


def test_layout_collection_is_refused_clearly(tmp_path):
    path = tmp_path / "bert_layout.npz"
    np.savez(path, node_feat=np.zeros((3, 140), np.float32), node_opcode=np.zeros(3, np.uint8),
             edge_index=np.zeros((0, 2), np.int64), node_config_feat=np.zeros((2, 1, 18)),
             node_config_ids=np.array([1]), config_runtime=np.array([5, 6]))
    res = _run(["import", "tpugraphs", str(path)])
    assert res.exit_code == 1
    assert str(path) in res.stderr and "layout" in res.stderr and "not supported" in res.stderr
    assert "node_config_feat" in res.stderr


@pytest.mark.parametrize("override, words", [
    ({"config_runtime_normalizers": None}, ["missing key 'config_runtime_normalizers'"]),
    ({"node_feat": np.zeros((5, 139), np.float32)}, ["'node_feat'", "(n, 140)"]),
    ({"node_opcode": np.zeros(4, np.uint8)}, ["'node_opcode'", "(5,)"]),
    ({"edge_index": np.array([[0, 9]])}, ["'edge_index'", "0..4"]),
    ({"config_feat": np.zeros((6, 20), np.float32)}, ["'config_feat'", "(c, 24)"]),
    ({"config_runtime": np.arange(5)}, ["'config_runtime'", "(6,)"]),
    ({"config_runtime_normalizers": np.zeros(6, np.int64)}, ["'config_runtime_normalizers'",
                                                              "positive"]),
    ({"node_feat": np.full((5, 140), np.nan, np.float32)}, ["'node_feat'", "NaN"]),
    ({"config_runtime": np.array([object()] * 6, dtype=object)}, ["'config_runtime'",
                                                                  "Python objects"]),
    ({"node_opcode": np.array(list("abcde"))}, ["'node_opcode'", "expected integers"]),
    ({"edge_index": np.array([[0.5, 1.0]])}, ["'edge_index'", "expected integers", "float64"]),
    ({"config_feat": np.array([list("abcdefghijklmnopqrstuvwx")] * 6)},
     ["'config_feat'", "expected numbers"]),
])
def test_malformed_npz_names_file_and_key(tmp_path, override, words):
    path = tmp_path / "prog_0123456789abcdef.npz"
    make_tile_npz(path, **override)
    res = _run(["import", "tpugraphs", str(path)])
    assert res.exit_code == 1, res.stdout
    assert res.stderr.startswith("tpuperf: error: ") and str(path) in res.stderr
    for w in words:
        assert w in res.stderr, (w, res.stderr)
    assert res.stdout_bytes == b""


@pytest.mark.parametrize("shape, words", [
    ((2**35, 140), ["declares 19241453486080 bytes", "maximum record size (256 MiB"]),
    ((5, 141), ["declares 2820 bytes ([5, 141] of float32) but holds 2800"]),
])
def test_npz_arrays_whose_header_lies_are_refused_before_loading(tmp_path, shape, words):
    # a .npy header declares the array numpy allocates: check it against the bound and the archive
    import zipfile

    path = tmp_path / "prog_0123456789abcdef.npz"
    make_tile_npz(path)
    lie = tmp_path / "lie.npz"
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(lie, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            data = src.read(info)
            if info.filename == "node_feat.npy":
                head = io.BytesIO()
                np.lib.format.write_array_header_1_0(
                    head, {"descr": "<f4", "fortran_order": False, "shape": shape})
                data = head.getvalue() + b"\0" * (5 * 140 * 4)
            dst.writestr(info.filename, data)
    res = _run(["import", "tpugraphs", str(lie)])
    assert res.exit_code == 1
    assert f"{lie}: key 'node_feat': " in res.stderr and res.stderr.count("\n") == 1
    for w in words:
        assert w in res.stderr, res.stderr


def test_not_an_npz_and_missing_paths(tmp_path):
    bad = tmp_path / "x.npz"
    bad.write_bytes(b"PK\x03\x04 truncated")
    res = _run(["import", "tpugraphs", str(bad)])
    assert res.exit_code == 1 and str(bad) in res.stderr and "not a readable .npz" in res.stderr
    text = tmp_path / "notes.npz"
    text.write_text("just some text\n")
    res = _run(["import", "tpugraphs", str(text)])
    assert res.exit_code == 1 and "neither a zip archive nor a .npy array" in res.stderr
    assert "pickle" not in res.stderr
    res = _run(["import", "tpugraphs", str(tmp_path / "missing")])
    assert res.exit_code == 1 and "no such file" in res.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    res = _run(["import", "tpugraphs", str(empty)])
    assert res.exit_code == 1 and "no .npz files" in res.stderr


def test_config_features_round_trip_through_bounds():
    row = np.zeros(24, np.float32)
    row[0:2] = [4, 1]                                          # kernel_bounds
    row[6:8] = [5, 4]
    row[8:12] = [16, 5, 1, 2]                                  # output_bounds
    row[14:16] = [24, 160]
    assert tg.config_from_features(row) == {
        "kernel_bounds": [4, 1], "output_bounds": [16, 5, 1, 2], "input_bounds": []}


def test_tile_ids_split_into_program_and_kernel():
    assert tg.split_tile_id("alexnet_train_batch_32_-1bae27a41d70f4dc") == (
        "alexnet_train_batch_32", "kernel_-1bae27a41d70f4dc")
    assert tg.split_tile_id("resnet50.4x4.fp16_4adbb8a41b4a3a04") == (
        "resnet50.4x4.fp16", "kernel_4adbb8a41b4a3a04")
    assert tg.split_tile_id("plain") == ("plain", "kernel")


def test_cli_error_format(tmp_path):
    """The real CLI: one line on stderr, no traceback, exit 1 / 2."""
    npz = tmp_path / "prog_0123456789abcdef.npz"
    make_tile_npz(npz, config_feat=np.zeros((6, 20), np.float32))
    bad_json = _write_json(tmp_path, "[{")
    for args, code, words in (
            (["tpugraphs", str(npz)], 1, f"tpuperf: error: {npz}: key 'config_feat'"),
            (["tuning-json", bad_json], 2, f"tpuperf: error: {bad_json}:1:")):
        out = subprocess.run([sys.executable, "-m", "tpuperf_cli", "import", *args],
                             capture_output=True, text=True)
        assert out.returncode == code
        assert out.stderr.startswith(words) and out.stderr.count("\n") == 1, out.stderr


def test_config_read_back_matches_featurize_layout():
    """config -> featurize's 24 features -> config, for the sample's shapes."""
    features = pytest.importorskip("tpuperf_cli.features.config")
    for config in ({"kernel_bounds": [4, 1], "output_bounds": [16, 32], "input_bounds": []},
                   {"kernel_bounds": [], "output_bounds": [2, 26, 4, 2, 1, 3, 5],
                    "input_bounds": [7]}):
        row = np.asarray(features.config_features(config), np.float32)
        back = tg.config_from_features(row)
        assert back == {k: v[:6] for k, v in config.items()}


def test_tpugraphs_records_are_model_examples(tmp_path):
    """Graph records from TpuGraphs go to train/predict as they are (no featurize)."""
    examples = pytest.importorskip("tpuperf_cli.model.examples")
    path = tmp_path / "prog_00000000000000aa.npz"
    make_tile_npz(path, c=3)
    res = _run(["import", "tpugraphs", str(path)])
    recs = _records(res.stdout_bytes)
    ex = examples.example(recs[1], 2, "tile")
    assert ex.n == 5 and ex.config_feat.shape == (24,) and ex.kernel_feat.size == 0
    assert (ex.program, ex.kernel) == ("prog", "kernel_00000000000000aa")
    assert ex.runtime == pytest.approx(recs[1]["runtime_ns"])


def test_train_corpus_leaves_out_failed_configs_and_counts_them(tmp_path):
    from tpuperf_cli.model.data import Corpus

    from conftest import write_stream
    from synthetic import synthetic_records

    recs = synthetic_records(n_programs=2, kernels=3, configs=4)
    bad = [None, float("nan"), float("inf"), 0.0, "12"]
    for r, rt in zip(recs, bad):
        r["runtime_ns"] = rt
    path = write_stream(tmp_path / "tile.msgpack", recs)
    corpus = Corpus([str(path)], task="tile").scan()
    assert corpus.examples == len(recs) - len(bad)
    assert sum(corpus.skipped.values()) == len(bad)
