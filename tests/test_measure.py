"""measure: timing kernels on CPU through XLA, errors, cache, stream."""

import io
import os
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

from tpuperf_cli.records import new_record
from tpuperf_cli.stream import read_records

from conftest import stream_bytes

MEASURE = [sys.executable, "-m", "tpuperf_cli", "measure"]


def matmul_hlo(n):
    """An optimized XLA:CPU module: one n x n f32 matmul."""
    return f"""HloModule mm{n}, entry_computation_layout={{(f32[{n},{n}]{{1,0}}, f32[{n},{n}]{{1,0}})->f32[{n},{n}]{{1,0}}}}

ENTRY %main (a: f32[{n},{n}], b: f32[{n},{n}]) -> f32[{n},{n}] {{
  %a = f32[{n},{n}]{{1,0}} parameter(0)
  %b = f32[{n},{n}]{{1,0}} parameter(1)
  ROOT %dot = f32[{n},{n}]{{1,0}} dot(%a, %b), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}, metadata={{op_name="jit(f)/dot_general"}}
}}
"""


FUSION = """HloModule fused, is_scheduled=true

%fused_computation (p0: f32[128,256], p1: f32[256]) -> f32[128,256] {
  %p0 = f32[128,256]{1,0} parameter(0)
  %p1 = f32[256]{0} parameter(1)
  %b = f32[128,256]{1,0} broadcast(%p1), dimensions={1}
  %m = f32[128,256]{1,0} multiply(%p0, %b)
  ROOT %t = f32[128,256]{1,0} tanh(%m)
}

ENTRY %main (x: f32[128,256], y: f32[256]) -> f32[128,256] {
  %x = f32[128,256]{1,0} parameter(0)
  %y = f32[256]{0} parameter(1)
  ROOT %fusion = f32[128,256]{1,0} fusion(%x, %y), kind=kLoop, calls=%fused_computation
}
"""

# every element type a kernel commonly takes, one parameter each
DTYPES = """HloModule dtypes

ENTRY %main (a: bf16[16,16], b: f16[16], c: f32[8], d: s32[3], e: pred[5], f: u8[7], g: s64[2], h: c64[2], i: f64[3], j: s8[4], k: u32[2]) -> (bf16[16,16], f16[16], f32[8], s32[3], pred[5], u8[7], s64[2], c64[2], f64[3], s8[4], u32[2]) {
  %a = bf16[16,16]{1,0} parameter(0)
  %b = f16[16]{0} parameter(1)
  %c = f32[8]{0} parameter(2)
  %d = s32[3]{0} parameter(3)
  %e = pred[5]{0} parameter(4)
  %f = u8[7]{0} parameter(5)
  %g = s64[2]{0} parameter(6)
  %h = c64[2]{0} parameter(7)
  %i = f64[3]{0} parameter(8)
  %j = s8[4]{0} parameter(9)
  %k = u32[2]{0} parameter(10)
  %a2 = bf16[16,16]{1,0} add(%a, %a)
  %b2 = f16[16]{0} multiply(%b, %b)
  %c2 = f32[8]{0} log(%c)
  ROOT %t = (bf16[16,16], f16[16], f32[8], s32[3], pred[5], u8[7], s64[2], c64[2], f64[3], s8[4], u32[2]) tuple(%a2, %b2, %c2, %d, %e, %f, %g, %h, %i, %j, %k)
}
"""

# sub-byte and 8-bit float types (quantized kernels)
NARROW_DTYPES = """HloModule narrow

ENTRY %main (a: s4[8], b: u4[8], c: f8e4m3fn[8], d: f8e5m2[8]) -> (s8[8], u8[8], f32[8], f32[8]) {
  %a = s4[8]{0} parameter(0)
  %b = u4[8]{0} parameter(1)
  %c = f8e4m3fn[8]{0} parameter(2)
  %d = f8e5m2[8]{0} parameter(3)
  %a2 = s8[8]{0} convert(%a)
  %b2 = u8[8]{0} convert(%b)
  %c2 = f32[8]{0} convert(%c)
  %d2 = f32[8]{0} convert(%d)
  ROOT %t = (s8[8], u8[8], f32[8], f32[8]) tuple(%a2, %b2, %c2, %d2)
}
"""

# integer operands that index: they must stay in bounds
INDEXING = """HloModule indexing

%add (x: f32[], y: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %s = f32[] add(%x, %y)
}

ENTRY %main (op: f32[64,32], idx: s32[10,1], i: s32[], upd: f32[10,32]) -> (f32[10,32], f32[8,32], f32[64,32], f32[64,32]) {
  %op = f32[64,32]{1,0} parameter(0)
  %idx = s32[10,1]{1,0} parameter(1)
  %i = s32[] parameter(2)
  %upd = f32[10,32]{1,0} parameter(3)
  %g = f32[10,32]{1,0} gather(%op, %idx), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=1, slice_sizes={1,32}
  %z = s32[] constant(0)
  %ds = f32[8,32]{1,0} dynamic-slice(%op, %i, %z), dynamic_slice_sizes={8,32}
  %dus = f32[64,32]{1,0} dynamic-update-slice(%op, %ds, %i, %z)
  %sc = f32[64,32]{1,0} scatter(%op, %idx, %upd), update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=%add
  ROOT %t = (f32[10,32], f32[8,32], f32[64,32], f32[64,32]) tuple(%g, %ds, %dus, %sc)
}
"""

