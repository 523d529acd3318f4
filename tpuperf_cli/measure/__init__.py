"""Measure kernels on real hardware through XLA (the `measure` tool's library).

`Measurer` (device.py) compiles kernels' standalone HloModules for one device
and times them; `IsolatedMeasurer` (worker.py) runs it in a child process;
`Cache` (cache.py) keeps every measurement keyed by (kernel fingerprint,
target); `MeasureSession` joins them over a record stream: it adds
runtime_ns, runs, noise and target to each record (or error), never times
one kernel twice, and counts what happened for the summary.

The cache key is the fingerprint of the module that is compiled, computed
from the record's `hlo` text, not the record's `fingerprint` field: a
record whose text was edited but kept its fingerprint must not get another
kernel's runtime (or give its runtime to others through a shared cache).
"""

from __future__ import annotations

import hashlib
import statistics
from collections import Counter, OrderedDict
from collections.abc import Sequence

from tpuperf_cli.errors import StreamError, TpuperfError
from tpuperf_cli.records import ERROR, FINGERPRINT, HLO, NOISE, RUNS, RUNTIME_NS, TARGET, TYPE, Record, locate

from .device import MeasureError, Measurement  # noqa: F401  (jax loads lazily)

# failures that say more about the moment (machine load, --timeout) than
# about the kernel: not cached, so the next run tries again
TRANSIENT_ERRORS = frozenset({"timeout"})

# The median `noise` of the kernels timed in one run at or above which
# measure warns that the machine is loud. Two runs of the same kernels
# disagree by about their median noise (bench_measure_noise.py, 320
# kernels: 2.7% and 3.2% apart with a median noise of 4.0% and 2.0% on a
# quiet AMD EPYC VM, 2026-11-26; 10.5% apart with 12.6% on a loud Intel
# Xeon VM, 2026-11-28); the corpus's kernels have 3% to 6%.
LOUD_NOISE = 0.08
# ...judged on at least this many kernels timed now
LOUD_MIN_KERNELS = 30


def kernel_key(text: str) -> str:
    """The fingerprint of a kernel module's text (hlo.split's, computed
    from the text); for text that does not parse, a hash of the text."""
    from tpuperf_cli.hlo.split import module_fingerprint

    try:
        return module_fingerprint(text)
    except TpuperfError:
        return "text:" + hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


