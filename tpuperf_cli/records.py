"""The contract between the stages: record types, field names, array widths,
and how an error names a record.

Every tool reads and writes records (msgpack maps, see stream.py); this
module holds what they agree on, so that no stage defines a width or a field
list of its own. It imports nothing of tpuperf but `errors`, and every
stage imports it: hlo, features, measure, model, eval, tile and commands.

A record is a map with "v" (the schema version) and "type":

    kernel   hlo-split, import tuning-json    KERNEL_FIELDS (+ TILE_FIELDS)
    graph    featurize, import tpugraphs      the kernel fields + GRAPH_FIELDS
    (any)    measure                          MEASURE_FIELDS
    (any)    predict                          PREDICT_FIELDS
    program  score                            PROGRAM_FIELDS

Tools pass through fields they do not know, so pipelines compose.
"""

from collections.abc import Iterable
from typing import Any

from tpuperf_cli import SCHEMA_VERSION
from tpuperf_cli.errors import StreamError

# ---------------------------------------------------------------- types

Record = dict[str, Any]          # a record as read from or written to a stream

KERNEL_RECORD = "kernel"
GRAPH_RECORD = "graph"
PROGRAM_RECORD = "program"

# ---------------------------------------------------------------- fields

VERSION = "v"
TYPE = "type"

# kernel records (hlo-split)
PROGRAM = "program"              # the program's name
KERNEL = "kernel"                # the kernel instruction's name ("COMP/NAME" outside ENTRY)
INDEX = "index"                  # order in the program
COUNT = "count"                  # times the kernel runs per program run
COUNT_KNOWN = "count_known"      # false where a trip count is unknown
HLO = "hlo"                      # a standalone HloModule with just this kernel
OPCODE = "opcode"
FUSION_KIND = "fusion_kind"
FINGERPRINT = "fingerprint"      # equal for identical kernels
COMPUTATION = "computation"      # the computation the kernel sits in
KERNEL_FIELDS = (PROGRAM, KERNEL, INDEX, COUNT, COUNT_KNOWN, HLO, OPCODE, FUSION_KIND,
                 FINGERPRINT, COMPUTATION)

# tpuperf generate: where a generated kernel came from (absent on hlo-split's)
SOURCE = "source"                # "fusions", "ops", ... (generate.SOURCES)
ORIGIN = "origin"                # the program it was drawn from (fusions, variants, sweeps), else absent

# tile-task records (import): one record per tile configuration of a kernel
CONFIG = "config"                # {BOUND_KEYS...: [ints]}
CONFIG_INDEX = "config_index"    # the configuration's position among its kernel's
IS_DEFAULT = "is_default"        # the configuration XLA's analytical model chose
TILE_FIELDS = (CONFIG, CONFIG_INDEX, IS_DEFAULT)

# graph records (featurize): arrays as {"dtype", "shape", "data"} maps
NODE_OPCODE = "node_opcode"      # int32 (n,): TpuGraphs opcode ids
NODE_FEAT = "node_feat"          # float32 (n, NODE_FEATURES)
EDGE_INDEX = "edge_index"        # int32 (m, 2): row [u, v], u consumes v's output
KERNEL_FEAT = "kernel_feat"      # float32 (len(KERNEL_FEATURES),)
CONFIG_FEAT = "config_feat"      # float32 (CONFIG_FEATURES,)
GRAPH_ARRAYS = (NODE_OPCODE, NODE_FEAT, EDGE_INDEX)            # the graph itself
GRAPH_FIELDS = GRAPH_ARRAYS + (KERNEL_FEAT, CONFIG_FEAT)       # what featurize adds

# measure
RUNTIME_NS = "runtime_ns"        # the measured runtime, ns
RUNS = "runs"                    # the samples it comes from
NOISE = "noise"                  # the spread of the samples
TARGET = "target"                # the hardware: a map with at least TARGET_KEYS
ERROR = "error"                  # why a kernel could not be measured
MEASURE_FIELDS = (RUNTIME_NS, RUNS, NOISE, TARGET, ERROR)
# what tells two targets apart: the machine (a bare "AMD EPYC" names several
# CPU generations: family, model, stepping and caches tell them apart), how
# many CPUs and which clock timed it, and the timing method
TARGET_KEYS = ("platform", "device_kind", "chip", "cpu", "caches", "cpu_count", "clock", "method")