CUSTOM_CALL = """HloModule cc

ENTRY %main (p: f32[4]) -> f32[4] {
  %p = f32[4]{0} parameter(0)
  ROOT %c = f32[4]{0} custom-call(%p), custom_call_target="tpuperf_no_such_target"
}
"""

ALL_REDUCE = """HloModule ar

%add (x: f32[], y: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %s = f32[] add(%x, %y)
}

ENTRY %main (p: f32[1024]) -> f32[1024] {
  %p = f32[1024]{0} parameter(0)
  ROOT %ar = f32[1024]{0} all-reduce(%p), replica_groups={{0,1,2,3}}, to_apply=%add
}
"""

TUPLE_PARAM = """HloModule tp

ENTRY %main (p: (f32[4], s32[])) -> f32[4] {
  %p = (f32[4]{0}, s32[]) parameter(0)
  ROOT %g = f32[4]{0} get-tuple-element(%p), index=0
}
"""

# a fusion that is not the only instruction of the ENTRY: compiled as is,
# XLA:CPU aborts on the imported mhlo.fusion (a failed CHECK kills the process)
NESTED = """HloModule crash

%fc (p: s32[128]) -> s32[128,1,2] {
  %p = s32[128]{0} parameter(0)
  %r = s32[128,1,1]{2,1,0} reshape(%p)
  %n = s32[128,1,1]{2,1,0} negate(%r)
  ROOT %c = s32[128,1,2]{2,1,0} concatenate(%n, %r), dimensions={2}
}

ENTRY %main (arg.0: s32[128]) -> s32[128,1,2] {
  %arg.0 = s32[128]{0} parameter(0)
  %f = s32[128,1,2]{2,1,0} fusion(%arg.0), kind=kLoop, calls=%fc
  ROOT %n2 = s32[128,1,2]{2,1,0} negate(%f)
}
"""

# the measuring child aborts on this text, as XLA does on a failed CHECK
# (which texts XLA aborts on changes with its releases)
CRASH = NESTED.replace("crash", "abort_here")

# never ends: a while loop whose condition is constant true
FOREVER = """HloModule forever

%cond (c: s32[]) -> pred[] {
  %c = s32[] parameter(0)
  ROOT %t = pred[] constant(true)
}

%body (b: s32[]) -> s32[] {
  %b = s32[] parameter(0)
  %one = s32[] constant(1)
  ROOT %s = s32[] add(%b, %one)
}

ENTRY %main (x: s32[]) -> s32[] {
  %x = s32[] parameter(0)
  ROOT %w = s32[] while(%x), condition=%cond, body=%body
}
"""


@pytest.fixture(scope="module")
def measurer():
    from tpuperf_cli.measure.device import Measurer

    # 2 ms samples: this test process is unpinned and times with the wall
    # clock, and on a noisy host a hiccup in a call's fixed cost made a
    # small kernel "untimed" with 0.5 ms ones
    return Measurer("cpu", samples=5, min_time=0.002)


def kernel(name, hlo, index=0, **extra):
    return new_record("kernel", program="t", kernel=name, index=index, count=1,
                      count_known=True, hlo=hlo, opcode="fusion", fusion_kind="kLoop",
                      computation="main", **extra)




def run_measure(args, data, tmp_path, check=True):
    p = subprocess.run(MEASURE + ["--backend", "cpu", "--min-time", "0.3ms"] + args,
                       input=data, capture_output=True, cwd=tmp_path,
                       env={**os.environ, "XDG_CACHE_HOME": str(tmp_path / "xdg")})
    if check:
        assert p.returncode == 0, p.stderr.decode()
    return p


def records_of(data):
    return list(read_records(io.BytesIO(data)))


# ------------------------------------------------------------------ library

def test_target_describes_the_machine(measurer):
    t = measurer.target
    assert t["platform"] == "cpu"
    assert t["jax"] == "0.6.2" and t["jaxlib"] == "0.6.2"
    assert t["chip"] and t["device_kind"]
    assert t["method"] >= 3 and t["clock"] in ("process", "wall")
    assert len(measurer.key) == 16


def test_matmul_runtimes_positive_and_ordered(measurer):
    import statistics

    small = measurer.measure(matmul_hlo(64))
    big = measurer.measure(matmul_hlo(1024))
    for m in (small, big):
        assert m.runtime_ns > 0 and len(m.samples) >= 2 and m.noise >= 0
        assert min(m.samples) <= m.runtime_ns <= statistics.median(m.samples)
    # 4096x the flops: far slower, whatever the noise on a shared machine
    assert big.runtime_ns > 20 * small.runtime_ns


def test_fusion_kernel_runs(measurer):
    m = measurer.measure(FUSION)
    assert m.runtime_ns > 0 and min(m.samples) <= m.runtime_ns <= max(m.samples)


@pytest.mark.parametrize("hlo", [DTYPES, NARROW_DTYPES], ids=["common", "narrow"])
def test_every_dtype_gets_inputs(measurer, hlo):
    assert measurer.measure(hlo).runtime_ns > 0


