"""`measure --ray`: time chunks of kernels on Ray actors across a cluster.

Each actor holds an IsolatedMeasurer (so an XLA abort or a hung kernel
costs one error field there, as on one machine) on one CPU of its node, or
one GPU or TPU chip. The parent (the Ray driver) is a pool for
parallel.measure_chunks: it keeps the stream, the order and the cache, and
stores each chunk's results as they come back, so an actor or node that
dies loses only the chunk it held, which goes to the next free actor (and
the dead one is replaced). Ray is an optional extra: `pip install -e
'.[dist]'`.
"""

from __future__ import annotations

import fcntl
import logging
import os
import socket
import tempfile
from collections import deque

from tpuperf_cli.errors import TpuperfError

from .device import SAMPLES, MeasureError

# a chunk whose actor died this many times gets error kind "crash" (its
# kernels are then probably what kills the actors)
ATTEMPTS = 3
# seconds for all workers to start (jax and the backend included), waiting
# for free resources if others hold them
START_TIMEOUT = 600


def import_ray():
    try:
        import ray
    except ImportError:
        raise TpuperfError("--ray needs Ray, which is not installed: pip install -e '.[dist]' "
                           "(or pip install ray)") from None
    return ray


def claim_cpus(n: int):
    """n CPUs of this process's affinity set that no other tpuperf worker on
    this host holds: (cpu ids, the open lock files that hold them, to keep
    open while pinned), or None when fewer are free. Ray actors on one node
    do not know each other; the locks tell them apart."""
    folder = os.path.join(tempfile.gettempdir(), f"tpuperf-cpus-{os.getuid()}")
    os.makedirs(folder, exist_ok=True)
    held = []
    for cpu in sorted(os.sched_getaffinity(0), reverse=True):
        f = open(os.path.join(folder, f"{cpu}.lock"), "a")
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            f.close()
            continue
        held.append((cpu, f))
        if len(held) == n:
            return [c for c, _ in held], [f for _, f in held]
    for _, f in held:
        f.close()
    return None


class RayWorker:
    """The actor: one IsolatedMeasurer, replies as plain maps."""

    def __init__(self, settings: dict, die_once: str | None = None):
        from .worker import IsolatedMeasurer

        self._locks = []
        cpu_list = None
        cpus = settings.get("cpus")
        if cpus:
            claimed = claim_cpus(cpus)
            if claimed is not None:
                cpu_list, self._locks = claimed
            elif settings.get("backend") in ("gpu", "tpu"):
                # the accelerator is what is timed: its host thread may share
                settings = {**settings, "cpus": None}
            else:
                raise MeasureError("backend", f"{socket.gethostname()}: no {cpus} CPU(s) free "
                                              "of other tpuperf workers")
        self.measurer = IsolatedMeasurer(cpu_list=cpu_list, **settings)
        self.die_once = die_once

    def hello(self):
        return self.measurer.key, self.measurer.target, socket.gethostname()

    def measure(self, texts):
        from .worker import _reply

        results = [_reply(r) for r in self.measurer.measure_many(texts)]
        if self.die_once and not os.path.exists(self.die_once):
            # tests: the worker dies with a chunk measured but not returned
            open(self.die_once, "w").close()
            os._exit(1)
        return results


