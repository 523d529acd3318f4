"""Time kernels on one device of one backend through XLA: measure's method.

From HLO text to a number, the same for every backend:

1. `hlo.compilable.timing_module` puts the kernel inside a while loop that
   runs it `n` times in one executable call (`n` a parameter), its output
   written into the same warm buffer every trip;
2. jaxlib parses that module, converts it to StableHLO and compiles it for
   one device (`client.compile_and_load`); up to BUNDLE kernels are
   compiled into one executable, each in its own loop with its own `n`
   (`hlo.compilable.bundle_module`), to pay XLA's per-executable cost once;
3. inputs of the parameters' shapes and dtypes are put on the device once;
4. after a warm-up call, calls with `n = 0` give the fixed cost of a
   call (dispatch, the loop's set-up), and `n` grows until a call takes at
   least `min_time` more than that;
5. a sample is (time of a call with n trips - fixed cost) / n: the kernel's
   own time per run, with neither Python nor PJRT dispatch in it, as the
   paper times kernels on the device. `samples` samples are taken in rounds
   that go across all the kernels of a batch (`measure_many`), so that a
   burst of interference from other processes hits one sample of many
   kernels, not every sample of one. On CPU a sample during which the
   measuring thread was switched out (getrusage's context switches) is
   dropped: the other process evicted its caches.
6. The runtime is the fastest sample kept, and the fixed cost it subtracts
   the fastest of the calls with `n = 0` (five at calibration and one
   beside each sample, so it is sampled as often and as spread in time as
   the kernel). Interference only ever adds time. On a cloud VM it comes
   as a regime: most likely a busy neighbour on the host's other
   hyperthread of the same core slows every instruction 1.6x to 2x for
   milliseconds at a time, and leaves the core alone a quarter of the time
   or less (seen on an AMD EPYC family 25 VM, 2026-11-26). Any quantile
   above the fastest then lands in the slow regime or between the two, by
   chance; the fastest sample is the machine undisturbed, and the fastest
   fixed cost is that of the same undisturbed machine (method 5; method 4
   took the lower quartile and a median of five fixed calls, which put two
   runs of the same kernels there 12% to 20% apart at the median, against
   2% to 3% now). `noise` is how far the fastest sits below the samples'
   10th percentile, not their spread (see Measurement).

The kernel text is already optimized HLO; compiling it again runs XLA's
pipeline a second time, which for one kernel mostly leaves it alone (there
is nothing to fuse it with). Layouts: see `hlo.compilable`.

Input values: floating-point (and complex) inputs are uniform in [0.5, 1.5]:
positive, so log/sqrt/rsqrt/pow/divide stay finite, and far from denormals,
which are slow on some CPUs. Integer inputs are all zeros: zero is a valid
index into every dimension, so every gather, scatter, dynamic-slice and
dynamic-update-slice stays in bounds whatever the shapes (XLA would clamp or
skip out-of-bound indices, which changes the work done), and integer
division by zero is defined in XLA. Booleans are random. On GPU and TPU
(the events clock), a scatter whose indices are all equal would queue its
atomic updates on one row (the GPU corpus's scatters of 2026-11-26 were
timed so): there a parameter that holds a gather's or scatter's indices
is drawn uniformly from the indices that stay in bounds
(hlo.compilable.index_bounds).
"""

from __future__ import annotations

import math
import os
import re
import statistics
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tpuperf_cli.errors import ParseError

from .target import describe, target_key

BACKENDS = ("tpu", "gpu", "cpu")

# wall: elapsed time. process: CPU time of the measuring process (all its
# threads): time spent descheduled on a busy machine does not count, so with
# the process pinned to one CPU it estimates the wall time on an idle one.
CLOCKS = {"wall": time.perf_counter_ns, "process": time.process_time_ns}

# Ops that need several devices or a host on the other end: a standalone
# kernel with one of these cannot be timed meaningfully on one device.
COLLECTIVE_OPCODES = frozenset("""
all-reduce all-reduce-start all-reduce-done all-gather all-gather-start all-gather-done
all-to-all collective-permute collective-permute-start collective-permute-done
reduce-scatter collective-broadcast ragged-all-to-all
send send-done recv recv-done infeed outfeed partition-id replica-id
""".split())