def test_integer_inputs_keep_indexing_in_bounds(measurer):
    import numpy as np

    from tpuperf_cli.measure.device import Measurer

    exe, params = measurer.compile(INDEXING)
    args = measurer.inputs(params[:-1])
    # one trip of the timing loop computes the kernel once
    out = exe.execute(args + [measurer.client.buffer_from_pyval(np.int32(1), measurer.device)])
    g, ds, dus, sc = [o.__array__() for o in out]
    import numpy as np

    op = np.asarray(args[0])
    # index 0 everywhere: gather reads row 0, the slice starts at row 0
    assert np.array_equal(g, np.repeat(op[:1], 10, axis=0))
    assert np.array_equal(ds, op[:8])
    # all 10 scatter updates land (none skipped as out of bounds)
    upd = np.asarray(args[3])
    assert np.allclose(sc[0], op[0] + upd.sum(axis=0), rtol=1e-5)
    assert isinstance(measurer, Measurer) and measurer.measure(INDEXING).runtime_ns > 0


def test_float_inputs_positive_and_finite(measurer):
    import numpy as np

    _, params = measurer.compile(FUSION)
    x = np.asarray(measurer.inputs(params[:-1])[0])
    assert x.min() >= 0.5 and x.max() < 1.5


@pytest.mark.parametrize("hlo, kind, words", [
    (CUSTOM_CALL, "compile", "tpuperf_no_such_target"),
    (ALL_REDUCE, "collective", "all-reduce"),
    (TUPLE_PARAM, "unsupported", "tuple"),
    ("HloModule broken\n\nENTRY %e {\n  %p = f32[ parameter(0)\n}\n", "parse", "parse"),
])
def test_kernels_that_cannot_run_raise(measurer, hlo, kind, words):
    from tpuperf_cli.measure.device import MeasureError

    with pytest.raises(MeasureError) as e:
        measurer.measure(hlo)
    assert e.value.kind == kind
    assert words in str(e.value)


def test_fusions_left_in_the_entry_are_inlined(measurer):
    from tpuperf_cli.hlo.compilable import compilable_module

    out = compilable_module(NESTED)
    assert "fusion(" not in out
    # the fused root takes the fusion's name, so its user still finds it
    assert "%f = s32[128,1,2]{2,1,0} concatenate(%n.f, %r.f)" in out
    assert "ROOT %n2 = s32[128,1,2]{2,1,0} negate(%f)" in out
    assert measurer.measure(NESTED).runtime_ns > 0


def test_batch_measures_each_kernel_and_keeps_errors_in_place(measurer):
    from tpuperf_cli.measure.device import MeasureError

    out = measurer.measure_many([matmul_hlo(32), CUSTOM_CALL, FUSION])
    assert out[0].runtime_ns > 0 and out[2].runtime_ns > 0
    assert isinstance(out[1], MeasureError) and out[1].kind == "compile"


def test_a_bundle_runs_only_the_kernel_whose_trip_count_is_set(measurer):
    """Kernels compiled together: each loop runs its own n trips, so a
    call with one kernel's n set and the others' 0 times that kernel alone
    (the others leave their zero-filled output slots untouched)."""
    import numpy as np

    from tpuperf_cli.hlo.compilable import bundle_module

    negate = ("HloModule a\n\nENTRY %main (p: f32[4]) -> f32[4] {\n"
              "  %p = f32[4]{0} parameter(0)\n  ROOT %n = f32[4]{0} negate(%p)\n}\n")
    looped = [measurer.looped(t, prefix=f"k{i}.", as_entry=False)
              for i, t in enumerate([negate, matmul_hlo(8)])]
    exe, params = measurer.compile_module(bundle_module(looped))
    assert [len(lk.params) for lk in looped] == [2, 3] and len(params) == 5
    x = measurer.client.buffer_from_pyval(np.full(4, 2.0, np.float32), measurer.device)
    a = measurer.client.buffer_from_pyval(np.ones((8, 8), np.float32), measurer.device)

    def run(n0, n1):
        n = [measurer.client.buffer_from_pyval(np.int32(v), measurer.device) for v in (n0, n1)]
        outs = exe.execute_sharded([x, n[0], a, a, n[1]], with_tokens=True)
        return [np.asarray(o[0]) for o in outs.disassemble_into_single_device_arrays()]

    first, second = run(3, 0)
    assert (first == -2.0).all() and (second == 0).all()
    first, second = run(0, 1)
    assert (first == 0).all() and (second == 8.0).all()


def test_bundled_kernels_get_their_own_results_and_errors():
    """Kernels measured in one bundle: a kernel that does not compile sends
    the bundle back to one-by-one compiles, and keeps its error in place."""
    from tpuperf_cli.measure.device import MeasureError, Measurer

    # samples of 2 ms: an unpinned test process times with the wall clock,
    # and a hiccup in a call's fixed cost must not make a kernel "untimed"
    m = Measurer("cpu", samples=5, min_time=0.002, bundle=16)
    compiled = []
    real = m.compile_module
    m.compile_module = lambda text: compiled.append(text.count("timing.main (")) or real(text)
    out = m.measure_many([matmul_hlo(64), matmul_hlo(192), FUSION])
    assert compiled == [3]  # one executable for the three
    assert all(o.runtime_ns > 0 for o in out), out
    assert out[1].runtime_ns > out[0].runtime_ns  # 27x the flops
    compiled.clear()
    out = m.measure_many([matmul_hlo(64), CUSTOM_CALL, FUSION])
    assert compiled == [3, 1, 1, 1]  # the bundle failed: one by one
    assert isinstance(out[1], MeasureError) and out[1].kind == "compile"
    assert out[0].runtime_ns > 0 and out[2].runtime_ns > 0


