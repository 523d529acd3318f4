"""Time one kernel's standalone HloModule on a real device through XLA.

The path from HLO text to a number, the same for every backend:

1. ``hlo_module_from_text`` parses the kernel's standalone module;
2. the module goes to an ``XlaComputation`` and then to a StableHLO MLIR
   module (``xla_computation_to_mlir_module``), the form jaxlib 0.6's PJRT
   client compiles;
3. ``client.compile_and_load`` compiles it for one device of the chosen
   backend, with the ENTRY parameter layouts of the original module passed
   as ``argument_layouts`` (StableHLO has no layouts of its own);
4. inputs of the parameters' shapes and dtypes are made on the host and put
   on the device once (``device_put``);
5. the executable runs once to warm up, then repeatedly: a run repeats the
   kernel until it has taken at least ``min_time`` seconds and divides; the
   runtime is the minimum over ``runs`` runs (the paper's min of 3). A run's
   duration is wall time, or with clock="process" the CPU time of this
   process (see CLOCKS).

The kernel text is already optimized HLO. Compiling it again runs XLA's
pipeline a second time; for a one-kernel module that mostly leaves it alone
(a fusion is the only instruction, there is nothing to fuse it with), but
the backend may still rewrite it (e.g. layout assignment, or a dot lowered to
a library call). Fusion passes are left enabled: disabling them would make
an unfused op compile differently from the way XLA compiles it in a program.
The per-call dispatch overhead of the PJRT client (about 4.4 us on the
project's CPU machine, waiting on the completion token) is part of every
measured runtime.

The module text is first rewritten by `prepare` (fused computation as ENTRY,
bitcast as reshape); see there why.

Input values: floating-point (and complex) inputs are uniform in [0.5, 1.5):
positive, so log/sqrt/rsqrt/pow/divide stay finite, and far from denormals,
which are slow on some CPUs. Integer inputs are all zeros: zero is a valid
index into every dimension, so every gather, scatter, dynamic-slice and
dynamic-update-slice stays in bounds whatever the shapes (XLA would clamp or
skip out-of-bound indices, which changes the work done), and integer
division by zero is defined in XLA. Booleans are random. The one known
distortion: on GPU/TPU a scatter whose indices are all equal serialises its
updates on one location.
"""

import hashlib
import json
import math
import os
import platform as _platform
import re
import time

__all__ = [
    "IsolatedMeasurer", "prepare", "worker_main",
    "MeasureError", "Measurer", "hlo_fingerprint", "target_key", "pick_backend",
    "BACKENDS", "COLLECTIVE_OPCODES",
]

BACKENDS = ("tpu", "gpu", "cpu")

# wall: elapsed time. process: CPU time of the measuring process (all its
# threads): time spent descheduled on a busy machine does not count, so with
# the process pinned to one CPU it estimates the wall time on an idle one.
CLOCKS = {"wall": time.perf_counter_ns, "process": time.process_time_ns}

# Bumped when the way of timing changes, so cached values from the old way
# are not reused (it is part of the cache key, not of the record's target).
METHOD = 2

# Ops that need several devices or a host on the other end: a standalone
# kernel with one of these cannot be timed meaningfully on one device.
COLLECTIVE_OPCODES = frozenset("""
all-reduce all-reduce-start all-reduce-done all-gather all-gather-start all-gather-done
all-to-all collective-permute collective-permute-start collective-permute-done
reduce-scatter collective-broadcast ragged-all-to-all
send send-done recv recv-done infeed outfeed partition-id replica-id
""".split())

_OPCODE_RE = re.compile(r"=\s*\S.*?\s([a-z][a-z0-9\-]*)\(")


class MeasureError(Exception):
    """A kernel that cannot be timed; ``kind`` groups reasons in summaries."""

    def __init__(self, kind, message):
        super().__init__(f"{kind}: {message}")
        self.kind = kind
        self.message = message


