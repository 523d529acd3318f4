"""Fuzz suite (issue 13): hostile and damaged input never gives a traceback,
a hang or unbounded memory.

Mutated real programs go through the HLO parser; mutated and truncated
streams (bytes flipped, cut, spliced; fields of records replaced by values of
other types; arrays whose dtype, shape or size lie) go through the stream
readers and every tool's command line. A tool may accept the input or refuse
it, with exit status 0, 1 or 2 and, when it refuses, a one-line error; any
other exception is a bug that hypothesis shrinks to a small reproduction.

The default run draws a few hundred examples in all (derandomized, so CI is
repeatable); `pytest -m slow tests/test_fuzz.py` draws ten times more, at
random.
"""

import io
import pathlib
import resource
import signal
import tempfile

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tpuperf_cli.cli import load_command
from tpuperf_cli.errors import TpuperfError
from tpuperf_cli.hlo.dump import read_hlo
from tpuperf_cli.hlo.parser import parse_module
from tpuperf_cli.hlo.split import kernel_records
from tpuperf_cli.stream import decode_array, is_array, read_records

from conftest import stream_bytes

ROOT = pathlib.Path(__file__).resolve().parent.parent
HLO_FILES = [ROOT / "tests" / "data" / "hlo" / n for n in ("tpu_style.hlo", "gpu_style.hlo",
                                                             "async_explicit.hlo")]
HLO_FILES += [ROOT / "examples" / "hlo" / "mlp_s_train.hlo.zst"]
TEXTS = [read_hlo(p).text for p in HLO_FILES]

_QUICK = dict(deadline=None, database=None, derandomize=True, print_blob=True,
              suppress_health_check=list(HealthCheck))
_LONG = dict(deadline=None, database=None, print_blob=True, suppress_health_check=list(HealthCheck))
# the inputs are kilobytes: one tool call may raise the process's peak memory
# by at most this (importing torch for train is a few hundred MiB; a bomb
# would show as gigabytes), a whole fuzz test by at most twice that (many
# calls of train and predict keep some of torch's caches)
CALL_PEAK_GROWTH_MIB = 768
PEAK_GROWTH_MIB = 2 * CALL_PEAK_GROWTH_MIB
CALL_TIMEOUT_S = 60


def fuzz(quick, long, *strategies):
    """Two tests from one body: `quick` examples in the default run,
    `long` examples under -m slow."""
    def wrap(body):
        fast = settings(max_examples=quick, **_QUICK)(given(*strategies)(body))
        slow = pytest.mark.slow(settings(max_examples=long, **_LONG)(given(*strategies)(body)))
        return fast, slow
    return wrap


def _peak_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024


@pytest.fixture(autouse=True)
def _bounded_memory():
    before = _peak_mib()
    yield
    assert _peak_mib() - before < PEAK_GROWTH_MIB, "fuzz input drove memory up by gigabytes"


class Hang(Exception):
    pass


def _alarm(signum, frame):
    raise Hang(f"no answer in {CALL_TIMEOUT_S} s")


def run_tool(name, args, stdin=None):
    """Run a tool in-process as its command line does; return (exit code,
    stdout bytes, stderr). A TpuperfError is the one-line error the CLI
    prints; any other exception propagates (a traceback: a bug)."""
    before = _peak_mib()
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(CALL_TIMEOUT_S)
    try:
        res = CliRunner().invoke(load_command(name), args, input=stdin)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    exc = res.exception
    code = res.exit_code
    if isinstance(exc, TpuperfError):
        message = str(exc)
        assert message and "\n" not in message, f"{name}: error is not one line: {message!r}"
        code = exc.exit_code
    elif exc is not None and not isinstance(exc, SystemExit):
        raise exc
    assert code in (0, 1, 2), (name, code, res.stderr)
    assert "Traceback" not in res.stderr
    assert _peak_mib() - before < CALL_PEAK_GROWTH_MIB, f"{name}: memory grew by a gigabyte"
    return code, res.stdout_bytes, res.stderr


# ---------------------------------------------------------------- mutations