def test_samples_at_the_fixed_cost_are_an_error_not_a_zero(measurer):
    from tpuperf_cli.measure.device import MeasureError, _Timed

    timed = _Timed(measurer, None, [], [], [])
    timed.trips, timed.zero = 1, [1000.0]
    timed.samples = [(1000.0, True)] * 5 + [(1120.0, True)] * 10
    with pytest.raises(MeasureError) as e:
        timed.result()
    assert e.value.kind == "untimed"
    timed.samples = [(990.0, True)] * 3 + [(1120.0, True)] * 12
    assert timed.result().runtime_ns == 120.0


def test_the_runtime_is_the_fastest_sample_less_the_fastest_fixed_cost(measurer):
    """Interference only adds time, and on a shared host it comes as a slow
    regime most of the time: the fastest clean sample over the fastest call
    with no trips is the machine undisturbed (method 5)."""
    from tpuperf_cli.measure.device import _Timed

    timed = _Timed(measurer, None, [], [], [])
    timed.trips = 4
    timed.zero = [180.0, 100.0, 190.0, 175.0]     # one call in the fast regime
    # mostly the slow regime (1.8x), two fast samples, and one faster still
    # whose thread was switched out: dropped, it cannot be trusted
    timed.samples = ([(100.0 + 4 * 900.0, True)] * 10 + [(100.0 + 4 * 500.0, True)] * 2
                     + [(100.0 + 4 * 300.0, False)])
    m = timed.result()
    assert m.runtime_ns == 500.0 and m.dropped == 1 and len(m.samples) == 12
    assert sorted(m.samples)[-1] == 900.0
    # noise: how far the fastest sits below the 10th percentile (540 here,
    # interpolated between the second 500 and the first 900), not the
    # regimes' spread, which says nothing of how well the fastest is pinned
    assert m.noise == pytest.approx(540 / 500 - 1)


def test_noise_is_the_spread_for_the_lower_quartile_and_the_gap_for_the_fastest():
    from tpuperf_cli.measure.device import fastest, lower_quartile, summarize

    samples = [100.0, 101.0, 102.0, 180.0, 181.0, 182.0, 183.0, 184.0, 185.0, 186.0, 187.0]
    quartile = summarize(samples, estimate=lower_quartile)
    # 1.4826 * MAD / median: median 182, MAD 3
    assert quartile.noise == pytest.approx(1.4826 * 3 / 182)
    fast = summarize(samples, estimate=fastest)
    assert fast.runtime_ns == 100.0 and fast.noise == pytest.approx(0.01)   # q10: 101
    # a fastest alone, far below the rest: uncertain
    assert summarize([100.0] + [180.0] * 29, estimate=fastest).noise == pytest.approx(0.8)


def test_an_untimed_kernel_is_calibrated_and_sampled_once_more(measurer):
    """A fixed cost overstated by a burst of interference makes every
    sample zero: the kernel gets a second calibration and set of samples;
    a kernel untimed twice keeps the error."""
    from tpuperf_cli.measure.device import MeasureError, _Timed

    class Flaky(_Timed):
        def __init__(self, value_after):
            super().__init__(measurer, None, [], [], [])
            self.trips, self.zero = 1, [0.0]   # calls with no trips cost nothing here
            self.value = 0.0
            self.value_after = value_after
            self.calibrations = 0

        def calibrate(self):
            self.calibrations += 1
            self.value = self.value_after

        def sample(self):
            self.samples.append((self.value, True))

    hiccup, dead = Flaky(250.0), Flaky(0.0)
    results = [None, None]
    measurer._rounds([(0, hiccup), (1, dead)], results)
    assert results[0].runtime_ns == 250.0 and len(results[0].samples) == measurer.samples
    assert isinstance(results[1], MeasureError) and results[1].kind == "untimed"
    assert hiccup.calibrations == dead.calibrations == 1


def test_kernel_time_excludes_dispatch(measurer):
    """One negate of a scalar: a dispatched call costs microseconds, the
    kernel inside the timing loop far less."""
    tiny = ("HloModule tiny\n\nENTRY %main (p: f32[]) -> f32[] {\n"
            "  %p = f32[] parameter(0)\n  ROOT %n = f32[] negate(%p)\n}\n")
    assert measurer.measure(tiny).runtime_ns < 500


def test_isolated_measurer_survives_aborts_and_hangs(monkeypatch):
    from tpuperf_cli.measure.device import MeasureError
    from tpuperf_cli.measure.worker import IsolatedMeasurer

    monkeypatch.setenv("TPUPERF_TEST_ABORT_ON", "abort_here")
    m = IsolatedMeasurer("cpu", samples=2, min_time=0.0005, timeout=3)
    try:
        assert m.target["platform"] == "cpu"
        with pytest.raises(MeasureError) as e:
            m.measure(CRASH)
        assert e.value.kind == "crash" and "signal" in str(e.value)
        with pytest.raises(MeasureError) as e:
            m.measure(FOREVER)
        assert e.value.kind == "timeout"
        got = m.measure(FUSION)  # a fresh worker takes over
        assert got.runtime_ns > 0 and len(got.samples) == 2
        # in a batch, only the guilty kernel gets the error
        out = m.measure_many([FUSION, CRASH, matmul_hlo(16)])
        assert out[0].runtime_ns > 0 and out[2].runtime_ns > 0
        assert isinstance(out[1], MeasureError) and out[1].kind == "crash"
    finally:
        m.close()


