"""Measuring on several workers at once: `measure --jobs N` (N child
processes on this machine) and `measure --ray` (Ray actors on a cluster).

The parent owns the stream and the cache: it keys and looks up each chunk of
records (MeasureSession.prepare), hands the kernels left to time to a free
worker, stores each chunk's results in the cache the moment they come back,
in whatever order, and writes the records out in input order. A worker
never touches the cache, so one sqlite writer per measure process, as with
one job.

A pool is what MeasureSession takes as its measurer (target, key,
min_time) plus submit(chunk id, texts), next_result(timeout) -> (chunk id,
results) or None, and close().
"""

from __future__ import annotations

import os
import queue
import threading
from collections import deque
from collections.abc import Callable, Iterable, Sequence

from tpuperf_cli.errors import TpuperfError

from .device import SAMPLES, MeasureError


def assign_cpus(jobs: int, cpus: int | None) -> list[list[int] | None]:
    """The CPU ids each of `jobs` workers is pinned to, `cpus` each, distinct,
    from the last of this process's affinity set (None: unpinned)."""
    if cpus is None:
        return [None] * jobs
    allowed = sorted(os.sched_getaffinity(0))
    if jobs * cpus > len(allowed):
        if jobs == 1:
            raise TpuperfError(f"--cpus {cpus}: this process may use {len(allowed)} CPU(s)")
        raise TpuperfError(f"--jobs {jobs} with --cpus {cpus} needs {jobs * cpus} CPUs, but this "
                           f"process may use {len(allowed)}: use --jobs {max(1, len(allowed) // cpus)} "
                           f"or fewer (or --cpus all, unpinned and less steady)")
    end = len(allowed)
    return [allowed[end - (i + 1) * cpus: end - i * cpus] for i in range(jobs)]


def compile_cpu_ids(jobs: int, cpus: int | None, compile_jobs: int | None) -> list[int] | None:
    """The CPU ids of the compile pool (compiler.CompilePool), or None to
    compile where the kernels are timed. By default (compile_jobs None) a
    single worker timing on one CPU compiles on every CPU this process may
    use, while it waits; with several workers each compiles on its own."""
    allowed = sorted(os.sched_getaffinity(0))
    if compile_jobs is None:
        compile_jobs = len(allowed) if jobs == 1 and cpus == 1 and len(allowed) > 1 else 0
    if compile_jobs == 0:
        return None
    if jobs > 1:
        raise TpuperfError("--compile-jobs goes with --jobs 1: with several workers each "
                           "compiles on its own CPUs")
    if compile_jobs > len(allowed):
        raise TpuperfError(f"--compile-jobs {compile_jobs}: this process may use "
                           f"{len(allowed)} CPU(s)")
    return allowed[-compile_jobs:]


def same_target(keys_targets: Sequence[tuple[str, dict]], where: str) -> tuple[str, dict]:
    """The one (key, target) the workers share; an error naming the fields
    in which they differ otherwise (a run's records have one target)."""
    from .target import same_machine

    key, target = keys_targets[0]
    for other_key, other in keys_targets[1:]:
        if other_key != key:
            fields = same_machine(target, other) or sorted(k for k in set(target) | set(other)
                                                            if target.get(k) != other.get(k))
            raise TpuperfError(f"{where} measure on different targets (they differ in "
                               f"{', '.join(fields)}): run one measure per kind of machine")
    return key, target