class MeasureSession:
    """Adds measurements to records, a batch at a time.

    measurer: a device.Measurer or worker.IsolatedMeasurer (anything with
    .measure_many(texts), .target, .key, .min_time); cache: a cache.Cache or
    None; warn: called with a message for each record whose fingerprint
    field disagrees with its text.
    """

    def __init__(self, measurer, cache=None, retry_errors=False, warn=None):
        self.measurer = measurer
        self.cache = cache
        self.retry_errors = retry_errors
        self.warn = warn
        self._memo = {}  # kernel key -> result, for this run (even without a cache)
        self._seen = set()  # kernel keys of the records handled so far
        self._pending = set()  # kernel keys handed to a worker, not stored yet
        self.timed = 0
        self.from_cache = 0
        self.repeated = 0
        self.mismatched = 0
        self.ok = 0
        self.noises = []  # the noise of each kernel timed now (not from the cache)
        self.failed = Counter()  # error kind -> count
        self.examples = {}  # error kind -> OrderedDict(message -> count)

    def _cached(self, key):
        if self.cache is None:
            return None
        hit = self.cache.get(key, self.measurer.key)
        if hit is None or (hit["error"] and self.retry_errors):
            return None
        return hit

    def _store(self, key, result):
        self._memo[key] = result
        if self.cache is not None and result["error_kind"] not in TRANSIENT_ERRORS:
            self.cache.put(key, self.measurer.key, self.measurer.target, result["runtime_ns"],
                           result["runs"], result["error"], result["error_kind"],
                           self.measurer.min_time, result.get("noise"))

    def update_many(self, items: Sequence[tuple[Record, int | None, str | None]]) -> list[Record]:
        """Add the measurement fields to records in place and return them.
        items: (record, number, source name) triples. The kernels neither
        measured in this run nor cached are timed together (interleaved)."""
        chunk = self.prepare(items)
        if chunk.todo:
            self.store(chunk, self.measurer.measure_many(chunk.texts()))
        return self.finish(chunk)

    # The three steps of update_many, apart, for measuring chunks on
    # several workers at once (parallel.py): prepare and store may run for
    # many chunks in any order, finish in input order, and all of them in
    # the one thread that owns the cache.
    def prepare(self, items: Sequence[tuple[Record, int | None, str | None]]) -> "Chunk":
        """Key the records and look them up; the chunk's `todo` are the
        kernels to time (none already timed, cached or being timed)."""
        keyed = []
        todo = OrderedDict()  # key -> text, to time now
        for record, number, name in items:
            key = self._key(record, number, name)
            keyed.append((record, key))
            if key in self._memo or key in todo or key in self._pending:
                continue
            hit = self._cached(key)
            if hit is not None:
                self._memo[key] = hit
                self.from_cache += 1
            else:
                todo[key] = record[HLO]
        self._pending.update(todo)
        return Chunk(keyed, todo)

    def store(self, chunk: "Chunk", results: Sequence[Measurement | MeasureError]) -> None:
        """Keep (and cache) the results of timing chunk.todo, in its order."""
        if len(results) != len(chunk.todo):
            raise TpuperfError(f"{len(results)} result(s) for {len(chunk.todo)} kernel(s)")
        for key, result in zip(chunk.todo, results):
            row = _as_row(result)
            self._store(key, row)
            self._pending.discard(key)
            if row["noise"] is not None:
                self.noises.append(float(row["noise"]))
        self.timed += len(chunk.todo)

    def finish(self, chunk: "Chunk") -> list[Record]:
        """Add the fields to the chunk's records (every kernel in it must be
        stored by now) and return them."""
        for record, key in chunk.keyed:
            if key in self._seen:
                self.repeated += 1
            self._seen.add(key)
            self._apply(record, self._memo[key])
        return [record for record, _ in chunk.keyed]

    def update(self, record: Record, number: int | None = None, name: str | None = None) -> Record:
        """Add the measurement fields to one record (in place) and return it."""
        return self.update_many([(record, number, name)])[0]

    @staticmethod
    def check(record: Record, number: int | None = None, name: str | None = None) -> None:
        """Raise StreamError if the record has no kernel text to measure."""
        text = record.get(HLO)
        if not isinstance(text, str) or not text.strip():
            raise StreamError(f"{locate(number, name)}: no 'hlo' text to measure (type "
                              f"{record.get(TYPE, '?')!r}; measure reads kernel or graph records "
                              f"from hlo-split/featurize)")

    def _key(self, record, number, name):
        self.check(record, number, name)
        text = record[HLO]
        key = kernel_key(text)
        claimed = record.get(FINGERPRINT)
        if claimed and not key.startswith("text:") and str(claimed) != key:
            self.mismatched += 1
            if self.warn is not None and self.mismatched <= 3:
                where = locate(number, name) if number is not None else "a record"
                self.warn(f"{where}: its fingerprint {claimed} is not that of its hlo text "
                          f"({key}); timed and cached by its text")
        return key

    def _apply(self, record, result):
        record[TARGET] = self.measurer.target
        if result["error"]:
            for field in (RUNTIME_NS, RUNS, NOISE):
                record.pop(field, None)
            record[ERROR] = result["error"]
            kind = result["error_kind"] or result["error"].split(":", 1)[0]
            self.failed[kind] += 1
            ex = self.examples.setdefault(kind, OrderedDict())
            ex[result["error"]] = ex.get(result["error"], 0) + 1
        else:
            record.pop(ERROR, None)
            record[RUNTIME_NS] = float(result["runtime_ns"])
            record[RUNS] = [float(r) for r in result["runs"]]
            if result.get("noise") is not None:
                record[NOISE] = float(result["noise"])
            self.ok += 1

    @property
    def total(self) -> int:
        return self.ok + sum(self.failed.values())

    def summary(self, prog: str = "measure") -> list[str]:
        """Lines for stderr: counts, then failures grouped by reason."""
        lines = [f"{prog}: {self.total} kernel(s): {self.ok} measured, "
                 f"{sum(self.failed.values())} failed; "
                 f"{self.timed} timed now, {self.from_cache} from the cache, "
                 f"{self.repeated} repeated kernel(s)"]
        if self.mismatched:
            lines.append(f"{prog}: {self.mismatched} record(s) whose fingerprint field is not "
                         f"that of their hlo text (keyed by the text)")
        for kind, count in self.failed.most_common():
            lines.append(f"{prog}:   {count} failed: {kind}")
            for message, n in list(self.examples[kind].items())[:3]:
                lines.append(f"{prog}:     {n} x {_clip(message)}")
            more = len(self.examples[kind]) - 3
            if more > 0:
                lines.append(f"{prog}:     ... and {more} other message(s)")
        if self.noises:
            lines.append(f"{prog}: noise of the {len(self.noises)} kernel(s) timed now: median "
                         f"{100 * statistics.median(self.noises):.1f}%")
        loud = self.loud()
        if loud:
            lines.append(f"{prog}: warning: {loud}")
        return lines

    def loud(self) -> str | None:
        """A warning when the kernels timed now say the machine is too loud
        to trust their runtimes (their median noise is LOUD_NOISE or more),
        else None."""
        if len(self.noises) < LOUD_MIN_KERNELS:
            return None
        median = statistics.median(self.noises)
        if median < LOUD_NOISE:
            return None
        return (f"this machine is loud: the kernels timed now have a median noise of "
                f"{100 * median:.1f}% (a quiet machine: 2% to 6%), so two runs may disagree "
                f"by about as much; measure again with nothing else running, or on another "
                f"machine (benchmarks/bench_measure_noise.py says how far two runs agree)")


class Chunk:
    """Records keyed (record, kernel key) and the kernels among them to
    time (key -> text), as MeasureSession.prepare made them."""

    __slots__ = ("keyed", "todo")

    def __init__(self, keyed, todo):
        self.keyed = keyed
        self.todo = todo

    def texts(self) -> list[str]:
        return list(self.todo.values())


def _as_row(result):
    if isinstance(result, MeasureError):
        return {"runtime_ns": None, "runs": None, "noise": None, "error": str(result),
                "error_kind": result.kind}
    return {"runtime_ns": result.runtime_ns, "runs": result.samples, "noise": result.noise,
            "error": None, "error_kind": None}


def _clip(s, n=160):
    return s if len(s) <= n else s[: n - 3] + "..."