def test_kernel_key_ignores_names_metadata_and_blank_space():
    from tpuperf_cli.measure import kernel_key

    a = matmul_hlo(64)
    b = a.replace(', metadata={op_name="jit(f)/dot_general"}', "").replace("  ", "    ")
    assert kernel_key(a) == kernel_key(b) == kernel_key(a.replace("%dot", "%other"))
    assert kernel_key(a) != kernel_key(matmul_hlo(65))
    assert kernel_key(NESTED) != kernel_key(NESTED.replace("negate(%f)", "abs(%f)"))
    assert kernel_key("not hlo").startswith("text:")


def test_cache_round_trip(tmp_path):
    from tpuperf_cli.measure.cache import Cache

    c = Cache(tmp_path / "c")
    assert c.get("f", "k") is None
    c.put("f", "k", {"platform": "cpu"}, 12.5, [12.5, 13.0], min_time=0.01)
    c.put("g", "k", {"platform": "cpu"}, error="compile: nope", error_kind="compile")
    c.close()
    c = Cache(tmp_path / "c")  # a new process sees committed rows
    assert c.get("f", "k")["runtime_ns"] == 12.5 and c.get("f", "k")["runs"] == [12.5, 13.0]
    assert c.get("g", "k")["error_kind"] == "compile"
    assert c.get("f", "other-target") is None
    assert len(c) == 2


def test_timeouts_are_not_cached_other_failures_are(tmp_path):
    from tpuperf_cli.measure import MeasureSession
    from tpuperf_cli.measure.cache import Cache
    from tpuperf_cli.measure.device import MeasureError

    class Failing:
        key, target, min_time = "k" * 16, {"platform": "cpu"}, 0.001

        def __init__(self, kind):
            self.kind = kind

        def measure_many(self, texts):
            return [MeasureError(self.kind, "no luck") for _ in texts]

    for kind, cached in (("timeout", 0), ("compile", 1)):
        cache = Cache(tmp_path / kind)
        MeasureSession(Failing(kind), cache).update(kernel("f", FUSION))
        cache.close()
        with sqlite3.connect(tmp_path / kind / "measurements.sqlite3") as db:
            assert db.execute("SELECT COUNT(*) FROM measurement").fetchone()[0] == cached, kind


def test_a_loud_machine_is_named_in_the_summary():
    from tpuperf_cli.measure import LOUD_MIN_KERNELS, LOUD_NOISE, MeasureSession
    from tpuperf_cli.measure.device import Measurement

    class Noisy:
        key, target, min_time = "k" * 16, {"platform": "cpu"}, 0.001

        def __init__(self, noise):
            self.noise = noise

        def measure_many(self, texts):
            return [Measurement(100.0, [100.0, 120.0], self.noise, 0) for _ in texts]

    def summary(noise, n):
        session = MeasureSession(Noisy(noise))
        session.update_many([(kernel(f"k{i}", matmul_hlo(i + 2)), i, "in") for i in range(n)])
        return "\n".join(session.summary("measure")), session.loud()

    text, loud = summary(0.02, LOUD_MIN_KERNELS)
    assert f"noise of the {LOUD_MIN_KERNELS} kernel(s) timed now: median 2.0%" in text
    assert loud is None and "warning" not in text
    text, loud = summary(LOUD_NOISE + 0.04, LOUD_MIN_KERNELS)
    assert "measure: warning: this machine is loud" in text and "12.0%" in loud
    # too few kernels to judge the machine by
    text, loud = summary(0.5, LOUD_MIN_KERNELS - 1)
    assert loud is None and "median 50.0%" in text


def test_parse_duration():
    import click

    from tpuperf_cli.commands.measure import parse_duration

    assert parse_duration("5ms") == pytest.approx(0.005)
    assert parse_duration("2") == pytest.approx(0.002)
    assert parse_duration("0.5s") == pytest.approx(0.5)
    assert parse_duration("300us") == pytest.approx(0.0003)
    for bad in ("fast", "-1ms", "0"):
        with pytest.raises(click.BadParameter):
            parse_duration(bad)


# ------------------------------------------------------------------ the tool

