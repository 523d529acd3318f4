"""A Measurer in a child process.

XLA aborts the whole process on some internal errors (a failed CHECK is not
an exception), and a kernel may never finish: in a child, either costs one
error field, not the run. The parent never imports jax; the child is
restarted after a crash. A batch whose child crashed or hung is timed again
one kernel at a time, so that only the guilty kernel gets the error.
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

from .device import SAMPLES, MeasureError, Measurement, error_text


class IsolatedMeasurer:
    """The Measurer interface (measure, measure_many, target, key) over a
    child process. timeout: seconds one kernel may take, compile included;
    cpus: pin the child to that many CPUs (None: all), the last ones of its
    affinity set, or to the CPU ids in cpu_list (measure --jobs gives each
    child its own); compile_cpus: compile on a pool of processes pinned to
    these CPU ids (compiler.CompilePool; CPU backend only), None: in the
    child."""

    def __init__(self, backend: str | None = None, samples: int = SAMPLES, min_time: float = 0.0005,
                 timeout: float = 300.0, cpus: int | None = None, clock: str = "auto",
                 cpu_list: Sequence[int] | None = None, compile_cpus: Sequence[int] | None = None):
        self.config = {"backend": backend, "samples": samples, "min_time": float(min_time),
                       "cpus": cpus, "clock": clock,
                       "cpu_list": sorted(cpu_list) if cpu_list else None,
                       "compile_cpus": sorted(compile_cpus) if compile_cpus else None,
                       "timeout": float(timeout)}
        self.samples = samples
        self.min_time = float(min_time)
        self.timeout = timeout
        self._proc = None
        self._closed = False
        self._busy = False  # a batch is with the child
        self._start()

    def _start(self):
        import msgpack

        if self._closed:  # closed by another thread (measure --jobs)
            raise MeasureError("crash", "measurer closed")
        self._errlog = tempfile.TemporaryFile()
        code = "from tpuperf_cli.measure.worker import worker_main; worker_main()"
        env = dict(os.environ)
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
        self._proc = subprocess.Popen(
            [sys.executable, "-c", code, json.dumps(self.config)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._errlog, env=env)
        if self._closed:
            self._kill()
            raise MeasureError("crash", "measurer closed")
        self._unpacker = msgpack.Unpacker(raw=False)
        hello = self._receive(120.0)
        if not isinstance(hello, dict) or "fatal" in hello:
            why = hello["fatal"] if isinstance(hello, dict) else \
                self._stderr_tail() or "worker did not start"
            kind = hello.get("kind", "backend") if isinstance(hello, dict) else "backend"
            self.close()
            raise MeasureError(kind, why)
        self.target = hello["target"]
        self.key = hello["key"]

    def _stderr_tail(self, n=3):
        try:
            self._errlog.seek(0)
            lines = [line.strip() for line in
                     self._errlog.read().decode(errors="replace").splitlines() if line.strip()]
        except (OSError, ValueError):
            return ""
        return " | ".join(lines[-n:])

    def _receive(self, timeout):
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

    def _ask(self, texts):
        """The child's replies for a batch, or a MeasureError (crash or
        timeout) that concerns the whole batch."""
        import msgpack

        if self._closed:
            raise MeasureError("crash", "measurer closed")
        if self._proc is None or self._proc.poll() is not None:
            self._start()
        self._busy = True
        try:
            self._proc.stdin.write(msgpack.packb({"hlo": list(texts)}, use_bin_type=True))
            self._proc.stdin.flush()
        except BrokenPipeError:
            reply = None
        else:
            reply = self._receive(self.timeout * len(texts))
        finally:
            self._busy = False
        if reply == "timeout":
            self._kill()
            return MeasureError("timeout", f"no result after {self.timeout:g}s; worker killed")
        if reply is None:
            code = self._proc.wait()
            tail = self._stderr_tail()
            self._kill()
            sig = f"signal {-code}" if code < 0 else f"exit {code}"
            return MeasureError("crash", f"XLA aborted the process ({sig}): {tail or 'no message'}")
        # the child's stderr is only kept for the last crash
        self._errlog.seek(0)
        self._errlog.truncate()
        return [_result(r) for r in reply["results"]]

    def measure_many(self, texts: Sequence[str]) -> list[Measurement | MeasureError]:
        """A Measurement or a MeasureError for each text, in order."""
        if not texts:
            return []
        replies = self._ask(texts)
        if not isinstance(replies, MeasureError):
            return replies
        if len(texts) == 1:
            return [replies]
        # one kernel crashed or hung the batch: find it, one at a time
        return [r for text in texts for r in self.measure_many([text])]

    def measure(self, text: str) -> Measurement:
        (result,) = self.measure_many([text])
        if isinstance(result, MeasureError):
            raise result
        return result

    def _kill(self):
        proc, self._proc = self._proc, None
        if proc is not None:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            for f in (proc.stdin, proc.stdout):
                try:
                    f.close()
                except OSError:
                    pass

    def close(self) -> None:
        """Stop the child (it holds nothing worth waiting for: every result
        is already with the parent). An idle child is told to finish and
        given a few seconds, so that it reaps its compile processes (their
        CPU time then counts as this process's children's); a busy one is
        killed at once. Safe from another thread than the one measuring:
        that one then gets a crash, and starts no child."""
        self._closed = True
        proc = self._proc
        if proc is not None and not self._busy and proc.poll() is None:
            try:
                proc.stdin.close()
                proc.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                pass
        self._kill()
        try:
            self._errlog.close()
        except Exception:
            pass


def _result(reply):
    if "error" in reply:
        return MeasureError(reply["kind"], reply["error"])
    return Measurement(reply["runtime_ns"], reply["runs"], reply["noise"], reply["dropped"])


def _reply(result):
    if isinstance(result, MeasureError):
        return {"error": result.message, "kind": result.kind}
    return {"runtime_ns": result.runtime_ns, "runs": result.samples, "noise": result.noise,
            "dropped": result.dropped}


def child_channel():
    """The plumbing of a child process's main (the measure worker, a
    compile process): (config, send, requests). config is the JSON of
    argv[1]; send(obj) writes one msgpack reply to stdout; requests()
    yields the msgpack requests read from stdin until it closes. Ctrl-C is
    the parent's to handle."""
    import signal

    import msgpack

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    config = json.loads(sys.argv[1])
    out = sys.stdout.buffer
    pack = msgpack.Packer(use_bin_type=True).pack

    def send(obj):
        out.write(pack(obj))
        out.flush()

    def requests():
        # internal requests from the parent: kernel texts of one batch
        unpacker = msgpack.Unpacker(raw=False, max_buffer_size=1 << 30)
        stdin = sys.stdin.buffer
        while True:
            chunk = stdin.read1(1 << 16)
            if not chunk:
                return
            unpacker.feed(chunk)
            yield from unpacker

    return config, send, requests