# The most trips one call may make (n is an s32 on the device).
MAX_TRIPS = 1 << 24
# The inputs of the kernels of one round live on the device together: past
# this many bytes a batch is timed in several rounds-groups.
BATCH_BYTES = 1 << 30
# Kernels compiled into one executable, each in its own loop: XLA's cost per
# executable (a third or more of a small kernel's compile time on XLA:CPU)
# is paid once per bundle. Every call zero-fills the output slot of every
# kernel of the bundle, a fixed cost that the sample subtracts but whose
# jitter it keeps: the outputs of a bundle are kept small.
BUNDLE = 16
BUNDLE_OUTPUT_BYTES = 1 << 20
# Samples per kernel, and kernels sampled together in rounds (measure
# --batch; calibrate's batch): the fastest sample must catch the machine
# undisturbed at least once (see 6. above), so the samples of one kernel
# are many and spread over the seconds a round of a large batch takes. On
# an AMD EPYC family 25 VM (2026-11-26, bench_measure_noise.py) two runs of
# 320 kernels agreed to 1.9% at the median, 11.6% at p90, with 30 samples
# and batches of 160; 5.5% and 30% with 30 and 32, 6.0% and 29% with 15
# and 160: neither alone does it.
SAMPLES = 30
BATCH = 128


class MeasureError(Exception):
    """A kernel that cannot be timed; ``kind`` groups reasons in summaries."""

    def __init__(self, kind, message):
        super().__init__(f"{kind}: {message}")
        self.kind = kind
        self.message = message


@dataclass
class Measurement:
    """One kernel's timing.

    runtime_ns: ns per run: the fastest sample kept (timing loop, method 5)
        or their lower quartile (the events clock).
    samples: those samples, in the order taken (the record's `runs`).
    noise: how far the runtime may be off. With the fastest sample, how far
        it sits below the samples' 10th percentile (q10 / fastest - 1: a
        fastest that the next fastest samples come close to is pinned
        down); with the lower quartile, the samples' spread, 1.4826 * MAD /
        median (a robust relative standard deviation).
    dropped: samples dropped because the thread was switched out.
    """

    runtime_ns: float
    samples: list
    noise: float
    dropped: int = 0


def quantile(values: Iterable[float], q: float) -> float:
    """The q-quantile, interpolated (numpy's default method); NaN for none."""
    xs = sorted(values)
    if not xs:
        return math.nan
    k = (len(xs) - 1) * q
    lo = int(k)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def lower_quartile(values: Iterable[float]) -> float:
    return quantile(values, 0.25)


def fastest(values: Iterable[float]) -> float:
    """The fastest sample above zero, or 0 when a quarter or more of the
    samples are not above zero: a kernel whose work does not show above
    a call's fixed cost is untimed, not timed by its luckiest sample."""
    xs = list(values)
    if not xs or lower_quartile(xs) <= 0:
        return 0.0
    return min(x for x in xs if x > 0)


def summarize(samples: Sequence[float], dropped: int = 0, estimate=lower_quartile) -> Measurement:
    """A Measurement from per-run samples (ns), its runtime estimate(samples)
    and its noise (see Measurement)."""
    runtime = float(estimate(samples))
    if estimate is fastest:
        # On a VM whose speed comes in regimes the samples' spread is that of
        # the regimes (a MAD of 12% to 13% at the median), and says nothing
        # of how far two runs' fastest disagree (Spearman's rho -0.06 and
        # 0.01 over 320 kernels timed twice, 2026-11-26); the gap from the
        # fastest to the 10th percentile does (rho 0.25 to 0.28; the runs'
        # disagreement 1.4% to 2.2% for the quarter of kernels with the
        # least of it, 4.4% to 4.7% for the quarter with the most).
        above = [x for x in samples if x > 0]
        noise = quantile(above, 0.1) / runtime - 1 if runtime > 0 and above else 0.0
    else:
        med = statistics.median(samples)
        mad = statistics.median(abs(x - med) for x in samples)
        noise = 1.4826 * mad / med if med > 0 else 0.0
    return Measurement(runtime, [float(x) for x in samples], float(noise), dropped)