@st.composite
def mutated_bytes(draw, data: bytes, max_ops: int = 4):
    """data with 1..max_ops byte-level edits: flips, sets, cuts, inserts, duplicated slices."""
    data = bytearray(data)
    for _ in range(draw(st.integers(1, max_ops))):
        if not data:
            break
        i = draw(st.integers(0, len(data) - 1))
        op = draw(st.sampled_from(["flip", "set", "delete", "insert", "truncate", "dup"]))
        if op == "flip":
            data[i] ^= 1 << draw(st.integers(0, 7))
        elif op == "set":
            data[i] = draw(st.sampled_from([0x00, 0xff, 0xc1, 0xdd, 0xdf, 0xc6, 0xdb, 0x7f, 0x80]))
        elif op == "delete":
            del data[i:i + draw(st.integers(1, 64))]
        elif op == "insert":
            data[i:i] = draw(st.binary(min_size=1, max_size=16))
        elif op == "truncate":
            del data[i:]
        else:
            data[i:i] = data[i:i + draw(st.integers(1, 256))]
    return bytes(data)


_TOKENS = ["{", "}", "(", ")", "[", "]", ",", "=", "%", ":", "->", "ROOT", "ENTRY", "HloModule",
           "fusion", "parameter(0)", "f32[]", "bf16[99999999999999,3]", "s32[-1]", "pred[]",
           "calls=%nope", "kind=kLoop", "/*", "*/", '"', "\\", "\n", "\x00", "é", "0x", "1e999",
           "tuple()", "get-tuple-element", "index=99", "while(", "condition=", "body=", "{1,0}",
           "T(8,128)", "metadata={", "dimensions={", "-1", "18446744073709551616"]


@st.composite
def mutated_hlo(draw):
    """A real program with a few textual edits: lines dropped, doubled or
    swapped, tokens inserted, numbers replaced, the text cut."""
    text = draw(st.sampled_from(TEXTS))
    lines = text.split("\n")
    for _ in range(draw(st.integers(1, 4))):
        if not lines:
            break
        i = draw(st.integers(0, len(lines) - 1))
        op = draw(st.sampled_from(["drop", "dup", "swap", "token", "number", "cut", "chars"]))
        if op == "drop":
            del lines[i]
        elif op == "dup":
            lines.insert(i, lines[i])
        elif op == "swap":
            j = draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
        elif op == "token":
            pos = draw(st.integers(0, len(lines[i])))
            lines[i] = lines[i][:pos] + draw(st.sampled_from(_TOKENS)) + lines[i][pos:]
        elif op == "number":
            digits = [k for k, c in enumerate(lines[i]) if c.isdigit()]
            if digits:
                k = draw(st.sampled_from(digits))
                lines[i] = lines[i][:k] + str(draw(st.sampled_from(
                    [0, -1, 2**31, 2**63, 10**30, 7]))) + lines[i][k + 1:]
        elif op == "cut":
            lines = lines[:i] + [lines[i][:draw(st.integers(0, len(lines[i])))]]
        else:
            pos = draw(st.integers(0, len(lines[i])))
            lines[i] = lines[i][:pos] + draw(st.text(max_size=8)) + lines[i][pos:]
    return "\n".join(lines)


def _value():
    """Any msgpack value a hostile record might hold in a field."""
    scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**63), 2**64 - 1),
                        st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12),
                        st.binary(max_size=24))
    return st.recursive(scalars, lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)),
        max_leaves=8)


@st.composite
def lying_array(draw, value):
    """An array map with its dtype, shape or data changed."""
    value = dict(value)
    part = draw(st.sampled_from(["dtype", "shape", "data", "drop"]))
    if part == "dtype":
        value["dtype"] = draw(st.one_of(
            st.sampled_from(["<f8", "|b1", "<i2", "|O", "V8", "<U4", "M8", "<f4,<f4", "", "zz", "<c16"]),
            _value()))
    elif part == "shape":
        value["shape"] = draw(st.one_of(
            st.lists(st.integers(-3, 2**40), max_size=4),
            st.just([2**31, 2**31]), st.just([0]), _value()))
    elif part == "data":
        data = value.get("data", b"")
        value["data"] = draw(st.one_of(st.just(data[:-1] if data else b"x"), st.just(data + b"\0" * 4),
                                       st.binary(max_size=64), _value()))
    else:
        del value[draw(st.sampled_from(sorted(value)))]
    return value