# predict
PRED_NS = "pred_ns"              # the predicted runtime, ns (tile models: a ranking score)
MODEL = "model"                  # the predicting model's name
# how far apart the members of a model of several (seeds joined, a network
# joined with trees) put the runtime: the standard deviation of their
# natural-log predictions; 0 for a kernel given its known runtime
PRED_SPREAD = "pred_spread"
PREDICT_FIELDS = (PRED_NS, MODEL, PRED_SPREAD)

# tpuperf baseline apply: the roofline baseline's prediction
BASELINE_NS = "baseline_ns"      # predicted runtime, ns
BASELINE_KIND = "baseline_kind"  # the kernel kind whose coefficient it used
BASELINE_FIELDS = (BASELINE_NS, BASELINE_KIND)

# program records (score)
KERNELS = "kernels"              # records read for the program
APE = "ape"                      # 100 |pred_ns - runtime_ns| / runtime_ns
MEASURED = "measured"            # how many kernels were measured, when not all
TOP = "top"                      # score --top: the kernels with the largest pred_ns x count
PROGRAM_FIELDS = (PROGRAM, KERNELS, PRED_NS, COUNT_KNOWN, MODEL, RUNTIME_NS, APE, MEASURED, TOP)

# ---------------------------------------------------------------- widths

# TpuGraphs' layout, index for index (features/nodes.py, features/config.py)
NODE_FEATURES = 140
# Kernel features are only ever appended: a model reads the first ones, as
# many as it was trained with, so records featurized later still serve it.
# matmul_*: the GEMM a kernel's largest dot or convolution amounts to (batch
# x (m x k) . (k x n); 0 without one): the shape decides its speed, which
# flops and bytes alone do not. matmul_*_align: log2 of the largest power of
# two dividing m, n and k, at most 7: how well the GEMM fills vector lanes
# (16 f32 to an AVX-512 register, 128 lanes on a TPU); XLA:CPU runs 1-D
# convolutions whose features are multiples of 16 at 1.5x the speed of
# others, which log-scaled sizes hide. matmul_lhs/rhs_k_minor: 1 where the
# operand's minor-most physical dim is contracted over (TpuGraphs' node
# features hold layouts but not a dot's contracting dims): a batched dot
# with a transposed rhs ran 2.6x slower than one with the same sizes.
# relayout_bytes: what elementwise ops and copies read in another physical
# layout than they write (a transposition in memory: 7x to 18x slower per
# byte in the corpus's generated adds, copies and selects). output_minor_dim:
# the size of the result's minor-most physical dim (node features hold dims
# and layout apart, and the net has not learnt to pick one by the other),
# and output_minor_align the alignment of that size, as matmul_*_align:
# XLA:CPU's unfused f32 elementwise ops run at about 0.9 ns an element with
# a minor dim of 9 to 34, 0.06 to 0.11 with 8, 40, 48, 56, 64 or 128, and
# 0.2 to 0.3 with most other sizes (96, 160 and 192 among them).
# indexed_slices: the index tuples of the kernel's gathers and scatters:
# XLA:CPU's scatter loop costs about 3 ns a tuple, whatever each one moves.
# touched_bytes: what the kernel needs of its inputs, following which of
# their elements its result depends on (hlo/cost.py): a fusion of strided
# slices of a large parameter reads a fraction of what bytes_read counts.
# relayout_stride: how far (bytes) the largest relayout's inner loop jumps
# through its operand, and its power-of-two alignment: a power-of-two stride
# of 1 to 4 KiB runs about 1.9x slower a byte in the corpus (cache sets).
# reduce_bytes and reduce_kept_minor_bytes: the largest reduce's operand
# bytes and the bytes of the minor dim it keeps (0 when it sums that dim),
# with their alignment: XLA:CPU's column sums keeping 32 or 64 floats run
# 2x slower a byte than those keeping 48 to 72 at 0.1 to 1 MB, 3.6x to
# 6.2x at 3 to 5 MB. minor_loop_unrolled: 1 where LLVM unrolls an
# elementwise loop's short minor-most loop whole and vectorizes across rows
# with gathers (hlo/cost.py): 0.9 ns an element against 0.14 at the same
# minor dims in a corpus measured on an AMD EPYC family 25 model 17 (0.56
# against 0.38 in the committed Intel one), which the minor dim alone does
# not say. matmul_rhs_row_align: log2 of the largest power of two dividing
# the bytes between rows of the largest matmul's rhs, up to 2^14, where it
# is contracted along its minor dim (a weight stored transposed), else 0:
# rows a power of two of bytes apart share cache sets, and f32[16,512] by
# the transpose of f32[256,512] ran at 0.12x the untransposed dot's speed
# against 0.39x at other k (bench_dot_strides.py), which matmul_k_align,
# capped at 128, does not say. needed_flops: the flops and transcendentals
# a loop fusion computes of the elements its result needs (hlo/cost.py):
# XLA's accounting charges every fused op at its full size, so a fusion
# that sums one sliced row of a [8,65,192] expression (a ViT's class
# token) counts 65 times the work it does
KERNEL_FEATURES = ("flops", "transcendentals", "bytes_read", "bytes_written", "output_bytes",
                   "matmul_batch", "matmul_m", "matmul_n", "matmul_k",
                   "matmul_m_align", "matmul_n_align", "matmul_k_align",
                   "matmul_lhs_k_minor", "matmul_rhs_k_minor", "relayout_bytes",
                   "output_minor_dim", "output_minor_align", "indexed_slices",
                   "touched_bytes", "relayout_stride", "relayout_stride_align",
                   "reduce_bytes", "reduce_kept_minor_bytes", "reduce_kept_minor_align",
                   "minor_loop_unrolled", "matmul_rhs_row_align", "needed_flops")