def pin_cpus(n: int) -> set[int]:
    """Restrict this process to n of its CPUs (the last ones), before jax
    starts: XLA:CPU sizes its thread pool from the CPUs it may use. Returns
    the CPUs kept."""
    allowed = sorted(os.sched_getaffinity(0))
    if n < 1 or n > len(allowed):
        raise MeasureError("backend", f"--cpus {n}: this process may use {len(allowed)} CPU(s)")
    keep = set(allowed[-n:])
    os.sched_setaffinity(0, keep)
    return keep


def single_threaded_xla() -> None:
    """Ask XLA:CPU to run Eigen's dots and convolutions on the calling
    thread (before jax starts). On one pinned CPU its pool's threads only
    spin and take turns with the worker, which the process clock counts as
    work: 2x swings on the same convolution were seen."""
    flag = "--xla_cpu_multi_thread_eigen=false"
    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_cpu_multi_thread_eigen" not in flags:
        os.environ["XLA_FLAGS"] = (flags + " " + flag).strip()


def pick_backend(requested: str | None = None) -> str:
    """The backend name to use: the requested one, or the best present
    (tpu, then gpu, then cpu). Raises MeasureError if the requested backend
    is not available."""
    import jax

    if requested and requested != "auto":
        try:
            jax.devices(requested)
        except RuntimeError as e:
            raise MeasureError("backend", f"no {requested} backend here ({_first_line(e)}); "
                               "in a tpuperf checkout, pip install -e '.[tpu]' for tpu "
                               "(jax[tpu]==0.6.2), -e '.[gpu]' for gpu (jax[cuda12]==0.6.2)") from None
        return requested
    for name in BACKENDS:
        try:
            if jax.devices(name):
                return name
        except RuntimeError:
            continue
    raise MeasureError("backend", "no XLA backend found")


def _first_line(e, limit=300):
    s = str(e).strip().splitlines()
    s = s[0] if s else type(e).__name__
    return s if len(s) <= limit else s[:limit] + "..."


def error_text(e: BaseException, limit: int = 600) -> str:
    """The useful part of an XLA error: its first lines, without MLIR locs."""
    lines = [line for line in str(e).strip().splitlines() if line.strip()]
    text = " | ".join(lines[:3]) if lines else type(e).__name__
    return text if len(text) <= limit else text[:limit] + "..."


_OPCODE_RE = re.compile(r"=\s*\S.*?\s([a-z][a-z0-9\-]*)\(")


def _collectives(text):
    ops = {m.group(1) for m in map(_OPCODE_RE.search, text.splitlines()) if m}
    return sorted(ops & COLLECTIVE_OPCODES)


def _switches():
    """Context switches of the calling thread so far (None where unknown)."""
    try:
        import resource

        r = resource.getrusage(resource.RUSAGE_THREAD)
        return r.ru_nvcsw + r.ru_nivcsw
    except (ImportError, AttributeError, OSError):
        return None


def program_of(text: str) -> tuple[Any, list]:
    """(XlaComputation, parameter shapes) of a module's text; MeasureError
    for text XLA does not parse, or a parameter that cannot be fed."""
    from tpuperf_cli.hlo.xla import computation_of_text

    try:
        comp = computation_of_text(text)
    except Exception as e:
        raise MeasureError("parse", error_text(e)) from None
    params = comp.program_shape().parameter_shapes()
    for i, s in enumerate(params):
        if s.is_tuple():
            raise MeasureError("unsupported", f"parameter {i} is a tuple ({s}); "
                                              f"only array parameters can be fed")
        if not s.is_static():
            raise MeasureError("unsupported", f"parameter {i} has a dynamic shape ({s})")
    return comp, params


def _compile_options():
    from jax._src.lib import xla_client as xc

    options = xc.CompileOptions()
    options.num_replicas = 1
    options.num_partitions = 1
    return options