@st.composite
def mutated_records(draw, records):
    """Records with 1..3 fields dropped or replaced (by any value, another
    field's value, or for array maps a lying array)."""
    records = [dict(r) for r in records]
    for _ in range(draw(st.integers(1, 3))):
        r = records[draw(st.integers(0, len(records) - 1))]
        if not r:
            continue
        key = draw(st.sampled_from(sorted(r)))
        op = draw(st.sampled_from(["drop", "null", "value", "other", "array"]))
        if op == "drop":
            del r[key]
        elif op == "null":
            r[key] = None
        elif op == "value":
            r[key] = draw(_value())
        elif op == "other":
            r[key] = r[draw(st.sampled_from(sorted(r)))]
        else:
            arrays = [k for k in sorted(r) if is_array(r[k])]
            if arrays:
                k = draw(st.sampled_from(arrays))
                r[k] = draw(lying_array(r[k]))
            else:
                r[key] = draw(_value())
    return records


# ---------------------------------------------------------------- inputs made once

@pytest.fixture(scope="module")
def pipeline(tmp_path_factory):
    """Kernel, graph and predicted streams of a small real program, made by
    the tools themselves; graph records get stand-in runtimes for eval and
    train."""
    tmp = tmp_path_factory.mktemp("fuzz")
    module = parse_module(TEXTS[1], str(HLO_FILES[1]))
    kernels = list(kernel_records(module, program="gpu_style"))
    code, graphs, err = run_tool("featurize", [], stream_bytes(kernels))
    assert code == 0, err
    graph_records = list(read_records(io.BytesIO(graphs)))
    for i, r in enumerate(graph_records):
        r["runtime_ns"] = 1000.0 * (i + 1)
    code, predicted, err = run_tool("predict", [], stream_bytes(graph_records))
    assert code == 0, err
    return {"tmp": tmp, "kernels": kernels, "graphs": graph_records,
            "predicted": list(read_records(io.BytesIO(predicted)))}


# ---------------------------------------------------------------- the parser

def _parse(text):
    try:
        module = parse_module(text, "fuzz.hlo")
        list(kernel_records(module, program="fuzz"))
    except TpuperfError as e:
        assert "\n" not in str(e)


@fuzz(150, 2000, mutated_hlo())
def _fuzz_parser(text):
    _parse(text)


test_parser_on_mutated_programs, test_parser_on_mutated_programs_long = _fuzz_parser


@fuzz(60, 600, st.sampled_from(TEXTS).flatmap(lambda t: mutated_bytes(t.encode(), 6)))
def _fuzz_parser_bytes(data):
    _parse(data.decode("utf-8", errors="replace"))


test_parser_on_mutated_bytes, test_parser_on_mutated_bytes_long = _fuzz_parser_bytes


# ---------------------------------------------------------------- stream readers

def _read(data):
    try:
        for r in read_records(io.BytesIO(data), name="fuzz.msgpack"):
            assert isinstance(r, dict)
    except TpuperfError as e:
        assert "\n" not in str(e)


@st.composite
def damaged_stream(draw, compress):
    records = [dict(r, i=i) for i, r in enumerate(
        [{"a": 1, "b": "x" * 40, "c": [1, 2.5, None]}, {"arr": {"dtype": "<f4", "shape": [2, 2],
                                                                 "data": b"\0" * 16}}] * 3)]
    return draw(mutated_bytes(stream_bytes(records, compress), 6))


@fuzz(60, 600, st.booleans().flatmap(damaged_stream))
def _fuzz_stream(data):
    _read(data)


test_stream_reader_on_damaged_streams, test_stream_reader_on_damaged_streams_long = _fuzz_stream


@fuzz(40, 400, st.binary(max_size=64).map(lambda tail: bytes([0xdd, 0xdf, 0xdb, 0xc6])[len(tail) % 4:len(tail) % 4 + 1] + tail))
def _fuzz_headers(data):
    # a record that starts with a container or string header and whatever follows
    _read(stream_bytes([{"ok": 1}]) + data)


test_stream_reader_on_hostile_headers, test_stream_reader_on_hostile_headers_long = _fuzz_headers


@fuzz(60, 600, lying_array({"dtype": "<f4", "shape": [2, 3], "data": b"\0" * 24}))
def _fuzz_arrays(value):
    try:
        a = decode_array(value, "feat")
    except TpuperfError as e:
        assert "\n" not in str(e)
    else:
        # accepted only when the map tells the truth
        assert a.nbytes == len(value["data"]) and list(a.shape) == list(value["shape"])


test_arrays_that_lie, test_arrays_that_lie_long = _fuzz_arrays


