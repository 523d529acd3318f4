"""measure --clock events: kernel time read off the profiler's events.

The GPU path's logic on made-up profiles (an XSpace written here, with a
GPU's planes and a clock the test sets), and the whole path on CPU, where
XLA:CPU's thunks are the traced events."""

import io
import subprocess
import sys

from tpuperf_cli.measure.events import Event, Line, Plane, call_samples, read_xspace, split_calls
from tpuperf_cli.stream import read_records

MEASURE = [sys.executable, "-m", "tpuperf_cli", "measure"]


# ------------------------------------------------------ a protobuf writer
def varint(v):
    v &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def field(number, value):
    if isinstance(value, int):
        return varint(number << 3) + varint(value)
    data = value.encode() if isinstance(value, str) else value
    return varint(number << 3 | 2) + varint(len(data)) + data


def xspace(planes):
    """planes: [(name, {metadata id: event name}, [(line name, stamp ns,
    [(metadata id, offset ps, duration ps)])])] -> XSpace bytes."""
    out = b""
    for name, metadata, lines in planes:
        plane = field(2, name)
        for line_name, stamp, events in lines:
            line = field(2, line_name) + field(3, stamp)
            for meta, offset, duration in events:
                line += field(4, field(1, meta) + field(2, offset) + field(3, duration))
            plane += field(3, line)
        for key, event_name in metadata.items():
            plane += field(4, field(1, key) + field(2, field(1, key) + field(2, event_name)))
        out += field(1, plane)
    return out


def gpu_profile(kernel_ns, calls, gap_ns=40_000, launches=2, stream="Stream #13(Compute)"):
    """A host annotation per kernel and, on a GPU stream, each call's
    `launches` kernels back to back (1 us apart), calls gap_ns apart."""
    host, device, t = [], [], 1_000_000
    for key, ns in kernel_ns.items():
        start = t
        for _ in range(calls):
            for _ in range(launches):
                device.append((10, (t - 1_000_000) * 1000, int(ns / launches * 1000)))
                t += ns // launches + 1_000
            t += gap_ns
        host.append((100 + int(key), (start - 1_000_000 - 500) * 1000, (t - start) * 1000))
    return xspace([
        ("/host:CPU", {100 + int(k): f"tpuperf:{k}" for k in kernel_ns},
         [("python", 1_000_000, host)]),
        ("/device:GPU:0", {10: "loop_add_fusion"},
         [(stream, 1_000_000, device), ("XLA Ops", 1_000_000, [])]),
    ])


def test_an_xspace_reads_back_as_written():
    planes = read_xspace(gpu_profile({"0": 5000}, calls=3))
    assert [p.name for p in planes] == ["/host:CPU", "/device:GPU:0"]
    stream = planes[1].lines[0]
    assert stream.name == "Stream #13(Compute)" and len(stream.events) == 6
    assert stream.events[0].name == "loop_add_fusion"
    assert stream.events[0].start_ns == 1_000_000 and stream.events[0].duration_ns == 2500
    assert planes[0].lines[0].events[0].name == "tpuperf:0"


def test_each_call_is_the_device_time_of_its_kernels():
    got = call_samples(read_xspace(gpu_profile({"0": 5000, "1": 120_000}, calls=4)),
                       "gpu", ["0", "1", "2"], calls=4)
    assert got["0"] == [5000.0] * 4
    assert got["1"] == [120_000.0] * 4
    assert "missing" in got["2"]
    # a profile that lost the kernels says so rather than timing nothing
    empty = xspace([("/host:CPU", {100: "tpuperf:0"}, [("python", 0, [(100, 0, 10**9)])])])
    assert "0 device event(s)" in call_samples(read_xspace(empty), "gpu", ["0"], 4)["0"]


def test_calls_split_at_the_widest_gaps():
    ev = [Event("k", s, d) for s, d in [(0, 10), (11, 10), (500, 10), (511, 10), (900, 5)]]
    assert [len(g) for g in split_calls(ev, 3)] == [2, 2, 1]
    assert split_calls(ev, 6) == []
    # an event that overlaps the next one's start leaves no gap there
    over = [Event("k", 0, 100), Event("k", 50, 10), Event("k", 300, 10)]
    assert [len(g) for g in split_calls(over, 2)] == [2, 1]


def test_cpu_thunk_names_pick_the_kernel_events():
    host = Plane("/host:CPU", [Line("python", [Event("tpuperf:0", 0, 1000),
                                               Event("PjitFunction(f)", 10, 900),
                                               Event("add.1", 100, 50),
                                               Event("add.1", 600, 60)])])
    got = call_samples([host], "cpu", ["0"], 2, names={"0": {"add.1"}})
    assert got["0"] == [50.0, 60.0]


def matmul(n):
    return (f"HloModule m\n\nENTRY %main (a: f32[{n},{n}], b: f32[{n},{n}]) -> f32[{n},{n}] {{\n"
            f"  %a = f32[{n},{n}]{{1,0}} parameter(0)\n  %b = f32[{n},{n}]{{1,0}} parameter(1)\n"
            f"  ROOT %d = f32[{n},{n}]{{1,0}} dot(%a, %b), lhs_contracting_dims={{1}}, "
            f"rhs_contracting_dims={{0}}\n}}\n")


def test_measure_times_kernels_by_their_events_on_cpu():
    from tpuperf_cli.records import new_record
    from tpuperf_cli.stream import RecordWriter

    buf = io.BytesIO()
    with RecordWriter(buf) as w:
        for k, n in enumerate((32, 256)):
            w.write(new_record("kernel", program="t", kernel=f"dot{n}", index=k, count=1,
                               count_known=True, hlo=matmul(n), opcode="dot", computation="main"))
    p = subprocess.run(MEASURE + ["--backend", "cpu", "--clock", "events", "--samples", "5",
                                  "--no-cache", "--compile-jobs", "0"],
                       input=buf.getvalue(), capture_output=True, timeout=300)
    assert p.returncode == 0, p.stderr.decode()
    small, large = list(read_records(io.BytesIO(p.stdout)))
    assert small["target"]["clock"] == large["target"]["clock"] == "events"
    assert len(large["runs"]) == 5
    # 512x the flops: the events see the work grow
    assert large["runtime_ns"] > 20 * small["runtime_ns"] > 0, (small, large)


def test_a_gpu_plane_without_stream_lines_keeps_its_kernel_lines():
    # another profiler's naming: no "Stream" lines; the derived summary
    # lines ("XLA Ops") still do not count twice
    data = gpu_profile({"0": 5000}, calls=3, stream="Compute queue 7")
    assert call_samples(read_xspace(data), "gpu", ["0"], calls=3)["0"] == [5000.0] * 3


def test_missing_device_events_name_the_profiles_lines():
    empty = xspace([("/host:CPU", {100: "tpuperf:0"}, [("python", 0, [(100, 0, 10**9)])]),
                    ("/device:GPU:0", {}, [("Stream #7(Compute)", 0, [])])])
    why = call_samples(read_xspace(empty), "gpu", ["0"], 4)["0"]
    assert "/device:GPU:0 [Stream #7(Compute): 0]" in why and "python: 1" in why