def test_stream_gets_fields_cache_hits_on_second_run(tmp_path):
    recs = [kernel("mm64", matmul_hlo(64), 0, fingerprint="aa", extra_field=[1, 2]),
            kernel("cc", CUSTOM_CALL, 1, fingerprint="bb"),
            kernel("ar", ALL_REDUCE, 2),  # no fingerprint: a hash of the text
            kernel("mm64-again", matmul_hlo(64), 3, fingerprint="aa"),
            kernel("fusion", FUSION, 4)]
    data = stream_bytes(recs)
    p = run_measure([], data, tmp_path)
    out = records_of(p.stdout)
    assert len(out) == len(recs)
    for before, after in zip(recs, out):
        new = set(after) - set(before)
        assert new <= {"runtime_ns", "runs", "noise", "target", "error"}
        # everything that was there is unchanged
        assert {k: after[k] for k in before} == before
        assert after["target"]["platform"] == "cpu"
    assert out[0]["runtime_ns"] > 0 and len(out[0]["runs"]) >= 3 and out[0]["noise"] >= 0
    assert "error" not in out[0]
    assert out[1]["error"].startswith("compile:") and "runtime_ns" not in out[1]
    assert out[2]["error"].startswith("collective:")
    assert out[3]["runtime_ns"] == out[0]["runtime_ns"]  # one fingerprint, timed once
    assert out[4]["runtime_ns"] > 0
    err = p.stderr.decode()
    assert "5 kernel(s): 3 measured, 2 failed" in err
    assert "3 timed now" not in err and "4 timed now, 0 from the cache" in err
    assert "1 failed: compile" in err and "1 failed: collective" in err
    cache_file = tmp_path / "xdg" / "tpuperf" / "measurements.sqlite3"
    assert cache_file.exists()

    p2 = run_measure([], data, tmp_path)
    out2 = records_of(p2.stdout)
    assert "0 timed now, 4 from the cache" in p2.stderr.decode()
    assert [r.get("runtime_ns") for r in out2] == [r.get("runtime_ns") for r in out]
    assert [r.get("error") for r in out2] == [r.get("error") for r in out]

    p3 = run_measure(["--no-cache"], data, tmp_path)
    assert "4 timed now, 0 from the cache" in p3.stderr.decode()


def test_cache_is_keyed_by_the_text_not_the_fingerprint_field(tmp_path):
    # a record whose text was edited but kept another kernel's fingerprint
    small = kernel("mm8", matmul_hlo(8), 0)
    big = kernel("mm512", matmul_hlo(512), 1, fingerprint=None)
    run_measure([], stream_bytes([small]), tmp_path)
    from tpuperf_cli.measure import kernel_key

    big["fingerprint"] = kernel_key(matmul_hlo(8))  # the cached small kernel's
    p = run_measure([], stream_bytes([big]), tmp_path)
    (out,) = records_of(p.stdout)
    assert "1 timed now, 0 from the cache" in p.stderr.decode()
    assert "record 1: its fingerprint" in p.stderr.decode()
    assert out["runtime_ns"] > 0


def test_cache_dir_option_and_files_as_arguments(tmp_path):
    path = tmp_path / "k.msgpack"
    path.write_bytes(stream_bytes([kernel("f", FUSION)]))
    run_measure(["--cache-dir", str(tmp_path / "mine"), str(path)], b"", tmp_path)
    with sqlite3.connect(tmp_path / "mine" / "measurements.sqlite3") as db:
        assert db.execute("SELECT COUNT(*) FROM measurement").fetchone()[0] == 1


def test_record_without_hlo_is_an_error_after_good_records(tmp_path):
    data = stream_bytes([kernel("f", FUSION), new_record("kernel", program="t", kernel="x")])
    p = run_measure(["--no-cache"], data, tmp_path, check=False)
    assert p.returncode == 1
    assert "record 2" in p.stderr.decode() and "hlo" in p.stderr.decode()
    assert "Traceback" not in p.stderr.decode()
    assert len(records_of(p.stdout)) == 1


@pytest.mark.parametrize("bar", [[], ["--progress"]], ids=["streaming", "progress-bar"])
def test_truncated_input_keeps_good_records(tmp_path, bar):
    # with a progress bar the input is read whole first: the good records
    # before the bad one are still measured and written
    data = stream_bytes([kernel("f", FUSION), kernel("g", matmul_hlo(8), 1)])
    p = run_measure(["--no-cache"] + bar, data[:-20], tmp_path, check=False)
    assert p.returncode == 1 and "truncated" in p.stderr.decode()
    assert [r["kernel"] for r in records_of(p.stdout)] == ["f"]