# ---------------------------------------------------------------- every tool

def _tool_on(name, args, records=None, data=None, tmp=None):
    data = stream_bytes(records) if data is None else data
    with tempfile.TemporaryDirectory(dir=tmp) as d:
        path = pathlib.Path(d) / "in.msgpack"
        path.write_bytes(data)
        run_tool(name, [a.replace("{in}", str(path)).replace("{dir}", d) for a in args])


def _hlo_split(text, tmp):
    with tempfile.TemporaryDirectory(dir=tmp) as d:
        path = pathlib.Path(d) / "p.hlo"
        path.write_text(text, errors="replace")
        code, out, _ = run_tool("hlo-split", [str(path)])
        if code == 0:
            for r in read_records(io.BytesIO(out)):
                assert "hlo" in r


@fuzz(30, 300, mutated_hlo())
def _fuzz_hlo_split(pipeline, text):
    _hlo_split(text, pipeline["tmp"])


test_hlo_split_on_mutated_programs, test_hlo_split_on_mutated_programs_long = _fuzz_hlo_split


# (tool, its arguments, which stream it reads)
TOOLS = [
    ("featurize", ["{in}"], "kernels"),
    ("featurize", ["--skip-bad", "{in}"], "kernels"),
    ("predict", ["{in}"], "graphs"),
    ("score", ["--format", "json", "{in}"], "predicted"),
    ("score", ["--top", "3", "--format", "table", "{in}"], "predicted"),
    ("eval", ["--data", "{in}", "--format", "json", "--quiet"], "graphs"),
    ("eval", ["--data", "{in}", "--predicted", "--no-baseline", "--quiet"], "predicted"),
    ("train", ["--data", "{in}", "-o", "{dir}/m.pt", "--epochs", "1", "--hidden", "8",
               "--layers", "1", "--opcode-dim", "4", "--batch-size", "4"], "graphs"),
    ("baseline", ["fit", "--data", "{in}", "-o", "{dir}/b.json", "--min-kernels", "1"], "graphs"),
    ("select", ["--by", "pred_ns", "--top", "2", "{in}", "-o", "{dir}/s.msgpack"], "predicted"),
    ("split", ["records", "--by", "kernel", "--test", "0.5", "{in}", "-o", "{dir}/s-{}.msgpack"],
     "graphs"),
]


def _tool_case(pipeline, tool, how, data):
    name, args, stream = TOOLS[tool]
    if how == "records":
        records = data
        _tool_on(name, args, records=records, tmp=pipeline["tmp"])
    else:
        _tool_on(name, args, data=data, tmp=pipeline["tmp"])


@st.composite
def tool_case(draw, pipeline):
    tool = draw(st.integers(0, len(TOOLS) - 1))
    records = pipeline[TOOLS[tool][2]]
    if draw(st.booleans()):
        return tool, "records", draw(mutated_records(records))
    return tool, "bytes", draw(mutated_bytes(stream_bytes(records, draw(st.booleans())), 4))


def _fuzz_tools_body(pipeline, data):
    case = data.draw(tool_case(pipeline))
    _tool_case(pipeline, *case)


test_tools_on_mutated_input = settings(max_examples=60, **_QUICK)(
    given(data=st.data())(_fuzz_tools_body))
test_tools_on_mutated_input_long = pytest.mark.slow(settings(max_examples=600, **_LONG)(
    given(data=st.data())(_fuzz_tools_body)))


# measure compiles and times what it is given: a handful of tiny kernels
ADD_HLO = """HloModule add, entry_computation_layout={(f32[8]{0}, f32[8]{0})->f32[8]{0}}

ENTRY %main (a: f32[8], b: f32[8]) -> f32[8] {
  %a = f32[8]{0} parameter(0)
  %b = f32[8]{0} parameter(1)
  ROOT %add = f32[8]{0} add(%a, %b)
}
"""


def _measure_body(pipeline, data):
    records = [{"v": 1, "type": "kernel", "program": "t", "kernel": f"k{i}", "index": i, "count": 1,
                "hlo": ADD_HLO, "opcode": "add", "computation": "main"} for i in range(2)]
    if data.draw(st.booleans()):
        records = data.draw(mutated_records(records))
        raw = stream_bytes(records)
    else:
        raw = data.draw(mutated_bytes(stream_bytes(records), 4))
    _tool_on("measure", ["--backend", "cpu", "--no-cache", "--samples", "1", "--min-time", "0.1ms",
                         "--timeout", "30", "--quiet", "{in}"], data=raw, tmp=pipeline["tmp"])


