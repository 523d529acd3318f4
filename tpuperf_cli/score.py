"""Program estimates from per-kernel predictions (no torch: starts fast).

A program's runtime is the sum over its kernels of pred_ns x count (count:
times the kernel runs per program run, e.g. inside a while loop). Where
every kernel of a program was measured too, the measured sum and the error
come beside it.

    for record in score_records(records): ...   # program records, input order
    render_table(programs) -> str
    score_records(records, top=5)   # each with its 5 costliest kernels ("top")
    render_kernels(programs) -> str
"""

import heapq
import math
from collections.abc import Iterable, Iterator, Sequence

from tpuperf_cli.errors import StreamError
from tpuperf_cli.records import (
    APE,
    COUNT,
    COUNT_KNOWN,
    FUSION_KIND,
    INDEX,
    KERNEL,
    KERNELS,
    MEASURED,
    MODEL,
    OPCODE,
    PRED_NS,
    PROGRAM,
    PROGRAM_RECORD,
    RUNTIME_NS,
    TOP,
    TYPE,
    Record,
    locate,
    measured_runtime,
    new_record,
)


class _Program:
    __slots__ = ("name", "kernels", "pred", "runtime", "measured", "counts_known", "models", "each")

    def __init__(self, name):
        self.name = name
        self.kernels = 0
        self.pred = 0.0
        self.runtime = 0.0
        self.measured = 0
        self.counts_known = True
        self.models = []
        self.each = []      # per kernel, for --top: (pred x count, order, fields)


def _number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def score_records(records: Iterable[Record], name: str = "input", top: int = 0) -> Iterator[Record]:
    """Program records from kernel or graph records that carry pred_ns.

    Each output record: program, kernels (records read), pred_ns (sum of
    pred_ns x count), count_known (every count was known; else pred_ns
    counts unknown trip counts as 1), model; and when every kernel has a
    measured runtime_ns: runtime_ns (sum of runtime_ns x count) and ape
    (100 |pred_ns - runtime_ns| / runtime_ns); otherwise measured (how many
    kernels were). Programs come out in the order first seen, after the
    input ends. A record without pred_ns or with a bad count raises
    StreamError naming it.

    top: with top > 0, each program record also gets "top", its `top`
    kernels with the largest pred_ns x count, largest first, each
    {kernel, index, count, opcode, fusion_kind, pred_ns (one run),
    runtime_ns (one run, or None), share (percent of the program's
    pred_ns)}.
    """
    programs = {}
    for number, record in enumerate(records, 1):
        if record.get(TYPE) == PROGRAM_RECORD:
            raise StreamError(f"{locate(number, name)}: is already a program record (score reads "
                              f"the kernel or graph records that predict writes)")
        pred = record.get(PRED_NS)
        if not _number(pred):
            what = "missing" if PRED_NS not in record else f"not a number ({pred!r})"
            hint = (" (run featurize and predict first: hlo-split prog.hlo | featurize | predict | score)"
                    if PRED_NS not in record else "")
            raise StreamError(f"{locate(number, name)} ({record.get(PROGRAM)}/{record.get(KERNEL)}): "
                              f"pred_ns is {what}{hint}")
        count = record.get(COUNT, 1)
        if not _number(count) or count < 0:
            raise StreamError(f"{locate(number, name)}: count is not a non-negative number ({count!r})")
        program = str(record.get(PROGRAM, ""))
        p = programs.get(program)
        if p is None:
            p = programs[program] = _Program(program)
        p.kernels += 1
        p.pred += float(pred) * count
        if record.get(COUNT_KNOWN) is False:
            p.counts_known = False
        rt = measured_runtime(record)
        if rt is not None:
            p.runtime += float(rt) * count
            p.measured += 1
        model = record.get(MODEL)
        if model is not None and not isinstance(model, str):
            model = repr(model)     # a model name is text; json output needs it so
        if model is not None and model not in p.models:
            p.models.append(model)
        if top:
            p.each.append((float(pred) * count, -p.kernels, _kernel_fields(record, pred, count, rt)))
    if not programs:
        raise StreamError(f"{name}: no records (score reads the records predict writes: "
                          f"hlo-split prog.hlo | featurize | predict | score)")
    for p in programs.values():
        out = new_record(PROGRAM_RECORD, **{PROGRAM: p.name, KERNELS: p.kernels, PRED_NS: p.pred,
                                            COUNT_KNOWN: p.counts_known})
        if len(p.models) == 1:
            out[MODEL] = p.models[0]
        elif p.models:
            out[MODEL] = p.models
        if p.measured == p.kernels and p.kernels:
            out[RUNTIME_NS] = p.runtime
            out[APE] = 100.0 * abs(p.pred - p.runtime) / p.runtime if p.runtime > 0 else None
        elif p.measured:
            out[MEASURED] = p.measured
        if top:
            out[TOP] = [dict(fields, share=100.0 * t / p.pred if p.pred > 0 else None)
                          for t, _, fields in heapq.nlargest(top, p.each)]
        yield out


