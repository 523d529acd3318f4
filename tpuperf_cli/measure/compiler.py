"""Compile on every CPU, time on one: measure's compile pool.

Compiling is most of what measuring a kernel costs on XLA:CPU (LLVM's
optimisation and code generation for every kernel of an executable), and a
kernel timed with `--cpus 1` leaves the machine's other CPUs idle. Timing
beside other work is not an option: on this project's 2-vCPU machines two
processes timing at once lengthen kernels by 14% at the median. So measure
alternates phases. While the timing process waits, a pool of compile
processes, one pinned to each CPU the measure command may use, compiles the
batch's executables and sends them back serialized; then the timing process
loads them (a few percent of compiling) and times them with the other CPUs
idle.

Each compile process is configured like the timing process (one CPU, so
XLA's thread pool of one, and dots and convolutions on the calling thread):
XLA:CPU decides at compile time how many pieces a parallel loop is split
into, from that pool's size, so the code is the code the timing process
would have compiled itself.

A compile process that crashes (XLA aborts on some internal errors) or
hangs costs one error for the module it was compiling, and is restarted for
the next. It dies with its parent (PR_SET_PDEATHSIG), so a measure worker
killed on a timeout leaves no compile running.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence

from .device import MeasureError, error_text

# Seconds a compile process may take to start (import jax, make a client).
START_TIMEOUT = 120.0


class _Compiler:
    """One compile process, pinned to one CPU."""

    def __init__(self, cpu: int, backend: str | None):
        import msgpack

        self.errlog = tempfile.TemporaryFile()
        env = dict(os.environ)
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
        code = "from tpuperf_cli.measure.compiler import compiler_main; compiler_main()"
        self.proc = subprocess.Popen(
            [sys.executable, "-c", code, json.dumps({"cpu": cpu, "backend": backend})],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.errlog, env=env)
        self.fd = self.proc.stdout.fileno()
        self.unpacker = msgpack.Unpacker(raw=False, max_buffer_size=1 << 30)
        self.started = False

    def send(self, obj) -> bool:
        import msgpack

        try:
            self.proc.stdin.write(msgpack.packb(obj, use_bin_type=True))
            self.proc.stdin.flush()
            return True
        except (BrokenPipeError, OSError):
            return False

    def poll(self):
        """The reply to the module being compiled if it is complete, else
        None; EOFError if the process died."""
        chunk = os.read(self.fd, 1 << 20)
        if not chunk:
            raise EOFError
        self.unpacker.feed(chunk)
        for obj in self.unpacker:
            if "hello" in obj:  # jax is up; the reply follows
                self.started = True
                continue
            return obj
        return None

    def why_dead(self) -> str:
        code = self.proc.wait()
        try:
            self.errlog.seek(0)
            lines = [ln.strip() for ln in self.errlog.read().decode(errors="replace").splitlines()
                     if ln.strip()]
        except (OSError, ValueError):
            lines = []
        sig = f"signal {-code}" if code < 0 else f"exit {code}"
        return f"XLA aborted the compile process ({sig}): {' | '.join(lines[-3:]) or 'no message'}"

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for f in (self.proc.stdin, self.proc.stdout, self.errlog):
            try:
                f.close()
            except OSError:
                pass


class CompilePool:
    """Compile processes, one per CPU id in `cpus` (started on first use).
    `compile_many(modules)` returns, for each module text, the serialized
    executable (bytes) or a MeasureError; `timeout` is the seconds one
    module may take."""

    def __init__(self, cpus: Sequence[int], backend: str | None = None, timeout: float = 300.0):
        self.cpus = list(cpus)
        self.backend = backend
        self.timeout = float(timeout)
        self._slots: list[_Compiler | None] = [None] * len(self.cpus)

    def _start(self, slot):
        if self._slots[slot] is None:
            self._slots[slot] = _Compiler(self.cpus[slot], self.backend)
        return self._slots[slot]

    def _drop(self, slot):
        child, self._slots[slot] = self._slots[slot], None
        if child is not None:
            child.kill()

    def compile_many(self, modules: Sequence[str]) -> list[bytes | MeasureError]:
        results: list = [None] * len(modules)
        waiting = list(range(len(modules)))[::-1]
        busy: dict[int, tuple[int, float]] = {}  # slot -> (module index, deadline)
        # the processes start together (jax takes seconds to import)
        for slot in range(min(len(self.cpus), len(modules))):
            self._start(slot)
        while waiting or busy:
            for slot in range(len(self.cpus)):
                if slot in busy or not waiting:
                    continue
                child = self._start(slot)
                i = waiting.pop()
                if not child.send({"module": modules[i]}):
                    results[i] = MeasureError("crash", child.why_dead())
                    self._drop(slot)
                    continue
                limit = self.timeout + (0 if child.started else START_TIMEOUT)
                busy[slot] = (i, time.monotonic() + limit)
            if not busy:
                continue
            fds = {self._slots[slot].fd: slot for slot in busy}
            wait = min(deadline for _, deadline in busy.values()) - time.monotonic()
            ready, _, _ = select.select(list(fds), [], [], min(1.0, max(wait, 0.0)))
            for fd in ready:
                slot = fds[fd]
                child = self._slots[slot]
                i = busy[slot][0]
                try:
                    reply = child.poll()
                except EOFError:
                    results[i] = MeasureError("crash", child.why_dead())
                    del busy[slot]
                    self._drop(slot)
                    continue
                if reply is None:
                    continue
                del busy[slot]
                if "fatal" in reply:
                    results[i] = MeasureError(reply.get("kind", "backend"), reply["fatal"])
                    self._drop(slot)
                elif "error" in reply:
                    results[i] = MeasureError(reply["kind"], reply["error"])
                else:
                    results[i] = reply["exe"]
            now = time.monotonic()
            for slot, (i, deadline) in list(busy.items()):
                if now > deadline:
                    results[i] = MeasureError("timeout", f"compiling took over {self.timeout:g}s; "
                                                         f"compile process killed")
                    del busy[slot]
                    self._drop(slot)
        return results

    def close(self):
        for slot in range(len(self._slots)):
            self._drop(slot)


def _die_with_parent():
    """Ask Linux to kill this process when its parent dies (a compile can
    run for minutes; nobody would be waiting for it)."""
    try:
        import ctypes
        import signal

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:
        pass  # not Linux: the process still ends when its stdin closes


def compiler_main() -> None:
    """The compile process: msgpack {"module": text} requests on stdin, one
    reply each on stdout ({"exe": bytes} or {"error", "kind"}), after a
    {"hello"} once jax is up."""
    from .device import compile_program, program_of, single_threaded_xla
    from .worker import child_channel

    _die_with_parent()
    config, send, requests = child_channel()
    try:
        os.sched_setaffinity(0, {config["cpu"]})
        single_threaded_xla()
        import jax

        device = jax.devices(config["backend"] or "cpu")[0]
        client = device.client
    except Exception as e:
        send({"fatal": error_text(e), "kind": "backend"})
        return
    send({"hello": True})
    # for tests of the crash path (see worker.py)
    abort_on = os.environ.get("TPUPERF_TEST_COMPILE_ABORT_ON")
    hang_on = os.environ.get("TPUPERF_TEST_COMPILE_HANG_ON")
    for req in requests():
        if abort_on and abort_on in req["module"]:
            os.abort()
        if hang_on and hang_on in req["module"]:
            time.sleep(3600)
        try:
            comp, _ = program_of(req["module"])
            exe = compile_program(client, device, comp)
            send({"exe": client.serialize_executable(exe)})
        except MeasureError as e:
            send({"error": e.message, "kind": e.kind})
        except Exception as e:
            send({"error": error_text(e), "kind": "compile"})
