"""The autotuner's short list: per kernel, the K configurations the model
ranks fastest.

Records of one kernel share (program, kernel). Only the K best-ranked
records of each kernel are held in memory (a bounded heap), so a stream of
any length can be read; the short lists come out when the input ends, in the
order the kernels were first seen, fastest first.
"""

import heapq
import math
from collections.abc import Iterable, Iterator

from tpuperf_cli.errors import StreamError
from tpuperf_cli.records import GRAPH_ARRAYS, KERNEL, PRED_NS, TYPE, Record, locate
from tpuperf_cli.tile import group_key


class _Kernel:
    __slots__ = ("heap", "seen")

    def __init__(self):
        self.heap = []   # max-heap on (score, order) via negation: the worst kept on top
        self.seen = 0


def top_k(records: Iterable[Record], k: int, field: str = PRED_NS, name: str = "input") -> Iterator[Record]:
    """Yield, per kernel, its k records with the smallest `field`, in order,
    each with `rank` (1 = predicted fastest) and `candidates` (how many
    configurations of the kernel were read).

    Ties keep input order. A record without a finite `field` raises
    StreamError naming its number.
    """
    if k < 1:
        raise ValueError("k must be at least 1")
    kernels = {}
    for number, record in enumerate(records, 1):
        score = record.get(field)
        if isinstance(score, bool) or not isinstance(score, (int, float)) or math.isnan(score):
            what = "missing" if field not in record else f"not a number ({score!r})"
            raise StreamError(f"{locate(number, name)}: field {field!r} is {what}; "
                              f"run predict first or give --model")
        key = group_key(record)
        if key[1] is None:
            raise StreamError(f"{locate(number, name)}: missing field {KERNEL!r} "
                              f"(type {record.get(TYPE, '?')!r})")
        entry = kernels.get(key)
        if entry is None:
            entry = kernels[key] = _Kernel()
        entry.seen += 1
        item = (-float(score), -number, record)
        if len(entry.heap) < k:
            heapq.heappush(entry.heap, item)
        elif item[:2] > entry.heap[0][:2]:
            heapq.heapreplace(entry.heap, item)
    for entry in kernels.values():
        best = sorted(entry.heap, key=lambda item: (-item[0], -item[1]))
        for rank, (_, _, record) in enumerate(best, 1):
            record["rank"] = rank
            record["candidates"] = entry.seen
            yield record


def slim(record: Record) -> Record:
    """The record without its graph arrays (the short list stays readable)."""
    for key in GRAPH_ARRAYS:
        record.pop(key, None)
    return record