def _kernel_fields(record, pred, count, runtime):
    return {KERNEL: record.get(KERNEL), INDEX: record.get(INDEX), COUNT: count,
            OPCODE: record.get(OPCODE), FUSION_KIND: record.get(FUSION_KIND),
            PRED_NS: float(pred),
            RUNTIME_NS: float(runtime) if _number(runtime) and runtime > 0 else None}


def _time(ns):
    """ns as a short human figure: 812 ns, 3.41 us, 12.7 ms, 1.25 s."""
    if ns is None:
        return "-"
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if abs(ns) >= scale:
            return f"{ns / scale:.3g} {unit}"
    return f"{ns:.0f} ns"


def _align(header, rows, left=(0,)):
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    return ["  ".join(c.ljust(w) if i in left else c.rjust(w)
                      for i, (c, w) in enumerate(zip(r, widths))).rstrip()
            for r in [header] + rows]


def render_table(programs: Sequence[Record]) -> str:
    """A text table of program records (for a terminal); programs that carry
    "top" (score_records(top=N)) get their kernel table below."""
    header = ["program", "kernels", "predicted", "measured", "error"]
    rows = []
    for p in programs:
        rt = p.get(RUNTIME_NS)
        ape = p.get(APE)
        rows.append([str(p[PROGRAM]), str(p[KERNELS]),
                     _time(p[PRED_NS]) + ("" if p.get(COUNT_KNOWN, True) else " +"),
                     _time(rt) if rt is not None else
                     (f"({p[MEASURED]} of {p[KERNELS]})" if p.get(MEASURED) else "-"),
                     f"{ape:.1f}%" if ape is not None else "-"])
    lines = _align(header, rows)
    if any(not p.get(COUNT_KNOWN, True) for p in programs):
        lines.append("+ some kernels run an unknown number of times (counted once)")
    for p in programs:
        if TOP in p:
            lines += [""] + render_kernels(p)
    return "\n".join(lines) + "\n"


def _count(count):
    return str(int(count)) if float(count).is_integer() else f"{count:.3g}"


def render_kernels(program: Record) -> list[str]:
    """Lines of a program's "top" kernel table: share of the program's
    predicted time, count, opcode, time per program run (x count)."""
    top = program[TOP]
    lines = [f"{program[PROGRAM]}: {len(top)} of {program[KERNELS]} kernels by share of "
             f"predicted time (per program run: time x count)"]
    header = ["share", "count", "opcode", "predicted", "measured", "kernel"]
    rows = []
    for k in top:
        opcode = str(k.get(OPCODE) or "?")
        if k.get(FUSION_KIND):
            opcode += f" ({k[FUSION_KIND]})"
        share = k.get("share")
        rt = k.get(RUNTIME_NS)
        rows.append([f"{share:.1f}%" if share is not None else "-", _count(k[COUNT]), opcode,
                     _time(k[PRED_NS] * k[COUNT]),
                     _time(rt * k[COUNT]) if rt is not None else "-", str(k.get(KERNEL))])
    return lines + ["  " + line for line in _align(header, rows, left=(2, 5))]