def worker_main() -> None:
    """The child side of IsolatedMeasurer: msgpack requests on stdin
    ({"hlo": [text, ...]}), one reply per request on stdout."""
    from .device import Measurer, pin_cpus, single_threaded_xla

    config, send, requests = child_channel()
    parent = os.getppid()
    try:
        if config.get("cpu_list"):
            os.sched_setaffinity(0, config["cpu_list"])
            if len(config["cpu_list"]) == 1:
                single_threaded_xla()
        elif config.get("cpus"):
            pin_cpus(config["cpus"])
            if config["cpus"] == 1:
                single_threaded_xla()
        m = Measurer(config["backend"], samples=config["samples"],
                     min_time=config["min_time"], clock=config.get("clock", "auto"))
    except MeasureError as e:
        send({"fatal": e.message, "kind": e.kind})
        return
    except Exception as e:
        send({"fatal": error_text(e), "kind": "backend"})
        return
    if config.get("compile_cpus") and m.backend == "cpu":
        from .compiler import CompilePool

        # a bundle holds up to BUNDLE kernels: its compile may take as long
        m.compiler = CompilePool(config["compile_cpus"], m.backend,
                                 timeout=config.get("timeout", 300.0) * m.bundle)
    # A parent killed from outside (SIGKILL, a job's timeout) cannot tell
    # its worker; PR_SET_PDEATHSIG cannot either, as measure --jobs starts
    # workers from short-lived threads, whose end would fire it. So the
    # worker looks between calibrations and rounds of samples and exits
    # once it has another parent; its compile pool dies with it.
    def exit_if_orphaned():
        if os.getppid() != parent:
            os._exit(1)

    m.between_steps = exit_if_orphaned
    send({"target": m.target, "key": m.key})
    # for tests of the crash path: XLA aborts on text it does not expect, but
    # which text changes with every release
    abort_on = os.environ.get("TPUPERF_TEST_ABORT_ON")
    for req in requests():
        if abort_on and any(abort_on in text for text in req["hlo"]):
            os.abort()
        send({"results": [_reply(r) for r in m.measure_many(req["hlo"])]})
    if m.compiler is not None:
        m.compiler.close()  # waited for: their CPU time counts as this process's