@pytest.mark.parametrize("jobs", [1, 2])
def test_ctrl_c_keeps_cache_and_a_valid_stream(tmp_path, jobs):
    # far more work than the test waits for, even on a fast, idle machine
    recs = [kernel(f"mm{n}", matmul_hlo(n), i) for i, n in enumerate(range(16, 16 + 160))]
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "xdg")}
    out_path = tmp_path / "out.msgpack"
    with open(out_path, "wb") as out:
        # a shell's background job inherits SIGINT ignored: give measure the default
        p = subprocess.Popen(MEASURE + ["--backend", "cpu", "--min-time", "20ms", "--batch", "2",
                                        "--jobs", str(jobs)],
                             stdin=subprocess.PIPE, stdout=out, stderr=subprocess.PIPE, env=env,
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        p.stdin.write(stream_bytes(recs))
        p.stdin.close()
        deadline = time.time() + 60
        while out_path.stat().st_size == 0 and time.time() < deadline:
            time.sleep(0.05)
        time.sleep(0.2)
        p.send_signal(signal.SIGINT)
        err = p.stderr.read().decode()
        assert p.wait(30) == 130, err
    assert "interrupted" in err
    got = list(read_records(str(out_path)))  # valid: no truncated record
    assert 1 <= len(got) < len(recs)
    assert all(r["runtime_ns"] > 0 for r in got)
    with sqlite3.connect(tmp_path / "xdg" / "tpuperf" / "measurements.sqlite3") as db:
        cached = db.execute("SELECT COUNT(*) FROM measurement").fetchone()[0]
    assert cached >= len(got)
    # a second run resumes: what was finished comes from the cache
    p2 = run_measure([], stream_bytes(recs[: len(got)]), tmp_path)
    assert f"0 timed now, {len(got)} from the cache" in p2.stderr.decode()


def _children(pid):
    found = []
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children") as f:
            found += [int(c) for c in f.read().split()]
    return found


def _running(pid):
    """False once pid has exited (gone, or a zombie nobody reaped)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="needs Linux's /proc")
def test_a_worker_whose_measure_was_killed_stops_within_a_round(tmp_path):
    """measure killed with SIGKILL cannot tell its worker: the worker sees
    its parent change between calibrations or rounds and exits, rather than
    time the rest of its batch (here about 40 s) for nobody."""
    recs = [kernel(f"mm{n}", matmul_hlo(n), i) for i, n in enumerate(range(16, 16 + 64))]
    p = subprocess.Popen(MEASURE + ["--backend", "cpu", "--no-cache", "--min-time", "20ms",
                                    "--batch", "64"],
                         stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    p.stdin.write(stream_bytes(recs))
    p.stdin.close()
    deadline = time.time() + 60
    worker = None
    while time.time() < deadline and worker is None:
        kids = _children(p.pid)
        worker = kids[0] if kids else None
        time.sleep(0.1)
    assert worker is not None
    time.sleep(8)   # start-up and compiles: into the calibrations or rounds
    assert _running(worker)
    p.kill()
    p.wait()
    deadline = time.time() + 15
    while _running(worker) and time.time() < deadline:
        time.sleep(0.2)
    assert not _running(worker)


def test_help_documents_fields_and_tpu():
    p = subprocess.run(MEASURE + ["--help"], capture_output=True, text=True)
    assert p.returncode == 0
    for word in ("runtime_ns", "target", "--min-time", "--no-cache", "-e '.[tpu]'", "Exit status"):
        assert word in p.stdout


def test_unavailable_backend_is_a_clear_error(tmp_path):
    p = run_measure(["--backend", "tpu"], stream_bytes([kernel("f", FUSION)]), tmp_path,
                    check=False)
    # the last --backend wins: tpu is not present on the test machines
    assert p.returncode == 1
    assert "no tpu backend" in p.stderr.decode() and "Traceback" not in p.stderr.decode()


def test_pinned_process_clock_target(tmp_path):
    data = stream_bytes([kernel("f", FUSION), kernel("mm", matmul_hlo(256), 1)])
    p = run_measure(["--no-cache"], data, tmp_path)  # the defaults: --cpus 1, process clock
    out = records_of(p.stdout)
    assert all(r["target"]["cpu_count"] == 1 and r["target"]["clock"] == "process" for r in out)
    assert all(r["target"]["cpu"]["vendor"] for r in out)
    assert 0 < out[0]["runtime_ns"] < out[1]["runtime_ns"]
    p = run_measure(["--no-cache", "--cpus", "all", "--clock", "wall"], data, tmp_path)
    assert all(r["target"]["clock"] == "wall" for r in records_of(p.stdout))
    # a clock or CPU count is part of the target, hence of the cache key
    from tpuperf_cli.measure.target import target_key

    assert target_key(out[0]["target"]) != target_key({**out[0]["target"], "clock": "wall"})


def test_too_many_cpus_is_a_clear_error(tmp_path):
    p = run_measure(["--cpus", "4096"], stream_bytes([kernel("f", FUSION)]), tmp_path,
                    check=False)
    assert p.returncode == 1 and "--cpus 4096" in p.stderr.decode()
    assert "Traceback" not in p.stderr.decode()


def test_compile_pool_cpus(monkeypatch):
    """One job timing on one CPU compiles on every CPU it may use; several
    jobs, or --cpus all, compile where they time; a pool larger than the
    CPUs, or beside several jobs, is a clear error."""
    from tpuperf_cli.errors import TpuperfError
    from tpuperf_cli.measure.parallel import compile_cpu_ids

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    assert compile_cpu_ids(1, 1, None) == [0, 1, 2, 3]
    assert compile_cpu_ids(2, 1, None) is None
    assert compile_cpu_ids(1, None, None) is None
    assert compile_cpu_ids(1, 1, 0) is None
    assert compile_cpu_ids(1, 1, 2) == [2, 3]
    with pytest.raises(TpuperfError, match="--compile-jobs 5: this process may use 4"):
        compile_cpu_ids(1, 1, 5)
    with pytest.raises(TpuperfError, match="goes with --jobs 1"):
        compile_cpu_ids(2, 1, 2)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {3})
    assert compile_cpu_ids(1, 1, None) is None  # nothing to gain on one CPU


def test_compile_jobs_beside_several_jobs_is_a_clear_error(tmp_path):
    p = run_measure(["--jobs", "2", "--compile-jobs", "2"], stream_bytes([kernel("f", FUSION)]),
                    tmp_path, check=False)
    assert p.returncode == 1 and "--compile-jobs goes with --jobs 1" in p.stderr.decode()
    assert "Traceback" not in p.stderr.decode()


def test_committed_corpus_is_whole():
    """examples/corpus matches examples/programs.json and the split files."""
    import json
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent / "examples"
    manifest = json.loads((root / "corpus" / "manifest.json").read_text())
    names = {p["name"] for p in json.loads((root / "programs.json").read_text())["programs"]}
    assert {p["name"] for p in manifest["per_program"]} == names
    assert manifest["programs"] >= 30 and manifest["distinct_kernels"] >= 5000
    train_all = None
    for split in ("random", "manual"):
        train = set(json.loads((root / "splits" / f"{split}.json").read_text())["train"])
        train_all = train if train_all is None else train_all & train
    fingerprints, held_out_fps, total = set(), set(), 0
    for p in manifest["per_program"]:
        recs = list(read_records(str(root / p["kernel_shard"])))
        assert len(recs) == p["kernels"]
        assert all(r["runtime_ns"] > 0 and len(r["runs"]) >= 3 for r in recs if "error" not in r)
        assert all(r["target"]["platform"] == "cpu" for r in recs)
        fingerprints |= {r["fingerprint"] for r in recs}
        if p["name"] not in train_all:
            held_out_fps |= {r["fingerprint"] for r in recs}
        total += len(recs)
    # generated kernels (build_corpus.py generate): drawn only from programs
    # in the train list of both splits, never a kernel of a program that any
    # split validates or tests on (a program added after them, training in
    # every split, may share a few: make_programs.LATE_FAMILIES)
    for shard in sorted((root / "corpus" / "generated").glob("*.zst")):
        source = shard.stem.rsplit("-", 1)[0]
        for r in read_records(str(shard)):
            assert r["source"] == source and r["program"].startswith(source + ":")
            # ops, heavy and indexed draw from no program (no origin)
            if source in ("ops", "heavy", "indexed"):
                assert "origin" not in r, (shard.name, r["origin"])
            else:
                assert r["origin"] in train_all, r["origin"]
            assert r["fingerprint"] not in held_out_fps
            fingerprints.add(r["fingerprint"])
            total += 1
    assert total == manifest["kernels"] and len(fingerprints) == manifest["distinct_kernels"]
    for split in ("random", "manual"):
        sets = json.loads((root / "splits" / f"{split}.json").read_text())
        listed = [n for s in ("train", "valid", "test") for n in sets[s] if ":" not in n]
        assert sorted(listed) == sorted(names)  # every program in exactly one set
        if manifest["graph_shards_committed"]:
            assert all((root / "corpus" / "graphs" / f"{n}.zst").exists() for n in listed)


def test_compile_pool_gives_the_same_code_and_survives_aborts_and_hangs(monkeypatch):
    """Kernels compiled on the compile pool's processes: loaded here, they
    are the executables an in-process compile makes; a compile process that
    aborts costs its module (then its kernel) only, one that hangs is
    killed."""
    from tpuperf_cli.hlo.compilable import bundle_module
    from tpuperf_cli.measure.compiler import CompilePool
    from tpuperf_cli.measure.device import MeasureError, Measurer

    # the marker is the name of a reducer: what the compile process sees
    crash = ("HloModule reduce\n\n%abort_here_add (a: f32[], b: f32[]) -> f32[] {\n"
             "  %a = f32[] parameter(0)\n  %b = f32[] parameter(1)\n"
             "  ROOT %s = f32[] add(%a, %b)\n}\n\n"
             "ENTRY %main (p: f32[64,64]) -> f32[64] {\n  %p = f32[64,64] parameter(0)\n"
             "  %z = f32[] constant(0)\n"
             "  ROOT %r = f32[64] reduce(%p, %z), dimensions={1}, to_apply=%abort_here_add\n}\n")
    monkeypatch.setenv("TPUPERF_TEST_COMPILE_ABORT_ON", "abort_here")
    monkeypatch.setenv("TPUPERF_TEST_COMPILE_HANG_ON", "hang_here")
    pool = CompilePool([sorted(os.sched_getaffinity(0))[-1]], "cpu", timeout=120)
    m = Measurer("cpu", samples=5, min_time=0.002, compiler=pool)
    try:
        out = m.measure_many([matmul_hlo(64), crash, matmul_hlo(192), FUSION])
        assert isinstance(out[1], MeasureError) and out[1].kind == "crash", out[1]
        assert "compile process" in out[1].message
        assert all(out[i].runtime_ns > 0 for i in (0, 2, 3)), out
        assert out[2].runtime_ns > out[0].runtime_ns  # 27x the flops
        text = bundle_module([m.looped(t, prefix=f"k{i}.", as_entry=False)
                              for i, t in enumerate([matmul_hlo(32), FUSION])])
        (loaded, _), = m._compile_all([text])
        here, _ = Measurer.compile_module(m, text)
        assert loaded.hlo_modules()[0].to_string() == here.hlo_modules()[0].to_string()
        pool.timeout = 2
        hung, done = pool.compile_many([crash.replace("abort_here", "hang_here"), text])
        assert isinstance(hung, MeasureError) and hung.kind == "timeout"
        assert isinstance(done, bytes)  # in a fresh process
    finally:
        pool.close()


def test_the_tools_default_to_the_sampling_the_method_was_chosen_with():
    """measure's --samples and --batch, calibrate's, and the library's
    defaults are one setting (device.SAMPLES, device.BATCH)."""
    from tpuperf_cli import calibrate as cal
    from tpuperf_cli.commands.calibrate import cli as calibrate_cli
    from tpuperf_cli.commands.measure import cli as measure_cli
    from tpuperf_cli.measure.device import BATCH, SAMPLES

    def default(command, name):
        return next(p.default for p in command.params if p.name == name)

    assert default(measure_cli, "samples") == default(calibrate_cli, "samples") == SAMPLES
    assert cal.Options.samples == SAMPLES
    assert default(measure_cli, "batch") == cal.BATCH == BATCH
