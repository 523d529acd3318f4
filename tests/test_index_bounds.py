"""On an accelerator, measure draws a gather's or scatter's indices in
bounds instead of zeros (zeros queue a scatter's atomic updates on one
row): hlo.compilable.index_bounds finds the parameters and their bounds,
Measurer.inputs draws them. Checked on the GPU corpus's kernels, and by
running a scatter-add on XLA:CPU with such indices: no update skipped."""

import numpy as np

from tpuperf_cli.hlo.compilable import compilable_module, index_bounds
from tpuperf_cli.stream import read_records

from test_compilable_cudnn import CORPUS, run_hlo

SCATTER = """HloModule k

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}

ENTRY %main (o: f32[16,4], i: s32[64], u: f32[64,4]) -> f32[16,4] {
  %o = f32[16,4]{1,0} parameter(0)
  %i = s32[64]{0} parameter(1)
  %c = s32[64,1]{1,0} reshape(%i)
  %u = f32[64,4]{1,0} parameter(2)
  ROOT %r = f32[16,4]{1,0} scatter(%o, %c, %u), update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=%add
}
"""

GATHER = """HloModule g

ENTRY %main (o: f32[16,8], i: s32[10,2]) -> f32[10,4,2] {
  %o = f32[16,8]{1,0} parameter(0)
  %i = s32[10,2]{1,0} parameter(1)
  ROOT %g = f32[10,4,2]{2,1,0} gather(%o, %i), offset_dims={1,2}, collapsed_slice_dims={}, start_index_map={0,1}, index_vector_dim=1, slice_sizes={4,2}
}
"""


def kernel(program, name):
    return next(r["hlo"] for r in read_records(str(CORPUS / f"{program}.zst")) if r["kernel"] == name)


def test_the_bounds_of_the_index_parameters():
    assert index_bounds(SCATTER) == {1: 16}
    assert index_bounds(GATHER) == {1: 7}          # 16 - 4 + 1 rows, 8 - 2 + 1 columns
    # the GPU corpus: gnn's segment sum into 4,096 nodes, moe's routing to 256 rows
    assert index_bounds(kernel("gnn_m_train", "input_scatter_fusion.3")) == {1: 4096, 3: 4096}
    assert index_bounds(kernel("moe_s_train", "input_scatter_fusion.2")) == {1: 256}
    assert index_bounds(kernel("mlp_s_train", "gemm_fusion_dot.3")) == {}


def test_drawn_indices_spread_and_skip_no_update():
    from tpuperf_cli.measure.device import Measurer, program_of

    m = Measurer("cpu", samples=1, clock="wall")
    _, params = program_of(compilable_module(SCATTER))
    o, i, u = (np.asarray(a) for a in m.inputs(params, index_bounds(SCATTER)))
    assert i.min() >= 0 and i.max() < 16 and len(set(i.tolist())) > 8
    assert not np.asarray(m.inputs(params)[1]).any()     # without bounds: zeros, as on CPU
    (out,) = run_hlo(compilable_module(SCATTER), [np.zeros_like(o), i, np.ones_like(u)])
    assert out.sum() == 64 * 4                            # every update landed