class RayPool:
    """Ray actors, one per CPU (--cpus of them) or per GPU or TPU chip of
    the cluster, or `jobs` of them."""

    def __init__(self, address: str, jobs: int | None = None, backend: str | None = None,
                 samples: int = SAMPLES, min_time: float = 0.0005, timeout: float = 300.0,
                 cpus: int | None = None, clock: str = "auto", log=None):
        ray = import_ray()
        self._ray = ray
        self.log = log or (lambda message: None)
        self.min_time = float(min_time)
        _reachable(address)
        try:
            ray.init(address=address, log_to_driver=False, logging_level=logging.ERROR)
        except (ConnectionError, ValueError, RuntimeError) as e:
            raise TpuperfError(f"--ray {address}: cannot join the Ray cluster: "
                               f"{str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
        resources = ray.cluster_resources()
        if backend == "gpu":
            options, have = {"num_gpus": 1, "num_cpus": 1}, resources.get("GPU", 0)
        elif backend == "tpu":
            options, have = {"resources": {"TPU": 1}, "num_cpus": 1}, resources.get("TPU", 0)
        else:
            per = cpus or 1
            options, have = {"num_cpus": per}, resources.get("CPU", 0) // per
        size = jobs or int(have)
        unit = f"{cpus or 1} CPU(s)" if backend not in ("gpu", "tpu") else f"one {backend.upper()}"
        if size < 1 or size > have:
            ray.shutdown()
            raise TpuperfError(f"--ray {address}: the cluster has room for {int(have)} worker(s) of "
                               f"{unit}, not {size} (its resources: {_resources(resources)})")
        settings = {"backend": backend, "samples": samples, "min_time": float(min_time),
                    "timeout": timeout, "cpus": cpus, "clock": clock}
        die_once = os.environ.get("TPUPERF_TEST_RAY_DIE_ONCE")
        self._new_actor = lambda: ray.remote(RayWorker).options(**options).remote(settings,
                                                                                  die_once)
        self.actors = [self._new_actor() for _ in range(size)]
        self.size = size
        try:
            hellos = ray.get([a.hello.remote() for a in self.actors], timeout=START_TIMEOUT)
        except ray.exceptions.GetTimeoutError:
            self.close()
            raise TpuperfError(f"--ray: {size} worker(s) did not all start in {START_TIMEOUT} s "
                               f"(others may hold the cluster's resources; free now: "
                               f"{_resources(ray.available_resources())})") from None
        except Exception as e:
            self.close()
            raise TpuperfError(f"--ray: a worker did not start: {_reason(e)}") from None
        self.key, self.target = same_target_of(hellos)
        hosts = sorted({h for _, _, h in hellos})
        self.log(f"{size} Ray worker(s) on {len(hosts)} host(s)")
        self._free = deque(range(size))
        self._queue = deque()  # (chunk id, texts, attempts) waiting for a free actor
        self._running = {}  # object ref -> (actor index, chunk id, texts, attempts)

    def submit(self, chunk_id: int, texts: list[str], attempts: int = 0) -> None:
        self._queue.append((chunk_id, texts, attempts))
        self._dispatch()

    def _dispatch(self):
        while self._free and self._queue:
            index = self._free.popleft()
            chunk_id, texts, attempts = self._queue.popleft()
            ref = self.actors[index].measure.remote(texts)
            self._running[ref] = (index, chunk_id, texts, attempts)

    def next_result(self, timeout: float):
        ray = self._ray
        if not self._running:
            return None
        ready, _ = ray.wait(list(self._running), num_returns=1, timeout=timeout)
        if not ready:
            return None
        index, chunk_id, texts, attempts = self._running.pop(ready[0])
        try:
            replies = ray.get(ready[0])
        except Exception as e:  # the actor died (or its node): replace it, retry the chunk
            self.log(f"a Ray worker died with {len(texts)} kernel(s) ({_reason(e)}); "
                     + ("retrying them" if attempts + 1 < ATTEMPTS else "giving up on them"))
            try:
                ray.kill(self.actors[index], no_restart=True)
            except Exception:
                pass
            self.actors[index] = self._new_actor()
            self._free.append(index)
            if attempts + 1 >= ATTEMPTS:
                why = f"the Ray worker measuring it died {ATTEMPTS} times: {_reason(e)}"
                return chunk_id, [MeasureError("crash", why) for _ in texts]
            self._queue.appendleft((chunk_id, texts, attempts + 1))
            self._dispatch()
            return None
        from .worker import _result

        self._free.append(index)
        self._dispatch()
        return chunk_id, [_result(r) for r in replies]

    def close(self) -> None:
        for actor in self.actors:
            try:
                self._ray.kill(actor, no_restart=True)
            except Exception:
                pass
        self._ray.shutdown()


def same_target_of(hellos):
    from .parallel import same_target

    return same_target([(key, target) for key, target, _ in hellos], "the Ray workers")


def _reachable(address: str, seconds: float = 10.0) -> None:
    """A one-line error when a head's host:port does not answer (ray.init
    would retry for minutes); `auto` is Ray's to find."""
    if address == "auto":
        return
    hostport = address.split("://", 1)[-1].rstrip("/")
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit():
        raise TpuperfError(f"--ray {address}: not auto or an address host:port (or ray://host:port)")
    try:
        socket.create_connection((host, int(port)), timeout=seconds).close()
    except OSError as e:
        raise TpuperfError(f"--ray {address}: cannot join the Ray cluster: {host}:{port} does not "
                           f"answer ({e.strerror or e})") from None


def _resources(resources):
    return ", ".join(f"{k} {v:g}" for k, v in sorted(resources.items())
                     if k in ("CPU", "GPU", "TPU")) or "none"


def _reason(e):
    text = str(e).strip().splitlines()
    return (text[0] if text else type(e).__name__)[:200]
