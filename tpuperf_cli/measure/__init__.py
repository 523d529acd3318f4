"""Measure kernels on real hardware through XLA (the `measure` tool's library).

`Measurer` (runner.py) compiles one kernel's standalone HloModule for one
device and times it; `Cache` (cache.py) keeps every measurement keyed by
(kernel fingerprint, target); `MeasureSession` joins them over a record
stream: it adds runtime_ns, runs and target to each record (or error), never
times one fingerprint twice, and counts what happened for the summary.
"""

from collections import Counter, OrderedDict

from tpuperf_cli.errors import StreamError

from .runner import MeasureError, hlo_fingerprint  # noqa: F401  (jax loads lazily)

RESULT_FIELDS = ("runtime_ns", "runs", "target", "error")

# failures that say more about the moment (machine load, --timeout) than
# about the kernel: not cached, so the next run tries again
TRANSIENT_ERRORS = frozenset({"timeout"})


class MeasureSession:
    """Adds measurements to records, one at a time.

    measurer: a runner.Measurer (or anything with .measure(text), .target,
    .key, .min_time); cache: a cache.Cache or None.
    """

    def __init__(self, measurer, cache=None, retry_errors=False):
        self.measurer = measurer
        self.cache = cache
        self.retry_errors = retry_errors
        self._memo = {}  # fingerprint -> result, for this run (even without a cache)
        self.timed = 0
        self.from_cache = 0
        self.repeated = 0
        self.ok = 0
        self.failed = Counter()  # error kind -> count
        self.examples = {}  # error kind -> OrderedDict(message -> count)

    def _result(self, fingerprint, text):
        if fingerprint in self._memo:
            self.repeated += 1
            return self._memo[fingerprint]
        result = None
        if self.cache is not None:
            hit = self.cache.get(fingerprint, self.measurer.key)
            if hit is not None and not (hit["error"] and self.retry_errors):
                result = hit
                self.from_cache += 1
        if result is None:
            try:
                runtime, runs = self.measurer.measure(text)
                result = {"runtime_ns": runtime, "runs": runs, "error": None, "error_kind": None}
            except MeasureError as e:
                result = {"runtime_ns": None, "runs": None, "error": str(e), "error_kind": e.kind}
            self.timed += 1
            if self.cache is not None and result["error_kind"] not in TRANSIENT_ERRORS:
                self.cache.put(fingerprint, self.measurer.key, self.measurer.target,
                               result["runtime_ns"], result["runs"], result["error"],
                               result["error_kind"], self.measurer.min_time)
        self._memo[fingerprint] = result
        return result

    def update(self, record, number=None, name=None):
        """Add the measurement fields to one record (in place) and return it."""
        text = record.get("hlo")
        if not isinstance(text, str) or not text.strip():
            where = f"{name or 'input'}: record {number}" if number is not None else "record"
            raise StreamError(f"{where}: no 'hlo' text to measure (type {record.get('type', '?')!r}; "
                              f"measure reads kernel or graph records from hlo-split/featurize)")
        fingerprint = record.get("fingerprint") or hlo_fingerprint(text)
        result = self._result(str(fingerprint), text)
        record["target"] = self.measurer.target
        if result["error"]:
            record.pop("runtime_ns", None)
            record.pop("runs", None)
            record["error"] = result["error"]
            kind = result["error_kind"] or result["error"].split(":", 1)[0]
            self.failed[kind] += 1
            ex = self.examples.setdefault(kind, OrderedDict())
            ex[result["error"]] = ex.get(result["error"], 0) + 1
        else:
            record.pop("error", None)
            record["runtime_ns"] = float(result["runtime_ns"])
            record["runs"] = [float(r) for r in result["runs"]]
            self.ok += 1
        return record

    @property
    def total(self):
        return self.ok + sum(self.failed.values())

    def summary(self, prog="measure"):
        """Lines for stderr: counts, then failures grouped by reason."""
        lines = [f"{prog}: {self.total} kernel(s): {self.ok} measured, "
                 f"{sum(self.failed.values())} failed; "
                 f"{self.timed} timed now, {self.from_cache} from the cache, "
                 f"{self.repeated} repeated fingerprint(s)"]
        for kind, count in self.failed.most_common():
            lines.append(f"{prog}:   {count} failed: {kind}")
            for message, n in list(self.examples[kind].items())[:3]:
                lines.append(f"{prog}:     {n} x {_clip(message)}")
            more = len(self.examples[kind]) - 3
            if more > 0:
                lines.append(f"{prog}:     ... and {more} other message(s)")
        return lines


def _clip(s, n=160):
    return s if len(s) <= n else s[: n - 3] + "..."
