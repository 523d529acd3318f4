"""Generate kernels to measure (the `tpuperf generate` tool's library).

Each source is a module of this package with one function,

    generate(seed: int, programs: Sequence[str], log: Callable[[str], None])
        -> Iterator[Record]

that yields kernel records (hlo-split's fields, each `hlo` a standalone
module XLA can compile alone, built with `kernel_record`) forever or until
it runs out, deterministically for a seed. `programs` are HLO files the
source may draw from (fusions, sweeps); `log` takes progress lines for
stderr. The driver (the command) removes duplicates by fingerprint, skips
--exclude'd ones and stops at --limit, so a source need not.

Records carry SOURCE (the source's name) and, where a kernel was drawn from
a program, ORIGIN (that program's name): the corpus's splits keep every
kernel drawn from or swept from a test program out of training.

A source may also yield a `Failed(reason)` for a candidate it could not
make into a kernel (a group XLA splits, a sweep that does not compile):
the driver counts them in its summary and shows the first few reasons,
instead of the source logging each.
"""

from __future__ import annotations

import importlib
import math
import random
from collections.abc import Callable, Iterator, Sequence

from tpuperf_cli.errors import TpuperfError
from tpuperf_cli.records import ORIGIN, SOURCE, Record

# name -> module of this package holding generate(); one line per source
SOURCES = {
    "fusions": "fusions",
    "variants": "variants",
    "sweeps": "sweeps",
    "ops": "ops",
    "heavy": "heavy",
    "indexed": "indexed",
    "layers": "layers",
    "skinny": "skinny",
    "stems": "stems",
    "pools": "pools",
}


def source(name: str) -> Callable[[int, Sequence[str], Callable[[str], None]], Iterator[Record]]:
    """The generate function of a source by name."""
    if name not in SOURCES:
        raise TpuperfError(f"--source {name}: expected one of {', '.join(SOURCES)}")
    return importlib.import_module(f"{__name__}.{SOURCES[name]}").generate


def log_uniform(r: random.Random, lo: float, hi: float) -> int:
    """An integer drawn log-uniformly between lo and hi (lo > 0), as the
    sources draw sizes."""
    return round(math.exp(r.uniform(math.log(lo), math.log(hi))))


class Failed(str):
    """A candidate kernel a source could not make (the string says why):
    yielded in place of a record, counted by the driver."""


def kernel_record(text: str, *, source: str, program: str, origin: str | None = None,
                  name: str = "<generated>") -> Record:
    """The kernel record of a standalone module holding one kernel, as
    hlo-split would write it had the module been a program (its `hlo` is
    hlo-split's normalized standalone module, its fingerprint hlo-split's).
    Raises TpuperfError when the text does not parse or does not hold
    exactly one kernel."""
    from tpuperf_cli.hlo.parser import parse_module
    from tpuperf_cli.hlo.split import kernel_records

    module = parse_module(text, name)
    records = list(kernel_records(module, program=program))
    if len(records) != 1:
        raise TpuperfError(f"{name}: holds {len(records)} kernels, not one")
    record = records[0]
    record[SOURCE] = source
    if origin is not None:
        record[ORIGIN] = origin
    return record


def kernel_records_of(text: str, *, source: str, program: str, origin: str | None = None,
                      name: str = "<generated>") -> list[Record]:
    """Every kernel record of a module of several kernels (a while loop's
    body and condition ops, say), as hlo-split writes them, each marked with
    source (and origin). Raises TpuperfError when the text does not parse
    or holds no kernel."""
    from tpuperf_cli.hlo.parser import parse_module
    from tpuperf_cli.hlo.split import kernel_records

    module = parse_module(text, name)
    records = list(kernel_records(module, program=program))
    if not records:
        raise TpuperfError(f"{name}: holds no kernel")
    for record in records:
        record[SOURCE] = source
        if origin is not None:
            record[ORIGIN] = origin
    return records