def hlo_fingerprint(text):
    """A stand-in fingerprint for records without one: sha256 of the text
    without metadata and with runs of blank space made one space (names are
    kept: hlo-split's own fingerprint also normalises those)."""
    t = re.sub(r",?\s*metadata=\{[^{}]*\}", "", text)
    t = re.sub(r"\s+", " ", t).strip()
    return hashlib.sha256(t.encode()).hexdigest()[:32]


def _cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return _platform.processor() or _platform.machine() or "unknown cpu"


def _usable_cpus():
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count()


def pin_cpus(n):
    """Restrict this process to n of its CPUs (the last ones), before jax
    starts: XLA:CPU sizes its thread pool from the CPUs it may use. Returns
    the CPUs kept."""
    allowed = sorted(os.sched_getaffinity(0))
    if n < 1 or n > len(allowed):
        raise MeasureError("backend", f"--cpus {n}: this process may use {len(allowed)} CPU(s)")
    keep = set(allowed[-n:])
    os.sched_setaffinity(0, keep)
    return keep


def target_key(target):
    """A short stable key for a target map (the cache's second key)."""
    blob = json.dumps(target, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def pick_backend(requested=None):
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


def _error_text(e, limit=600):
    """The useful part of an XLA error: its first lines, without MLIR locs."""
    lines = [l for l in str(e).strip().splitlines() if l.strip()]
    text = " | ".join(lines[:3]) if lines else type(e).__name__
    return text if len(text) <= limit else text[:limit] + "..."


def entry_opcodes(text):
    """Opcodes used anywhere in a module's text (cheap scan, no parse)."""
    ops = set()
    for line in text.splitlines():
        m = _OPCODE_RE.search(line)
        if m:
            ops.add(m.group(1))
    return ops


_COMP_HEADER_RE = re.compile(r"^(ENTRY\s+)?%?([\w.\-]+)\s*(\(.*\))?\s*(->.*)?\{\s*$")
_CALLS_RE = re.compile(r"\bcalls=%?([\w.\-]+)")
_BITCAST_RE = re.compile(r"(\s)bitcast\(")


def _computations(text):
    """Split module text into (header lines, [(name, is_entry, lines)])."""
    header, comps, cur = [], [], None
    for line in text.splitlines():
        stripped = line.strip()
        if cur is None:
            m = _COMP_HEADER_RE.match(stripped) if stripped.endswith("{") else None
            if m and not stripped.startswith("HloModule"):
                cur = (m.group(2), bool(m.group(1)), [line])
                continue
            if comps or stripped.startswith("HloModule"):
                header.append(line)
            continue
        cur[2].append(line)
        if stripped == "}":
            comps.append(cur)
            cur = None
    return header, comps


_DEF_RE = re.compile(r"^(\s*)(ROOT\s+)?%([\w.\-]+)(\s*=\s*)(.*)$")
_REF_RE = re.compile(r"%([\w.\-]+)")


def _call_operands(line, opcode):
    """Operand names of `opcode(...)` in an instruction line, or None."""
    m = re.search(r"\s" + re.escape(opcode) + r"\(", line)
    if not m:
        return None
    depth, i = 1, m.end()
    while i < len(line) and depth:
        depth += {"(": 1, ")": -1}.get(line[i], 0)
        i += 1
    return _REF_RE.findall(line[m.end(): i - 1])


def _inline_fusions(comps, entry_name, limit=64):
    """Replace every fusion instruction in the ENTRY by the instructions of
    its fused computation (renamed apart; the fused root takes the fusion's
    name), until none is left. comps: [(name, is_entry, lines)]."""
    by_name = {c[0]: c for c in comps}
    for _ in range(limit):
        entry = by_name[entry_name]
        lines = entry[2]
        for pos, line in enumerate(lines):
            if not re.search(r"\sfusion\(", line):
                continue
            d = _DEF_RE.match(line)
            m = _CALLS_RE.search(line)
            operands = _call_operands(line, "fusion")
            if not (d and m and operands is not None and m.group(1) in by_name):
                return False
            fused = by_name[m.group(1)][2]
            indent, is_root, fname = d.group(1), bool(d.group(2)), d.group(3)
            rename, body = {}, []
            defs = [(_DEF_RE.match(l), l) for l in fused[1:-1] if l.strip()]
            for dm, l in defs:
                if dm is None:
                    return False
                pm = re.search(r"\sparameter\((\d+)\)", dm.group(5))
                if pm:
                    k = int(pm.group(1))
                    if k >= len(operands):
                        return False
                    rename[dm.group(3)] = operands[k]
                elif dm.group(2):
                    rename[dm.group(3)] = fname
                else:
                    rename[dm.group(3)] = f"{dm.group(3)}.inl{pos}"
            for dm, l in defs:
                if re.search(r"\sparameter\(\d+\)", dm.group(5)):
                    continue
                rest = _REF_RE.sub(lambda r: "%" + rename.get(r.group(1), r.group(1)),
                                   dm.group(5))
                root = "ROOT " if dm.group(2) and is_root else ""
                body.append(f"{indent}{root}%{rename[dm.group(3)]}{dm.group(4)}{rest}")
            lines[pos:pos + 1] = body
            break
        else:
            return True
    return False


def prepare(text):
    """Rewrite a kernel module so XLA compiles it from StableHLO.

    Rewrites that keep the work the kernel does:

    * a module whose ENTRY only feeds its parameters to one fusion becomes
      the fused computation itself (marked ENTRY): the StableHLO importer
      keeps a fusion as an `mhlo.fusion` region without the layouts of its
      instructions, which XLA:CPU then aborts on (a CHECK failure, not an
      error); the fused ops compiled plainly are re-fused by XLA's pipeline;
    * fusions left in the ENTRY (nested fusions, as in TPU kernels) are
      inlined the same way, their instructions renamed apart;
    * `bitcast` (after layout assignment, a reshape that moves no data)
      becomes `reshape`: the importer gives a bitcast the wrong layout
      attributes and compilation fails.

    Text in another form than XLA prints (names without %) is left as it is.
    """
    header, comps = _computations(text)
    if not comps or not header or not header[0].lstrip().startswith("HloModule"):
        return text  # not the layout we know: let the parser speak
    entries = [c for c in comps if c[1]]
    if len(entries) == 1:
        name, _, lines = entries[0]
        body = [l for l in lines[1:-1] if l.strip() and not l.strip().startswith("//")]
        work = [l for l in body if not re.search(r"\sparameter\(\d+\)", l)]
        changed = False
        if len(work) == 1 and re.search(r"\sfusion\(", work[0]):
            m = _CALLS_RE.search(work[0])
            if m and m.group(1) in {c[0] for c in comps}:
                fused = m.group(1)
                comps = [(c, c == fused, (["ENTRY " + l[0].lstrip()] + l[1:]) if c == fused
                          else l) for c, _, l in comps if c != name]
                name = fused
                changed = True
        comps = [(c, e, list(l)) for c, e, l in comps]
        if any(re.search(r"\sfusion\(", l) for l in dict((c, l) for c, e, l in comps)[name]):
            changed = _inline_fusions(comps, name) or changed
        if changed:
            out = [header[0].split(",")[0].rstrip(), ""]
            for _, _, clines in comps:
                out.extend(clines)
                out.append("")
            text = "\n".join(out)
    return _BITCAST_RE.sub(r"\1reshape(", text)


class Measurer:
    """Compiles and times kernels on one device of one backend.

    ``measure(hlo_text)`` returns ``(runtime_ns, runs_ns)`` or raises
    MeasureError. ``target`` describes the device (the record's target).
    """

    def __init__(self, backend=None, runs=3, min_time=0.01, max_repeats=1_000_000,
                 seed=0, clock="wall"):
        import jax

        if runs < 1:
            raise ValueError("runs must be >= 1")
        # On CPU run executables inline on the calling thread: no two
        # executions overlap and a returned call is a finished call.
        jax.config.update("jax_cpu_enable_async_dispatch", False)
        self.backend = pick_backend(backend)
        self.device = jax.devices(self.backend)[0]
        self.client = self.device.client
        self.runs = runs
        self.min_time = float(min_time)
        self.max_repeats = max_repeats
        self.seed = seed
        if clock not in CLOCKS:
            raise ValueError(f"clock must be one of {', '.join(CLOCKS)}")
        self.clock = clock
        if clock == "process" and self.backend != "cpu":
            raise MeasureError("backend", "--clock process times CPU kernels only; "
                                          f"use --clock wall on {self.backend}")
        self.target = self._describe()
        self.key = target_key({**self.target, "method": METHOD})

    # ------------------------------------------------------------ target
    def _describe(self):
        import jax
        import jaxlib

        dev = self.device
        platform = {"cuda": "gpu", "rocm": "gpu"}.get(dev.platform, dev.platform)
        target = {
            "platform": platform,
            "device_kind": str(dev.device_kind),
            "chip": _cpu_model() if platform == "cpu" else str(dev.device_kind),
            "jax": jax.__version__,
            "jaxlib": jaxlib.__version__,
        }
        if platform == "cpu":
            target["cpu_count"] = _usable_cpus()
        if self.clock != "wall":
            target["clock"] = self.clock
        try:
            target["platform_version"] = str(self.client.platform_version)
        except Exception:  # pragma: no cover - depends on the plugin
            pass
        return target

    # ------------------------------------------------------------ compile
    def compile(self, text):
        """Parse and compile one module; returns (executable, parameter shapes)."""
        from jax._src.lib import xla_client as xc

        used = entry_opcodes(text)
        coll = sorted(used & COLLECTIVE_OPCODES)
        if coll:
            raise MeasureError("collective", f"{', '.join(coll)} needs other devices or a host "
                                             f"peer; cannot run alone on one device")
        try:
            module = xc._xla.hlo_module_from_text(text)
        except Exception as e:
            raise MeasureError("parse", _error_text(e)) from None
        comp = xc.XlaComputation(module.as_serialized_hlo_module_proto())
        params = comp.program_shape().parameter_shapes()
        for i, s in enumerate(params):
            if s.is_tuple():
                raise MeasureError("unsupported", f"parameter {i} is a tuple ({s}); "
                                                  f"only array parameters can be fed")
            if s.is_token():
                raise MeasureError("unsupported", f"parameter {i} is a token")
            if not s.is_static():
                raise MeasureError("unsupported", f"parameter {i} has a dynamic shape ({s})")
        try:
            mlir = xc._xla.mlir.xla_computation_to_mlir_module(comp)
        except Exception as e:
            raise MeasureError("convert", _error_text(e)) from None
        options = xc.CompileOptions()
        options.num_replicas = 1
        options.num_partitions = 1
        layouts = [s for s in params if s.layout() is not None] if params else []
        if params and len(layouts) == len(params):
            options.argument_layouts = list(params)
        try:
            exe = self.client.compile_and_load(
                mlir, xc.DeviceList((self.device,)), options)
        except Exception as e:
            raise MeasureError("compile", _error_text(e)) from None
        return exe, params

    # ------------------------------------------------------------ inputs
    def inputs(self, params):
        """Device arrays for the parameter shapes (see the module docstring)."""
        import numpy as np

        rng = np.random.default_rng(self.seed)
        arrays = []
        for s in params:
            dtype = np.dtype(s.numpy_dtype())
            dims = tuple(s.dimensions())
            kind = dtype.kind
            if dtype == np.bool_:
                host = rng.random(dims) < 0.5
            elif kind in "iu" or dtype.name in ("int4", "uint4", "int2", "uint2"):
                host = np.zeros(dims, dtype)  # ml_dtypes' sub-byte ints are kind "V"
            elif kind == "c":
                host = (rng.uniform(0.5, 1.5, dims) + 1j * rng.uniform(0.5, 1.5, dims)).astype(dtype)
            elif kind == "f" or dtype.name.startswith(("bfloat", "float")):
                host = rng.uniform(0.5, 1.5, dims).astype(np.float32).astype(dtype)
            else:
                raise MeasureError("unsupported", f"cannot make inputs of type {dtype} ({s})")
            arrays.append(self._put(host, s))
        for a in arrays:
            a.block_until_ready()
        return arrays

    def _put(self, host, shape):
        """One host array onto the device, in the parameter's layout when that
        is not the default one. The client's own buffer_from_pyval keeps
        64-bit types as they are (jax.device_put would narrow them unless
        x64 mode is on)."""
        import jax

        m2m = tuple(shape.layout().minor_to_major()) if shape.layout() is not None else ()
        default = tuple(range(len(host.shape) - 1, -1, -1))
        if len(host.shape) > 1 and m2m and m2m != default:
            try:
                from jax.experimental import enable_x64
                from jax.experimental.layout import DeviceLocalLayout, Format
                from jax.sharding import SingleDeviceSharding

                fmt = Format(DeviceLocalLayout(major_to_minor=tuple(reversed(m2m))),
                             SingleDeviceSharding(self.device))
                with enable_x64():
                    return jax.device_put(host, fmt)
            except Exception:
                pass  # fall back to the default layout; PJRT relayouts if it must
        return self.client.buffer_from_pyval(host, self.device, force_copy=True)

    # ------------------------------------------------------------ timing
    @staticmethod
    def _call(exe, args):
        """One call that returns when the kernel has finished. The cheap way
        waits on the execution's completion token and never wraps outputs as
        Python arrays (about 3 us less per call on CPU than execute() and
        waiting on every output, which is the fallback)."""
        def by_token():
            exe.execute_sharded(args, with_tokens=True).consume_token().block_until_ready()

        def by_outputs():
            for o in exe.execute(args):
                o.block_until_ready()

        try:
            by_token()
            return by_token
        except Exception:
            by_outputs()
            return by_outputs

    def _time(self, call, n):
        clock = CLOCKS[self.clock]
        t0 = clock()
        for _ in range(n):
            call()
        return clock() - t0

    def measure(self, text):
        """(runtime_ns, [run_ns, ...]) for one module's text."""
        exe, params = self.compile(prepare(text))
        try:
            args = self.inputs(params)
        except MeasureError:
            raise
        except Exception as e:
            raise MeasureError("inputs", _error_text(e)) from None
        try:
            call = self._call(exe, args)  # warm-up: first-touch, caches, lazy init
            first = self._time(call, 1)
            probe = self._time(call, 1)
            target_ns = self.min_time * 1e9
            n = 1
            elapsed = max(min(first, probe), 1)
            # grow the repeat count until one run passes min_time; these
            # calibration runs are not timed runs (the first batch is often
            # slow, and a slow kernel's min would be over more calls)
            while elapsed < target_ns and n < self.max_repeats:
                n = min(self.max_repeats, max(2 * n, math.ceil(n * 1.1 * target_ns / elapsed)))
                elapsed = max(self._time(call, n), 1)
            runs = [self._time(call, n) / n for _ in range(self.runs)]
        except MeasureError:
            raise
        except Exception as e:
            raise MeasureError("run", _error_text(e)) from None
        finally:
            del args
        runs = [float(r) for r in runs]
        return min(runs), runs


# ---------------------------------------------------------------- isolation

class IsolatedMeasurer:
    """A Measurer in a child process, so that an XLA abort (a failed CHECK
    kills the whole process, it is not an exception) or a kernel that never
    finishes costs one error field, not the run. Same interface as Measurer;
    the parent never imports jax. The child is restarted after a crash.
    """

    def __init__(self, backend=None, runs=3, min_time=0.01, timeout=300.0, cpus=None,
                 clock="wall"):
        self.config = {"backend": backend, "runs": runs, "min_time": float(min_time),
                       "cpus": cpus, "clock": clock}
        self.runs = runs
        self.min_time = float(min_time)
        self.timeout = timeout
        self._proc = None
        self._start()

    def _start(self):
        import subprocess
        import sys
        import tempfile

        import msgpack

        self._errlog = tempfile.TemporaryFile()
        code = "from tpuperf_cli.measure.runner import worker_main; worker_main()"
        env = dict(os.environ)
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
        self._proc = subprocess.Popen(
            [sys.executable, "-c", code, json.dumps(self.config)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._errlog, env=env)
        self._unpacker = msgpack.Unpacker(raw=False)
        hello = self._receive(120.0)
        if hello is None or "fatal" in hello:
            why = hello["fatal"] if hello else self._stderr_tail() or "worker did not start"
            kind = hello.get("kind", "backend") if hello else "backend"
            self.close()
            raise MeasureError(kind, why)
        self.target = hello["target"]
        self.key = hello["key"]

    def _stderr_tail(self, n=3):
        try:
            self._errlog.seek(0)
            lines = [l.strip() for l in self._errlog.read().decode(errors="replace").splitlines()
                     if l.strip()]
        except (OSError, ValueError):
            return ""
        return " | ".join(lines[-n:])

    def _receive(self, timeout):
        import select

        fd = self._proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        while True:
            for obj in self._unpacker:
                return obj
            left = deadline - time.monotonic()
            if left <= 0:
                return "timeout"
            ready, _, _ = select.select([fd], [], [], min(left, 1.0))
            if ready:
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    return None  # the child died
                self._unpacker.feed(chunk)

    def measure(self, text):
        import msgpack

        if self._proc is None or self._proc.poll() is not None:
            self._start()
        try:
            self._proc.stdin.write(msgpack.packb({"hlo": text}, use_bin_type=True))
            self._proc.stdin.flush()
        except BrokenPipeError:
            reply = None
        else:
            reply = self._receive(self.timeout)
        if reply == "timeout":
            self._kill()
            raise MeasureError("timeout", f"no result after {self.timeout:g}s; worker killed")
        if reply is None:
            code = self._proc.wait()
            tail = self._stderr_tail()
            self._kill()
            sig = f"signal {-code}" if code < 0 else f"exit {code}"
            raise MeasureError("crash", f"XLA aborted the process ({sig}): {tail or 'no message'}")
        if "error" in reply:
            raise MeasureError(reply["kind"], reply["error"])
        # the child's stderr is only kept for the last crash
        self._errlog.seek(0)
        self._errlog.truncate()
        return reply["runtime_ns"], reply["runs"]

    def _kill(self):
        if self._proc is not None:
            if self._proc.poll() is None:
                self._proc.kill()
            self._proc.wait()
            for f in (self._proc.stdin, self._proc.stdout):
                try:
                    f.close()
                except OSError:
                    pass
            self._proc = None

    def close(self):
        """Stop the child at once (it holds nothing worth waiting for: every
        result is already with the parent)."""
        self._kill()
        try:
            self._errlog.close()
        except Exception:
            pass


def worker_main():
    """The child side of IsolatedMeasurer: msgpack requests on stdin,
    replies on stdout."""
    import signal
    import sys

    import msgpack

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C
    config = json.loads(sys.argv[1])
    out = sys.stdout.buffer
    pack = msgpack.Packer(use_bin_type=True).pack

    def send(obj):
        out.write(pack(obj))
        out.flush()

    try:
        if config.get("cpus"):
            pin_cpus(config["cpus"])
        m = Measurer(config["backend"], runs=config["runs"], min_time=config["min_time"],
                     clock=config.get("clock", "wall"))
    except MeasureError as e:
        send({"fatal": e.message, "kind": e.kind})
        return
    except Exception as e:
        send({"fatal": _error_text(e), "kind": "backend"})
        return
    send({"target": m.target, "key": m.key})
    unpacker = msgpack.Unpacker(raw=False)
    stdin = sys.stdin.buffer
    while True:
        chunk = stdin.read1(1 << 16)
        if not chunk:
            return
        unpacker.feed(chunk)
        for req in unpacker:
            try:
                runtime, runs = m.measure(req["hlo"])
                send({"runtime_ns": runtime, "runs": runs})
            except MeasureError as e:
                send({"error": e.message, "kind": e.kind})
            except Exception as e:  # anything else is this kernel's problem too
                send({"error": _error_text(e), "kind": "run"})