def compile_program(client, device, comp) -> Any:
    """An XlaComputation compiled for one device, through StableHLO (the
    way jaxlib compiles); MeasureError if XLA refuses it."""
    from jax._src.lib import xla_client as xc

    from tpuperf_cli.hlo.xla import mlir_of

    try:
        mlir = mlir_of(comp)
    except Exception as e:
        raise MeasureError("convert", error_text(e)) from None
    try:
        return client.compile_and_load(mlir, xc.DeviceList((device,)), _compile_options())
    except Exception as e:
        raise MeasureError("compile", error_text(e)) from None


class _Timed:
    """One compiled kernel with its inputs, ready to sample. In a bundle,
    the executable's other kernels get their inputs and n = 0 (before and
    after: their arguments, in parameter order)."""

    def __init__(self, measurer, exe, before, args, after):
        self.m = measurer
        self.exe = exe
        self.before, self.args, self.after = before, args, after
        self.input_bytes = sum(a.nbytes for a in args)
        self._trips = {}
        self.samples = []   # (time of a call with self.trips trips, clean)
        self.zero = []      # times of calls with no trips: the fixed cost
        self.dropped = 0

    def call(self, n):
        """One call running the kernel n times; returns when it is done."""
        if n not in self._trips:
            self._trips[n] = self.m.put(np.int32(n))
        self.exe.execute_sharded(self.before + self.args + [self._trips[n]] + self.after,
                                 with_tokens=True).consume_token().block_until_ready()

    def _time(self, n):
        clock = self.m.clock_fn
        t0 = clock()
        self.call(n)
        return clock() - t0

    def calibrate(self):
        """Warm up, find the fixed cost of a call and the trips per sample."""
        self.call(1)  # first touch, caches, lazy initialisation
        self.zero = [self._time(0) for _ in range(5)]
        fixed = min(self.zero)
        target = self.m.min_time * 1e9
        n = 1
        deadline = time.monotonic() + max(10 * self.m.min_time, 2.0)
        while True:
            spent = self._time(n) - fixed
            if spent >= target or n >= MAX_TRIPS or time.monotonic() > deadline:
                break
            # at most 10x a step: a call barely above the fixed cost (whose
            # estimate is noisy too) says little about how far to go
            n = min(MAX_TRIPS, 10 * n, max(2 * n, math.ceil(n * 1.2 * target / max(spent, 1))))
        self.trips = n

    def sample(self):
        self.zero.append(self._time(0))
        before = self.m.switch_count()
        t = self._time(self.trips)
        clean = before is None or self.m.switch_count() == before
        self.samples.append((t, clean))

    def result(self) -> Measurement:
        fixed = min(self.zero)
        values = [(max(t - fixed, 0) / self.trips, clean) for t, clean in self.samples]
        kept = [v for v, clean in values if clean]
        # a kernel longer than a time slice is rarely left alone: then all count
        if len(kept) < max(3, (len(values) + 1) // 2):
            kept = [v for v, _ in values]
        m = summarize(kept, len(values) - len(kept), estimate=fastest)
        if m.runtime_ns <= 0:
            # seen on a few of XLA:CPU's parallel_* kernels (iotas,
            # broadcasts, copies split across threads): their trips do not
            # show above a call's fixed cost
            raise MeasureError("untimed", "a quarter or more of the samples were not above the "
                                          "fixed cost of a call: the kernel's work did not show "
                                          "in the timing loop")
        return m


class Measurer:
    """Compiles and times kernels on one device of one backend.

    ``measure(text)`` returns a Measurement or raises MeasureError;
    ``measure_many(texts)`` times several with interleaved rounds and
    returns a Measurement or a MeasureError for each. ``target`` describes
    the machine (the record's target), ``key`` is its cache key.
    """

    def __init__(self, backend: str | None = None, samples: int = SAMPLES, min_time: float = 0.0005,
                 seed: int = 0, clock: str = "auto", bundle: int = BUNDLE, compiler=None):
        import jax

        if samples < 1:
            raise ValueError("samples must be >= 1")
        # On CPU run executables inline on the calling thread: no two
        # executions overlap and a returned call is a finished call.
        jax.config.update("jax_cpu_enable_async_dispatch", False)
        self.backend = pick_backend(backend)
        self.device = jax.devices(self.backend)[0]
        self.client = self.device.client
        if not hasattr(self.client, "buffer_from_pyval"):
            # newer jaxlib: jax.device_put keeps 64-bit inputs 64-bit only
            # with x64 on (see put); nothing is traced here
            jax.config.update("jax_enable_x64", True)
        self.samples = samples
        self.bundle = max(1, int(bundle))
        # a compiler.CompilePool, or None to compile in this process
        self.compiler = compiler
        self.min_time = float(min_time)
        self.seed = seed
        if clock == "auto" and self.backend != "cpu":
            # an accelerator's own clock, read off the profiler (events.py)
            clock = "events"
        elif clock == "auto":
            # the process clock only where the process has one CPU: on
            # several, XLA's idle pool threads spin and it counts them
            pinned = len(os.sched_getaffinity(0)) == 1 if hasattr(os, "sched_getaffinity") else False
            clock = "process" if pinned else "wall"
        if clock not in CLOCKS and clock != "events":
            raise ValueError(f"clock must be one of {', '.join(CLOCKS)}, events or auto")
        if clock == "process" and self.backend != "cpu":
            raise MeasureError("backend", "--clock process times CPU kernels only; "
                                          f"use --clock events or wall on {self.backend}")
        self.clock = clock
        self.clock_fn = CLOCKS.get(clock, time.perf_counter_ns)
        # an accelerator's host thread waits on the device: its switches
        # say nothing about the kernel
        self.switch_count = _switches if self.backend == "cpu" else _none
        self.target = describe(self.device, clock)
        self.key = target_key(self.target)
        # called between calibrations and rounds of samples (a fraction of a
        # second apart at most): measure's worker sets it to exit
        # once its parent is gone, rather than time the rest of a batch
        # nobody will read
        self.between_steps = _none

    # ------------------------------------------------------------ compile
    def looped(self, text: str, prefix: str = "", as_entry: bool = True):
        """The kernel inside its timing loop (hlo.compilable.Looped);
        MeasureError for a kernel that cannot be looped."""
        from tpuperf_cli.hlo.compilable import looped_kernel

        coll = _collectives(text)
        if coll:
            raise MeasureError("collective", f"{', '.join(coll)} needs other devices or a host "
                                             f"peer; cannot run alone on one device")
        try:
            return looped_kernel(text, prefix=prefix, as_entry=as_entry)
        except ParseError as e:
            raise MeasureError("parse", str(e)) from None
        except ValueError as e:
            raise MeasureError("unsupported", str(e)) from None

    def compile(self, text: str) -> tuple[Any, list]:
        """Parse, wrap in the timing loop and compile one kernel module;
        returns (executable, parameter shapes), the last parameter being
        the trip count."""
        return self.compile_module(self._alone(text))

    def compile_module(self, looped: str) -> tuple[Any, list]:
        """Compile a module of looped kernels (one, or a bundle); returns
        (executable, parameter shapes)."""
        comp, params = program_of(looped)
        try:
            return compile_program(self.client, self.device, comp), params
        except MeasureError as e:
            if "mhlo.copy" not in e.message:
                raise
        # jaxlib 0.11 no longer legalizes HLO's copy out of StableHLO (78
        # kernels of the GPU corpus); through StableHLO a copy is the
        # identity on values anyway (a layout change moves its data by the
        # transposes hlo.compilable puts around the kernel), so it becomes
        # a reshape to the same shape; earlier jaxlib never gets here
        from tpuperf_cli.hlo.compilable import copies_as_reshapes

        comp, params = program_of(copies_as_reshapes(looped))
        return compile_program(self.client, self.device, comp), params

    def _compile_all(self, modules: Sequence[str]) -> list:
        """(executable, parameter shapes) or a MeasureError for each module:
        in this process, or on the compile pool's processes at once (each
        executable then comes back serialized, and loading it here costs a
        few percent of compiling it)."""
        if self.compiler is None:
            out = []
            for text in modules:
                try:
                    out.append(self.compile_module(text))
                except MeasureError as e:
                    out.append(e)
            return out
        from jax._src.lib import xla_client as xc

        out = [None] * len(modules)
        todo = []
        for i, text in enumerate(modules):
            try:
                todo.append((i, program_of(text)[1]))
            except MeasureError as e:
                out[i] = e
        blobs = self.compiler.compile_many([modules[i] for i, _ in todo])
        for (i, params), blob in zip(todo, blobs):
            if isinstance(blob, MeasureError):
                out[i] = blob
                continue
            try:
                exe = self.client.deserialize_executable(blob, xc.DeviceList((self.device,)),
                                                          _compile_options())
            except Exception as e:
                out[i] = MeasureError("compile", "loading the compiled kernel: " + error_text(e))
                continue
            out[i] = (exe, params)
        return out

    # ------------------------------------------------------------ inputs
    def put(self, host: np.ndarray) -> Any:
        """A host array copied to the device, its dtype kept: the client's
        own buffer_from_pyval (jaxlib 0.6) keeps 64-bit types as they are;
        newer jaxlib has only jax.device_put, which keeps them with x64 on
        (set in __init__)."""
        own = getattr(self.client, "buffer_from_pyval", None)
        if own is not None:
            return own(host, self.device, force_copy=True)
        import jax

        return jax.device_put(host, self.device)

    def inputs(self, params: Sequence[Any], index_bounds: dict | None = None) -> list:
        """Device arrays for the parameter shapes (see the module docstring);
        index_bounds: {parameter number: bound} of the parameters drawn as
        indices in [0, bound) rather than zeros."""
        rng = np.random.default_rng(self.seed)
        arrays = []
        for i, s in enumerate(params):
            dtype = np.dtype(s.numpy_dtype())
            dims = tuple(s.dimensions())
            kind = dtype.kind
            bound = (index_bounds or {}).get(i, 0)
            if dtype == np.bool_:
                host = rng.random(dims) < 0.5
            elif kind in "iu" and bound > 1:
                host = rng.integers(0, min(bound, np.iinfo(dtype).max), dims).astype(dtype)
            elif kind in "iu" or dtype.name in ("int4", "uint4", "int2", "uint2"):
                host = np.zeros(dims, dtype)  # ml_dtypes' sub-byte ints are kind "V"
            elif kind == "c":
                host = (rng.uniform(0.5, 1.5, dims) + 1j * rng.uniform(0.5, 1.5, dims)).astype(dtype)
            elif kind == "f" or dtype.name.startswith(("bfloat", "float")):
                # drawn as float32, not as float64 then converted: several
                # times faster for the large inputs of heavy kernels
                host = (rng.random(dims, dtype=np.float32) + np.float32(0.5)).astype(dtype)
            else:
                raise MeasureError("unsupported", f"cannot make inputs of type {dtype} ({s})")
            arrays.append(self.put(host))
        for a in arrays:
            a.block_until_ready()
        return arrays

    # ------------------------------------------------------------ timing
    def _ready(self, exe, kernels):
        """A calibrated _Timed for each kernel of an executable: kernels are
        (position of its first parameter, its parameter shapes but n), the
        n of each following its parameters."""
        inputs = [self._inputs(shapes) for _, shapes in kernels]
        zero = self.put(np.int32(0))
        timed = []
        for k, (start, shapes) in enumerate(kernels):
            before = [a for j in range(k) for a in inputs[j] + [zero]]
            after = [a for j in range(k + 1, len(kernels)) for a in inputs[j] + [zero]]
            t = _Timed(self, exe, before, inputs[k], after)
            self.between_steps()
            try:
                t.calibrate()
            except Exception as e:
                raise MeasureError("run", error_text(e)) from None
            timed.append(t)
        return timed

    def _inputs(self, shapes, index_bounds=None):
        try:
            return self.inputs(shapes, index_bounds)
        except MeasureError:
            raise
        except Exception as e:
            raise MeasureError("inputs", error_text(e)) from None

    def _prepare_all(self, bundles):
        """For each bundle (a list of (index, text, Looped)), a list of
        (index, _Timed or MeasureError). Every bundle of the batch is
        compiled first, all at once (on the compile pool when there is
        one), then each gets its inputs and is calibrated. A bundle that
        does not compile or run is taken apart: its kernels are compiled
        one by one, so that each failure is its own."""
        from tpuperf_cli.hlo.compilable import bundle_module

        modules = []
        for bundle in bundles:
            if len(bundle) > 1:
                modules.append(bundle_module([lk for _, _, lk in bundle]))
            else:  # a kernel alone, as _one_by_one compiles it
                try:
                    modules.append(self._alone(bundle[0][1]))
                except MeasureError as e:
                    modules.append(e)
        texts = [m for m in modules if isinstance(m, str)]
        compiled = iter(self._compile_all(texts))
        for bundle, module in zip(bundles, modules):
            done = module if isinstance(module, MeasureError) else next(compiled)
            if len(bundle) == 1:
                yield self._ready_alone(bundle[0][0], done)
                continue
            if not isinstance(done, MeasureError):
                exe, params = done
                kernels, at = [], 0
                for _, _, lk in bundle:
                    kernels.append((at, params[at:at + len(lk.params) - 1]))
                    at += len(lk.params)
                try:
                    yield list(zip((i for i, _, _ in bundle), self._ready(exe, kernels)))
                    continue
                except MeasureError:
                    pass
            yield self._one_by_one(bundle)

    def _alone(self, text):
        """The module that times one kernel alone."""
        return "\n".join(["HloModule timing", ""] + self.looped(text).lines)

    def _ready_alone(self, i, done):
        """[(i, _Timed or MeasureError)] for a kernel compiled alone."""
        if isinstance(done, MeasureError):
            return [(i, done)]
        exe, params = done
        try:
            return [(i, self._ready(exe, [(0, params[:-1])])[0])]
        except MeasureError as e:
            return [(i, e)]
        except Exception as e:  # anything else is this kernel's problem too
            return [(i, MeasureError("run", error_text(e)))]

    def _one_by_one(self, bundle):
        out, modules = [], []
        for i, text, _ in bundle:
            try:
                modules.append((i, self._alone(text)))
            except MeasureError as e:
                out.append((i, e))
        for (i, _), done in zip(modules, self._compile_all([m for _, m in modules])):
            out += self._ready_alone(i, done)
        return sorted(out, key=lambda pair: pair[0])

    def _bundles(self, texts, results):
        """Lists of (index, text, Looped) to compile together: up to
        `bundle` kernels whose outputs (zero-filled by every call, for every
        kernel of the bundle) take at most BUNDLE_OUTPUT_BYTES. A kernel
        that cannot be looped gets its error in results."""
        bundle, out_bytes = [], 0
        for i, text in enumerate(texts):
            try:
                lk = self.looped(text, prefix=f"k{i}.", as_entry=False)
            except MeasureError as e:
                results[i] = e
                continue
            except Exception as e:
                results[i] = MeasureError("parse", error_text(e))
                continue
            size = sum(leaf.byte_size() for leaf in lk.result.leaves())
            if bundle and (len(bundle) >= self.bundle or out_bytes + size > BUNDLE_OUTPUT_BYTES):
                yield bundle
                bundle, out_bytes = [], 0
            bundle.append((i, text, lk))
            out_bytes += size
        if bundle:
            yield bundle

    def measure_many(self, texts: Sequence[str]) -> list[Measurement | MeasureError]:
        """A Measurement or a MeasureError for each kernel text, in order.
        The kernels are compiled (in bundles) and calibrated, then sampled
        in `samples` rounds across all of them."""
        if self.clock == "events":
            return self._measure_by_events(texts)
        results = [None] * len(texts)
        group, group_bytes = [], 0
        for prepared in self._prepare_all(list(self._bundles(texts, results))):
            for i, timed in prepared:
                if isinstance(timed, MeasureError):
                    results[i] = timed
                    continue
                group.append((i, timed))
                group_bytes += timed.input_bytes
            if group_bytes > BATCH_BYTES:
                self._rounds(group, results)
                group, group_bytes = [], 0
        self._rounds(group, results)
        return results

    def _rounds(self, group, results, retry=True):
        live = list(group)
        for _ in range(self.samples):
            self.between_steps()
            for entry in list(live):
                try:
                    entry[1].sample()
                except Exception as e:
                    results[entry[0]] = MeasureError("run", error_text(e))
                    live.remove(entry)
        again = []
        for i, timed in live:
            try:
                results[i] = timed.result()
            except MeasureError as e:
                results[i] = e
                if e.kind == "untimed" and retry:
                    again.append((i, timed))
        # A burst of interference during calibration overstates a call's
        # fixed cost, and then the samples fall below it: such a kernel is
        # calibrated and sampled once more before it is called untimed. A
        # kernel whose work truly does not show is untimed twice.
        for i, timed in again:
            timed.samples, timed.dropped = [], 0
            try:
                timed.calibrate()
            except Exception as e:
                results[i] = MeasureError("run", error_text(e))
        again = [(i, t) for i, t in again if results[i].kind == "untimed"]
        if again:
            self._rounds(again, results, retry=False)

    def _measure_by_events(self, texts):
        """measure_many with --clock events (see events.py): each kernel
        compiled alone, called `samples` times inside its own annotation
        of one profiler session, its samples the device time of each call."""
        from tpuperf_cli.hlo.compilable import compilable_module, index_bounds

        from .events import Session, call_samples, instruction_names

        results = [None] * len(texts)
        modules = []
        for i, text in enumerate(texts):
            coll = _collectives(text)
            if coll:
                results[i] = MeasureError("collective", f"{', '.join(coll)} needs other devices "
                                                        f"or a host peer; cannot run alone")
                continue
            try:
                modules.append((i, compilable_module(text)))
            except ParseError as e:
                results[i] = MeasureError("parse", str(e))
        ready, names = [], {}
        for (i, _), done in zip(modules, self._compile_all([m for _, m in modules])):
            if isinstance(done, MeasureError):
                results[i] = done
                continue
            exe, params = done
            if self.backend == "cpu":   # which host events are this kernel's thunks
                names[str(i)] = instruction_names(m.to_string() for m in exe.hlo_modules())
            try:
                # on an accelerator a scatter's indices spread over its rows
                # (all zeros would queue its atomic updates on one); XLA:CPU's
                # scatter is a serial loop, and its corpus was timed on zeros
                bounds = index_bounds(texts[i]) if self.backend != "cpu" else None
                args = self._inputs(params, bounds)
                call = _caller(exe, args)
                call()  # warm up: first touch, lazy initialisation, autotuning
                call()
            except MeasureError as e:
                results[i] = e
                continue
            except Exception as e:
                results[i] = MeasureError("run", error_text(e))
                continue
            ready.append((i, call))
        if not ready:
            return results
        session = Session()
        try:
            for i, call in ready:
                with session.annotate(str(i)):
                    for _ in range(self.samples):
                        call()
        except Exception as e:
            session.stop()
            for i, _ in ready:
                results[i] = MeasureError("run", error_text(e))
            return results
        got = call_samples(session.stop(), self.backend, [str(i) for i, _ in ready], self.samples,
                           names if self.backend == "cpu" else None)
        for i, _ in ready:
            samples = got[str(i)]
            if isinstance(samples, str):
                results[i] = MeasureError("untimed", samples)
            else:
                results[i] = summarize(samples)
        return results

    def measure(self, text: str) -> Measurement:
        """The Measurement of one kernel text; raises MeasureError."""
        (result,) = self.measure_many([text])
        if isinstance(result, MeasureError):
            raise result
        return result


def _none():
    return None


def _caller(exe, args):
    """A function making one call of a compiled kernel and waiting for it."""
    def call():
        exe.execute_sharded(args, with_tokens=True).consume_token().block_until_ready()
    return call