# what featurize wrote before the matmul_* features (2026-11-25)
BASE_KERNEL_FEATURES = 5
# The three bound lists of a tile configuration, in the order TpuGraphs lays
# them out in its config features: each BOUND_SLOTS entries, sum, product.
BOUND_KEYS = ("kernel_bounds", "output_bounds", "input_bounds")
BOUND_SLOTS = 6
CONFIG_FEATURES = len(BOUND_KEYS) * (BOUND_SLOTS + 2)    # 24


# ---------------------------------------------------------------- records

def new_record(type_: str, **fields: Any) -> Record:
    """A record of the given type at the current schema version."""
    return {VERSION: SCHEMA_VERSION, TYPE: type_, **fields}


def locate(number: int | None = None, name: str | None = None, record: Record | None = None) -> str:
    """How an error names a record: "NAME: record N", with " (PROGRAM/KERNEL)"
    when the record has either; "record" alone when the number is unknown."""
    at = f"{name or 'input'}: record {number}" if number is not None else "record"
    if isinstance(record, dict):
        program, kernel = record.get(PROGRAM), record.get(KERNEL)
        if program or kernel:
            return f"{at} ({error_text(program)}/{error_text(kernel)})"
    return at


def error_text(value: Any) -> str:
    """A value (a record's name, a bad field) as an error shows it: as is
    when short plain text, else repr'd and cut (a hostile value must not
    break the one-line error)."""
    if isinstance(value, str) and len(value) <= 80 and value.isprintable():
        return value
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


class Location:
    """locate(number, name, record), built only when an error needs it (for
    loops that read many records and name few)."""

    __slots__ = ("record", "number", "name")

    def __init__(self, record: Record | None, number: int | None, name: str | None):
        self.record, self.number, self.name = record, number, name

    def __str__(self) -> str:
        return locate(self.number, self.name, self.record)

    def __format__(self, spec: str) -> str:
        return format(str(self), spec)


def require(record: Record, fields: Iterable[str], number: int | None = None,
            name: str | None = None) -> None:
    """Raise StreamError naming the record if it lacks any of the fields."""
    missing = [f for f in fields if f not in record]
    if missing:
        raise StreamError(f"{locate(number, name)}: missing field(s) {', '.join(missing)} "
                          f"(type {record.get(TYPE, '?')!r})")


def target_identity(target: Any) -> tuple | None:
    """What tells two measurement targets apart (TARGET_KEYS), None for a
    record without a target map."""
    if not isinstance(target, dict):
        return None
    return tuple(_frozen(target.get(k)) for k in TARGET_KEYS)


def _frozen(value: Any) -> Any:
    if isinstance(value, dict):
        return tuple(sorted((k, _frozen(v)) for k, v in value.items()))
    if isinstance(value, list):
        return tuple(_frozen(v) for v in value)
    return value


def measured_runtime(record: Record) -> float | None:
    """The record's runtime_ns as a float when it is a real measurement (a
    finite number > 0); None for an unmeasured or failed one (null, absent,
    NaN, infinite, zero, negative, not a number), which train, eval and
    baseline leave out (and count) rather than take as fast or slow."""
    rt = record.get(RUNTIME_NS)
    if isinstance(rt, bool) or not isinstance(rt, (int, float)):
        return None
    rt = float(rt)
    return rt if 0 < rt < float("inf") else None


def hashable(value: Any) -> Any:
    """A record's name field as a dict key: itself when hashable, else its
    repr (a list where a name belongs groups apart instead of crashing)."""
    try:
        hash(value)
    except TypeError:
        return repr(value)
    return value
