"""score: program sums of kernel predictions x counts."""

import io
import json
import os
import subprocess
import sys

import msgpack
import pytest
from click.testing import CliRunner

from tpuperf_cli.commands.score import cli
from tpuperf_cli.errors import StreamError
from tpuperf_cli.records import new_record
from tpuperf_cli.score import render_table, score_records
from tpuperf_cli.stream import read_records

from conftest import stream_bytes

SCORE = os.path.join(os.path.dirname(sys.executable), "score")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def k(program, kernel, pred, count=1, runtime=None, **extra):
    r = new_record("graph", program=program, kernel=kernel, count=count, pred_ns=pred, model="m-1",
                   **extra)
    if runtime is not None:
        r["runtime_ns"] = runtime
    return r




def test_sums_with_counts_and_measured_error():
    recs = [k("a", "f1", 100.0, count=3, runtime=110.0), k("b", "f1", 10.0, runtime=20.0),
            k("a", "f2", 50.0, count=2, runtime=40.0)]
    out = list(score_records(recs))
    assert [p["program"] for p in out] == ["a", "b"]
    a, b = out
    assert a["type"] == "program" and a["v"] == 1
    assert a["kernels"] == 2 and a["pred_ns"] == 100 * 3 + 50 * 2
    assert a["runtime_ns"] == 110 * 3 + 40 * 2
    assert a["ape"] == pytest.approx(100 * abs(400 - 410) / 410)
    assert a["model"] == "m-1" and a["count_known"] is True
    assert b["pred_ns"] == 10 and b["ape"] == pytest.approx(50.0)


def test_partly_measured_and_unknown_counts():
    recs = [k("a", "f1", 100.0, runtime=110.0), k("a", "f2", 5.0, count=1, count_known=False)]
    (a,) = score_records(recs)
    assert "runtime_ns" not in a and "ape" not in a and a["measured"] == 1
    assert a["count_known"] is False
    assert "+" in render_table([a])


def test_missing_pred_and_empty_input_are_clear_errors():
    with pytest.raises(StreamError, match="record 2 .*pred_ns is missing.*predict"):
        list(score_records([k("a", "f", 1.0), new_record("graph", program="a", kernel="g")]))
    with pytest.raises(StreamError, match="record 1.*count"):
        list(score_records([k("a", "f", 1.0, count="x")]))
    with pytest.raises(StreamError, match="no records"):
        list(score_records([]))


def test_formats():
    data = stream_bytes([k("prog", "f1", 2e6, count=2, runtime=4.2e6), k("prog", "f2", 1e3)])
    r = CliRunner().invoke(cli, ["--format", "json"], input=data)
    assert r.exit_code == 0
    (line,) = r.output.splitlines()
    p = json.loads(line)
    assert p["pred_ns"] == 4e6 + 1e3 and p["program"] == "prog"
    r = CliRunner().invoke(cli, ["-f", "table"], input=data)
    assert r.exit_code == 0
    lines = r.output.splitlines()
    assert lines[0].split() == ["program", "kernels", "predicted", "measured", "error"]
    assert lines[1].split()[:4] == ["prog", "2", "4", "ms"]
    r = CliRunner().invoke(cli, ["-f", "msgpack"], input=data)
    (p,) = list(msgpack.Unpacker(io.BytesIO(r.stdout_bytes), raw=False))
    assert p["type"] == "program" and p["kernels"] == 2


def test_pipe_default_is_msgpack_and_errors_are_one_line(tmp_path):
    data = stream_bytes([k("prog", "f1", 5.0)])
    res = subprocess.run([SCORE], input=data,
                         capture_output=True, cwd=ROOT)
    assert res.returncode == 0
    (p,) = list(read_records(io.BytesIO(res.stdout)))
    assert p["pred_ns"] == 5.0
    res = subprocess.run([SCORE],
                         input=stream_bytes([new_record("kernel", program="p", kernel="f")]),
                         capture_output=True, cwd=ROOT)
    err = res.stderr.decode()
    assert res.returncode == 1 and err.startswith("score: error:") and "Traceback" not in err
    res = subprocess.run([SCORE], input=b"",
                         capture_output=True, cwd=ROOT)
    assert res.returncode == 1 and "no records" in res.stderr.decode()


def test_score_does_not_import_torch():
    code = ("import sys; from tpuperf_cli.commands.score import cli; import tpuperf_cli.score; "
            "assert 'torch' not in sys.modules and 'dgl' not in sys.modules and "
            "'numpy' not in sys.modules, sorted(m for m in ('torch', 'dgl', 'numpy') if m in sys.modules)")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, cwd=ROOT)
    assert res.returncode == 0, res.stderr.decode()


def test_top_kernels_by_share_of_predicted_time():
    recs = [k("a", "small", 10.0, count=1, opcode="add"),
            k("a", "loop", 20.0, count=10, runtime=25.0, opcode="fusion", fusion_kind="kLoop"),
            k("a", "dot", 100.0, count=1, opcode="dot"),
            k("b", "only", 5.0)]
    a, b = score_records(recs, top=2)
    assert [t["kernel"] for t in a["top"]] == ["loop", "dot"]    # 200 ns and 100 ns of 310
    loop = a["top"][0]
    assert loop["share"] == pytest.approx(100 * 200 / 310)
    assert (loop["count"], loop["opcode"], loop["fusion_kind"]) == (10, "fusion", "kLoop")
    assert loop["pred_ns"] == 20.0 and loop["runtime_ns"] == 25.0
    assert a["top"][1]["runtime_ns"] is None
    assert [t["kernel"] for t in b["top"]] == ["only"] and b["top"][0]["share"] == 100.0
    assert "top" not in next(score_records(recs))     # only when asked for

    text = render_table([a, b])
    assert "a: 2 of 3 kernels by share of predicted time" in text
    row = next(line for line in text.splitlines() if line.rstrip().endswith("loop"))
    assert row.split()[:4] == ["64.5%", "10", "fusion", "(kLoop)"]
    assert "200 ns" in row and "250 ns" in row


def test_top_in_every_format():
    data = stream_bytes([k("p", f"f{i}", float(i + 1) * 1000) for i in range(5)])
    r = CliRunner().invoke(cli, ["--top", "3", "-f", "json"], input=data)
    assert r.exit_code == 0, r.output
    (p,) = [json.loads(line) for line in r.output.splitlines()]
    assert [t["kernel"] for t in p["top"]] == ["f4", "f3", "f2"]
    r = CliRunner().invoke(cli, ["-k", "1", "-f", "msgpack"], input=data)
    (p,) = list(msgpack.Unpacker(io.BytesIO(r.stdout_bytes), raw=False))
    assert [t["kernel"] for t in p["top"]] == ["f4"]
    r = CliRunner().invoke(cli, ["--top", "2", "-f", "table"], input=data)
    assert "p: 2 of 5 kernels" in r.output


def test_output_file(tmp_path):
    data = stream_bytes([k("p", "f", 1000.0)])
    out = tmp_path / "p.json"
    r = CliRunner().invoke(cli, ["-f", "json", "-o", str(out)], input=data)
    assert r.exit_code == 0 and r.output == ""
    assert json.loads(out.read_text())["program"] == "p"
    out = tmp_path / "p.msgpack"
    r = CliRunner().invoke(cli, ["-o", str(out)], input=data)     # a file: msgpack
    (p,) = list(read_records(str(out)))
    assert p["type"] == "program"
