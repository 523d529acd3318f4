"""The `indexed` source: gathers and scatters of many small slices, as GNN
message passing, embedding lookups and their gradients, MoE routing and
max-pool gradients write them.

`ops` draws a gather's or scatter's slice first and caps the number of
slices by the elements they move, so the corpus's `ops` gathers and
scatters of 5 us or more move a median 45 and 56 slices of large windows.
Programs do the opposite: a GNN layer scatter-adds 8,192 messages of one
float or one row of 32, a max-pool gradient one element per input
position. XLA:CPU's scatter loop costs about 3 ns a slice however little
it moves (featurize's `indexed_slices`), a regime few generated kernels
showed the model, which predicted a held-out GNN's scatter of 8,192
scalars at 0.06x its time (README, "The bundled model").

This source draws the number of slices first, log-uniform from 256 to
2^20 (at most 2^22 elements moved), then one of three forms: rows of a
table indexed along its first dim ([rows] or [rows, 1] for one element a
slice, [rows, w] for rows of 2 to 256), or single elements of a rank-2 to
rank-4 array addressed by a full index vector (a max-pool gradient's).
Tables hold 16 to 2^16 rows; f32 mostly, bf16 or f16 at times (gathers of
s32 ids too); a scatter combines with add mostly, maximum or assign. The
ops are written as jax lowers them (indices [n, k], index_vector_dim 1)
and compiled by XLA:CPU first, so the records are its kernels (a scatter
becomes a kLoop fusion, XLA's `wrapped_scatter`).

Records: program "indexed:gather" or "indexed:scatter". Draws from no
programs.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterator, Sequence

from tpuperf_cli.errors import TpuperfError
from tpuperf_cli.generate import Failed
from tpuperf_cli.generate.ops import (
    ModuleText,
    _assign_comp,
    _default_layout,
    _Gen,
    _scalar_comp,
    compiled_kernels,
)
from tpuperf_cli.records import Record

SOURCE_NAME = "indexed"
SLICES = (256, 1 << 20)
MAX_MOVED = 1 << 22          # elements a kernel gathers or scatters
ROWS = (16, 1 << 16)
ROW_WIDTH = (2, 256)
FORMS = ("one", "one", "row", "row", "point")
SCATTER_COMBINERS = ("add", "add", "add", "add", "maximum", "assign")


def _shape(g: _Gen, dt: str, dims: list[int]) -> str:
    return g.shape(dt, dims, _default_layout(len(dims)))


def _draw(g: _Gen) -> tuple[list[int], list[int], list[int], int]:
    """(operand dims, slice sizes, the dims an index tuple addresses,
    slices)."""
    form = g.choice(FORMS)
    if form == "point":
        dims = g.dims(g.randint(2, 4), 1 << 20, min_elems=4096)
        sizes = [1] * len(dims)
        index_map = list(range(len(dims)))
    else:
        rows = g.logint(*ROWS)
        if form == "row":
            dims = [rows, g.logint(*ROW_WIDTH)]
        else:
            dims = [rows] if g.rand() < 0.5 else [rows, 1]
        sizes = [1] + dims[1:]
        index_map = [0]
    n = min(g.logint(*SLICES), max(SLICES[0], MAX_MOVED // math.prod(sizes)))
    return dims, sizes, index_map, n


def _gather(g: _Gen) -> tuple[str, str]:
    dt = g.choice(("f32", "f32", "f32", "bf16", "f16", "s32"))
    dims, sizes, index_map, n = _draw(g)
    # the addressed dims are collapsed; the rest of the slice is the output's
    kept = [d for d in range(len(dims)) if d not in index_map]
    op = ModuleText("gather")
    x = op.param(_shape(g, dt, dims))
    i = op.param(_shape(g, "s32", [n, len(index_map)]))
    attrs = (f"offset_dims={{{','.join(str(1 + j) for j in range(len(kept)))}}}, "
             f"collapsed_slice_dims={{{','.join(map(str, index_map))}}}, "
             f"start_index_map={{{','.join(map(str, index_map))}}}, index_vector_dim=1, "
             f"slice_sizes={{{','.join(map(str, sizes))}}}")
    out = [n] + [sizes[d] for d in kept]
    return "gather", op.text(_shape(g, dt, out), "gather", [x, i], attrs)


def _scatter(g: _Gen) -> tuple[str, str]:
    dt = g.choice(("f32", "f32", "f32", "bf16", "f16"))
    dims, sizes, index_map, n = _draw(g)
    kind = g.choice(SCATTER_COMBINERS)
    op = ModuleText("scatter")
    op.comps.append(_assign_comp("combine", dt) if kind == "assign"
                    else _scalar_comp("combine", dt, kind))
    x = op.param(_shape(g, dt, dims))
    i = op.param(_shape(g, "s32", [n, len(index_map)]))
    # jax's form: every slice dim is a window dim, none inserted ([n, 1, w])
    u = op.param(_shape(g, dt, [n] + sizes))
    attrs = (f"update_window_dims={{{','.join(str(1 + j) for j in range(len(sizes)))}}}, "
             f"inserted_window_dims={{}}, "
             f"scatter_dims_to_operand_dims={{{','.join(map(str, index_map))}}}, "
             f"index_vector_dim=1, to_apply=%combine")
    return "scatter", op.text(_shape(g, dt, dims), "scatter", [x, i, u], attrs)


DRAWS = {"scatter": (_scatter, 2), "gather": (_gather, 1)}


def generate(seed: int, programs: Sequence[str], log: Callable[[str], None]) -> Iterator[Record]:
    """Kernel records of gathers and scatters of many small slices, forever
    (see the module docstring). programs: unused (this source draws from
    none)."""
    r = random.Random(f"{SOURCE_NAME}:{seed}")
    g = _Gen(r)
    names = list(DRAWS)
    weights = [DRAWS[n][1] for n in names]
    while True:
        opcode, text = DRAWS[r.choices(names, weights)[0]][0](g)
        try:
            yield from compiled_kernels(text, opcode, SOURCE_NAME)
        except TpuperfError as e:
            yield Failed(f"{SOURCE_NAME}:{opcode}: {e}")
