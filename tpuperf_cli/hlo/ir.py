"""The in-memory form of an HLO module, as the parser builds it.

Kept deliberately plain: the parser fills these, featurize and the cost
analysis read them. Attribute values are kept as the raw text XLA printed
(`attrs["dimensions"] == "{0,2}"`); tpuperf_cli.hlo.attrs turns the ones a
tool needs into numbers.
"""

from dataclasses import dataclass, field

# Bytes per element, by XLA primitive type name as it appears in HLO text.
ELEMENT_BYTES = {
    "pred": 1, "s2": 1, "s4": 1, "s8": 1, "s16": 2, "s32": 4, "s64": 8,
    "u2": 1, "u4": 1, "u8": 1, "u16": 2, "u32": 4, "u64": 8,
    "f16": 2, "bf16": 2, "f32": 4, "f64": 8, "c64": 8, "c128": 16,
    "f8e5m2": 1, "f8e4m3fn": 1, "f8e4m3b11fnuz": 1, "f8e5m2fnuz": 1,
    "f8e4m3fnuz": 1, "f8e4m3": 1, "f8e3m4": 1, "f4e2m1fn": 1, "f8e8m0fnu": 1,
}


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
    def is_tuple(self):
        return self.element_type == "tuple"

    @property
    def is_array(self):
        return self.element_type not in ("tuple", "token")

    @property
    def rank(self):
        return len(self.dims)

    def num_elements(self):
        n = 1
        for d in self.dims:
            n *= d
        return n

    def byte_size(self):
        """Bytes of the array, or the sum over a tuple's leaves (as XLA's
        cost analysis counts them, without pointer tables)."""
        if self.is_tuple:
            return sum(s.byte_size() for s in self.tuple_shapes)
        if not self.is_array:
            return 0
        return self.num_elements() * ELEMENT_BYTES.get(self.element_type, 4)

    def leaves(self):
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
    def fusion_kind(self):
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
    def root(self):
        for i in self.instructions:
            if i.is_root:
                return i
        return self.instructions[-1] if self.instructions else None

    @property
    def parameters(self):
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

    def computation(self, name):
        return self.computations[name]