class LocalPool:
    """N IsolatedMeasurer children, each driven by one thread of this
    process (the threads only wait on pipes: the work is in the children)."""

    def __init__(self, jobs: int, backend: str | None = None, samples: int = SAMPLES,
                 min_time: float = 0.0005, timeout: float = 300.0, cpus: int | None = None,
                 clock: str = "auto", compile_jobs: int | None = None):
        from .worker import IsolatedMeasurer

        self.min_time = float(min_time)
        self._jobs = queue.Queue()
        self._done = queue.Queue()
        self._closing = False
        self.workers = []
        started, errors = [None] * jobs, []

        compile_cpus = compile_cpu_ids(jobs, cpus, compile_jobs)

        def start(i, cpu_list):
            try:
                started[i] = IsolatedMeasurer(backend, samples=samples, min_time=min_time,
                                              timeout=timeout, cpus=cpus, clock=clock,
                                              cpu_list=cpu_list, compile_cpus=compile_cpus)
            except MeasureError as e:
                errors.append(e)

        # jax takes seconds to start: start the children together
        threads = [threading.Thread(target=start, args=(i, cpu_list), daemon=True)
                   for i, cpu_list in enumerate(assign_cpus(jobs, cpus))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.workers = [m for m in started if m is not None]
        if errors:
            self.close()
            raise TpuperfError(errors[0].message)
        self.key, self.target = same_target([(m.key, m.target) for m in self.workers],
                                            f"the {jobs} workers")
        self.size = jobs
        for m in self.workers:
            threading.Thread(target=self._serve, args=(m,), daemon=True).start()

    def _serve(self, measurer):
        while True:
            job = self._jobs.get()
            if job is None:
                return
            chunk_id, texts = job
            try:
                results = measurer.measure_many(texts)
            except Exception as e:  # closed under it, or a child that cannot start
                results = e
            if self._closing:
                return
            self._done.put((chunk_id, results))

    def submit(self, chunk_id: int, texts: list[str]) -> None:
        self._jobs.put((chunk_id, texts))

    def next_result(self, timeout: float):
        try:
            chunk_id, results = self._done.get(timeout=timeout)
        except queue.Empty:
            return None
        if isinstance(results, MeasureError):
            raise TpuperfError(results.message)
        if isinstance(results, Exception):
            raise results
        return chunk_id, results

    def measure_many(self, texts):
        self.submit(-1, list(texts))
        while True:
            got = self.next_result(1.0)
            if got is not None:
                return got[1]

    def close(self) -> None:
        self._closing = True
        for m in self.workers:
            self._jobs.put(None)
            m.close()


def measure_chunks(session, pool, chunks: Iterable[list], emit: Callable[[list], None],
                   window: int) -> None:
    """Measure chunks of (record, number, name) items on the pool's workers,
    at most `window` chunks ahead of the one written last, and call emit
    with each chunk's records, in input order. A TpuperfError raised by the
    chunks (bad input) is raised after every chunk before it was emitted.
    Whatever comes back is stored in the cache as it comes, even when this
    stops early (Ctrl-C, a broken pipe)."""
    ahead = deque()  # [chunk, ready], in input order
    waiting = {}  # chunk id -> the entry in `ahead` whose kernels are being timed
    source = iter(chunks)
    more, stop = True, None
    next_id = 0
    try:
        while True:
            while more and len(ahead) < window:
                try:
                    items = next(source)
                except StopIteration:
                    more = False
                    break
                except TpuperfError as e:
                    more, stop = False, e
                    break
                chunk = session.prepare(items)
                entry = [chunk, not chunk.todo]
                ahead.append(entry)
                if chunk.todo:
                    waiting[next_id] = entry
                    pool.submit(next_id, chunk.texts())
                    next_id += 1
            while ahead and ahead[0][1]:
                emit(session.finish(ahead.popleft()[0]))
            if not ahead:
                if not more:
                    break
                continue
            got = pool.next_result(0.5)
            if got is not None:
                chunk_id, results = got
                entry = waiting.pop(chunk_id)
                session.store(entry[0], results)
                entry[1] = True
    finally:
        # keep in the cache what is back already but not yet stored
        while waiting:
            try:
                got = pool.next_result(0)
            except Exception:
                break
            if got is None:
                break
            entry = waiting.pop(got[0], None)
            if entry is not None:
                session.store(entry[0], got[1])
    if stop is not None:
        raise stop
