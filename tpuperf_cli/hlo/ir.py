"""The in-memory form of an HLO module, as the parser builds it.

Kept deliberately plain: the parser fills these, featurize and the cost
analysis read them. Attribute values are kept as the raw text XLA printed
(`attrs["dimensions"] == "{0,2}"`); tpuperf_cli.hlo.attrs turns the ones a
tool needs into numbers.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

# Bytes per element, by XLA primitive type name as it appears in HLO text.
ELEMENT_BYTES = {
    "pred": 1, "s2": 1, "s4": 1, "s8": 1, "s16": 2, "s32": 4, "s64": 8,
    "u2": 1, "u4": 1, "u8": 1, "u16": 2, "u32": 4, "u64": 8,
    "f16": 2, "bf16": 2, "f32": 4, "f64": 8, "c64": 8, "c128": 16,
    "f8e5m2": 1, "f8e4m3fn": 1, "f8e4m3b11fnuz": 1, "f8e5m2fnuz": 1,
    "f8e4m3fnuz": 1, "f8e4m3": 1, "f8e3m4": 1, "f4e2m1fn": 1, "f8e8m0fnu": 1,
}


# Every opcode XLA's HloOpcode knows (xla/hlo/ir/hlo_opcode.h).
OPCODES = frozenset("""
abs acos acosh add add-dependency after-all all-gather all-gather-done
all-gather-start all-reduce all-reduce-done all-reduce-start all-to-all and asin
asinh async-done async-start async-update atan atan2 atanh batch-norm-grad
batch-norm-inference batch-norm-training bitcast bitcast-convert broadcast call
cbrt ceil cholesky clamp count-leading-zeros collective-broadcast
collective-permute collective-permute-done collective-permute-start
collective-reduce compare complex concatenate conditional constant convert
convolution copy copy-done copy-start cosine cosh custom-call divide domain dot
dynamic-reshape dynamic-slice dynamic-update-slice erf exponential
exponential-minus-one fft floor fusion gather get-dimension-size
get-tuple-element imag infeed iota is-finite log log-plus-one logistic map
maximum minimum mulhi multiply negate not opt-barrier or outfeed pad parameter
partition-id popcnt power ragged-all-to-all ragged-dot real recv recv-done
reduce reduce-precision reduce-scatter reduce-window remainder replica-id
reshape reverse rng rng-bit-generator rng-get-and-update-state
round-nearest-afz round-nearest-even rsqrt scaled-dot scan scatter select
select-and-scatter send send-done set-dimension-size shift-left
shift-right-arithmetic shift-right-logical shuffle sign sine sinh slice sort
sqrt stochastic-convert subtract tan tanh topk transpose triangular-solve tuple
while xor
""".split())

# Element types a shape may have besides the numeric ones in ELEMENT_BYTES.
ELEMENT_TYPES = frozenset(ELEMENT_BYTES) | {"token", "opaque", "s1", "u1"}

# Attributes whose value names computations, and so build the call graph.
CALL_ATTRS = ("calls", "to_apply", "body", "condition", "branch_computations",
              "called_computations", "true_computation", "false_computation",
              "select", "scatter")


def async_base(opcode: str) -> str | None:
    """For XLA's async sugar (`negate-start`, `fusion-update`,
    `custom-call-done`: an async-start/-update/-done wrapping one op), the
    wrapped opcode; None for any other opcode."""
    for suffix in ("-start", "-update", "-done"):
        if opcode.endswith(suffix):
            base = opcode[: -len(suffix)]
            if base in OPCODES:
                return base
    return None


@dataclass
class Shape:
    """An array, tuple or token shape with its layout.

    element_type is the XLA type name ("f32", "bf16", "pred", ...), or
    "tuple" / "token". For tuples, `tuple_shapes` holds the elements.
    """

    element_type: str
    dims: tuple = ()                 # sizes; for a dynamic dim, its bound
    dynamic: tuple = ()              # per dim: True where printed as `<=N` or `?`
    minor_to_major: tuple = None     # None when no layout was printed
    tiles: tuple = ()                # TPU tiling: ((8, 128), (2, 1)) for T(8,128)(2,1)
    memory_space: int = 0            # S(n) in the layout
    tuple_shapes: tuple = ()
    # The text XLA printed for this shape, layout included (set by the parser).
    text: str = field(default=None, compare=False, repr=False)

    @property
    def is_tuple(self) -> bool:
        return self.element_type == "tuple"

    @property
    def is_array(self) -> bool:
        return self.element_type not in ("tuple", "token")

    @property
    def rank(self) -> int:
        return len(self.dims)

    @property
    def layout(self) -> tuple:
        """minor_to_major as printed, or XLA's default (rank-1 .. 0) when no
        layout was printed (as XLA's HLO parser gives it)."""
        if self.minor_to_major is None:
            return tuple(range(len(self.dims) - 1, -1, -1))
        return tuple(self.minor_to_major)

    # Shapes are read-only once made (the parser shares them), so the sizes
    # the cost analysis asks for again and again are kept on the object.

    def num_elements(self) -> int:
        n = self.__dict__.get("_elements")
        if n is None:
            n = 1
            for d in self.dims:
                n *= d
            self.__dict__["_elements"] = n
        return n

    def byte_size(self) -> int:
        """Bytes of the array, or the sum over a tuple's leaves (as XLA's
        cost analysis counts them, without pointer tables)."""
        n = self.__dict__.get("_bytes")
        if n is None:
            if self.is_tuple:
                n = sum(s.byte_size() for s in self.tuple_shapes)
            elif not self.is_array:
                n = 0
            else:
                n = self.num_elements() * ELEMENT_BYTES.get(self.element_type, 4)
            self.__dict__["_bytes"] = n
        return n

    def leaves(self) -> Iterator[Shape]:
        """The array shapes inside, depth first (the shape itself if an array)."""
        if self.is_tuple:
            for s in self.tuple_shapes:
                yield from s.leaves()
        elif self.is_array:
            yield self


@dataclass(slots=True)       # slots: a program has thousands; faster to make and to read
class Instruction:
    name: str                        # without the leading %
    opcode: str                      # as printed: "add", "fusion", "custom-call", ...
    shape: Shape
    operands: list                   # operand instruction names, in order
    attrs: dict = field(default_factory=dict)   # attribute name -> raw text
    is_root: bool = False
    line: int = 0                    # 1-based line in the source text
    parameter_number: int = None     # for parameter(N)
    literal: str = None              # for constant(...): the raw literal text
    called: list = field(default_factory=list)  # names of computations it calls

    @property
    def fusion_kind(self) -> str | None:
        return self.attrs.get("kind") if self.opcode == "fusion" else None


@dataclass
class Computation:
    name: str
    instructions: list               # in the order printed (XLA prints topologically)
    is_entry: bool = False
    line: int = 0
    signature: str = None            # raw `(p: f32[4]) -> f32[4]` text, if printed
    attrs: dict = field(default_factory=dict)  # after the `}`: execution_thread="..."

    def __post_init__(self):
        self.by_name = {i.name: i for i in self.instructions}

    @property
    def root(self) -> Instruction | None:
        for i in self.instructions:
            if i.is_root:
                return i
        return self.instructions[-1] if self.instructions else None

    @property
    def parameters(self) -> list[Instruction]:
        params = [i for i in self.instructions if i.opcode == "parameter"]
        return sorted(params, key=lambda i: i.parameter_number)


@dataclass
class Module:
    name: str
    attrs: dict                      # header attributes, raw text
    computations: dict               # name -> Computation, in source order
    entry: Computation = None
    source: str = None               # the file name, for messages
    # FileNames/FunctionNames/FileLocations/StackFrames: section -> raw lines
    sections: dict = field(default_factory=dict)

    def computation(self, name: str) -> Computation:
        return self.computations[name]