test_measure_on_mutated_input = settings(max_examples=5, **_QUICK)(
    given(data=st.data())(_measure_body))
test_measure_on_mutated_input_long = pytest.mark.slow(settings(max_examples=100, **_LONG)(
    given(data=st.data())(_measure_body)))



# ---------------------------------------------------------------- tuning JSON

SAMPLE = ROOT / "examples" / "tile" / "tpu_tile_sample.json"


def _json_value():
    scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70),
                        st.floats(allow_nan=False), st.text(max_size=12))
    return st.recursive(scalars, lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)),
        max_leaves=6)


@st.composite
def mutated_tuning(draw):
    """The sample's first kernel (a few configs) with values replaced or
    keys dropped, at the kernel, config or tile level."""
    import json

    kernel = json.loads(SAMPLE.read_text())[0]
    kernel["configs"] = kernel["configs"][:4]
    for _ in range(draw(st.integers(1, 3))):
        level = draw(st.sampled_from(["kernel", "config", "tile"]))
        config = kernel["configs"][draw(st.integers(0, 3))] if isinstance(kernel.get("configs"), list) \
            and len(kernel["configs"]) == 4 else None
        target = kernel if level == "kernel" or config is None else (
            config if level == "config" or not isinstance(config.get("tile"), dict) else config["tile"])
        if not isinstance(target, dict) or not target:
            continue
        key = draw(st.sampled_from(sorted(target)))
        if draw(st.booleans()):
            del target[key]
        else:
            target[key] = draw(_json_value())
    return json.dumps([kernel])


@fuzz(25, 250, mutated_tuning())
def _fuzz_tuning(pipeline, text):
    with tempfile.TemporaryDirectory(dir=pipeline["tmp"]) as d:
        path = pathlib.Path(d) / "t.json"
        path.write_text(text)
        code, out, _ = run_tool("import", ["tuning-json", str(path)])
        if code == 0:
            for r in read_records(io.BytesIO(out)):
                assert r["runtime_ns"] > 0


test_import_tuning_json_on_mutated_files, test_import_tuning_json_on_mutated_files_long = _fuzz_tuning


# ---------------------------------------------------------------- a systematic sweep

HOSTILE = [None, "", "x\ny", -1, 0, 2**64 - 1, -(2**63), float("nan"), float("inf"), 1.5, True, [],
           [1, "a"], {}, {"a": None}, b"", b"\xff" * 7]

# what the sweep found (all fixed; each fails on the code before): (tool, field, value)
FOUND = [
    ("score", "model", b""),              # bytes in json output
    ("eval", "pred_ns", None),            # float(None) under --predicted
    ("eval", "pred_ns", ""),
    ("baseline", "kernel_feat", ""),      # np.asarray of a string
    ("baseline", "kernel_feat", {}),
    ("baseline", "program", []),          # unhashable names
    ("select", "kernel", []),
    ("split", "kernel", []),
    ("predict", "node_feat", None),       # found by the random fuzz: null graph arrays
]


def _sweep_case(pipeline, t, key, value):
    name, args, stream = TOOLS[t]
    records = [dict(r) for r in pipeline[stream]]
    records[0][key] = value
    _tool_case(pipeline, t, "records", records)


@pytest.mark.parametrize("tool, key, value", FOUND, ids=[f"{t}-{k}-{v!r}" for t, k, v in FOUND])
def test_what_the_fuzz_found_stays_fixed(pipeline, tool, key, value):
    t = next(i for i, (name, args, _) in enumerate(TOOLS) if name == tool
             and (tool != "eval" or ("--predicted" in args) == (key == "pred_ns")))
    _sweep_case(pipeline, t, key, value)


@pytest.mark.slow
def test_every_field_of_every_tool_set_to_hostile_values(pipeline):
    # every field of the first record, set to each hostile value, for every
    # tool but train (a few seconds a run): about 3,000 runs, a few minutes
    for t, (name, _, stream) in enumerate(TOOLS):
        if name == "train":
            continue
        for key in sorted(set().union(*map(set, pipeline[stream]))):
            for value in HOSTILE:
                _sweep_case(pipeline, t, key, value)
