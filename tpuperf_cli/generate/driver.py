"""The driver of `tpuperf generate`: runs sources, removes duplicates and
--exclude'd kernels, stops at a limit, and counts what it did."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from tpuperf_cli.errors import TpuperfError
from tpuperf_cli.generate import SOURCES, Failed, source
from tpuperf_cli.records import FINGERPRINT, OPCODE, SOURCE, Record

# Sources that draw from the programs given (the others make kernels from nothing).
PROGRAM_SOURCES = frozenset({"fusions", "variants", "sweeps"})
# Stop when this many candidates in a row were all duplicates, excluded or
# failed: the sources have nothing new left to give for this seed.
MAX_STALE = 20000
# Failure reasons kept to show in the summary.
SHOWN_FAILURES = 5


@dataclass
class Summary:
    """What a run did, for the summary on stderr."""

    by_opcode: Counter = field(default_factory=Counter)   # kernels written
    by_source: Counter = field(default_factory=Counter)
    duplicates: int = 0        # a fingerprint this run already wrote
    excluded: int = 0          # a fingerprint in the --exclude files
    failures: int = 0          # candidates a source could not make
    failure_reasons: list[str] = field(default_factory=list)
    stale: bool = False        # stopped because nothing new came

    @property
    def written(self) -> int:
        return sum(self.by_source.values())

    def lines(self, prog: str) -> list[str]:
        per_source = ", ".join(f"{n} {s}" for s, n in sorted(self.by_source.items())) or "none"
        out = [f"{prog}: {self.written} kernels ({per_source}), "
               f"{self.duplicates} duplicates skipped, {self.excluded} excluded, "
               f"{self.failures} failed"]
        if self.by_opcode:
            width = max(len(o) for o in self.by_opcode)
            out.append(f"{prog}: kernels per opcode ({len(self.by_opcode)} opcodes):")
            for opcode, n in sorted(self.by_opcode.items(), key=lambda kv: (-kv[1], kv[0])):
                out.append(f"  {opcode:<{width}} {n}")
        for reason in self.failure_reasons:
            out.append(f"{prog}: failed: {reason}")
        if self.failures > len(self.failure_reasons):
            out.append(f"{prog}: ... and {self.failures - len(self.failure_reasons)} more failures")
        if self.stale:
            out.append(f"{prog}: stopped: {MAX_STALE} candidates in a row gave nothing new")
        return out


def load_sources(names: Sequence[str]) -> list[tuple[str, Callable]]:
    """(name, generate function) of each source; TpuperfError for one that
    is unknown or whose module this build lacks."""
    out = []
    for name in names:
        try:
            out.append((name, source(name)))
        except ModuleNotFoundError as e:
            if e.name == f"tpuperf_cli.generate.{SOURCES.get(name)}":
                raise TpuperfError(f"--source {name}: source {name} is not available in this "
                                   f"build") from None
            raise
    return out


def check_programs(names: Sequence[str], programs: Sequence[str]) -> None:
    """Refuse programs no source reads, and program files that are not there."""
    if programs and not PROGRAM_SOURCES.intersection(names):
        raise TpuperfError(f"{programs[0]}: --source {', '.join(names)} draws from no programs "
                           f"(program files are for {', '.join(sorted(PROGRAM_SOURCES))})",
                           exit_code=2)
    for path in programs:
        # sweeps also takes an example program by name (resnet_s_train)
        bare = os.sep not in path and "." not in path
        if not os.path.exists(path) and not (bare and "sweeps" in names):
            raise TpuperfError(f"{path}: no such file")
        if not os.path.exists(path):
            continue
        if not os.access(path, os.R_OK):
            raise TpuperfError(f"{path}: not readable")


def excluded_fingerprints(paths: Iterable[str]) -> set[str]:
    """The fingerprints of every record of the given streams (plain or
    zstd); records without one are ignored."""
    from tpuperf_cli.stream import read_records

    out = set()
    for path in paths:
        if not os.path.exists(path):
            raise TpuperfError(f"--exclude {path}: no such file")
        for record in read_records(path):
            fp = record.get(FINGERPRINT)
            if isinstance(fp, str):
                out.add(fp)
    return out


def run(names: Sequence[str], seed: int, programs: Sequence[str], limit: int | None,
        exclude: set[str], log: Callable[[str], None], summary: Summary) -> Iterator[Record]:
    """Kernel records from the named sources, taken in turn one candidate
    each (deterministic for a seed), without duplicates or excluded
    fingerprints, until `limit` were yielded (None: until the sources end)."""
    live = [(name, iter(fn(seed, list(programs), log))) for name, fn in load_sources(names)]
    try:
        yield from _take(live, limit, exclude, summary)
    finally:
        for _, it in live:      # a source may log its figures when closed
            close = getattr(it, "close", None)
            if close is not None:
                close()


def _take(live, limit, exclude, summary):
    seen = set(exclude)
    stale = 0
    while live and (limit is None or summary.written < limit):
        for entry in list(live):
            name, it = entry
            try:
                item = next(it)
            except StopIteration:
                live.remove(entry)
                continue
            if isinstance(item, Failed):
                summary.failures += 1
                if len(summary.failure_reasons) < SHOWN_FAILURES:
                    summary.failure_reasons.append(str(item))
                stale += 1
            else:
                fp = item[FINGERPRINT]
                if fp in seen:
                    if fp in exclude:
                        summary.excluded += 1
                    else:
                        summary.duplicates += 1
                    stale += 1
                else:
                    seen.add(fp)
                    stale = 0
                    item.setdefault(SOURCE, name)
                    summary.by_source[name] += 1
                    summary.by_opcode[item.get(OPCODE) or "?"] += 1
                    yield item
                    if limit is not None and summary.written >= limit:
                        return
            if stale >= MAX_STALE:
                summary.stale = True
                return

