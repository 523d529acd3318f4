"""hlo.cost: hand-computed costs, and agreement with XLA's own HloCostAnalysis
(jaxlib's hlo_module_cost_analysis on the same standalone kernel modules)."""

import pathlib

import pytest

from tpuperf_cli.hlo.cost import KERNEL_FEATURES, alignment, kernel_cost
from tpuperf_cli.hlo.dump import read_hlo
from tpuperf_cli.hlo.parser import parse_module

ROOT = pathlib.Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples" / "hlo").glob("*.hlo.zst"))

# Kernels whose flops XLA does not know: it reports -1 for a custom-call
# (LAPACK, TopK, ...); we report 0. Every other kernel must agree.
KNOWN_EXCEPTIONS = {"custom-call": "XLA reports -1 (unknown) for custom-calls; we report 0"}


def cost(hlo):
    return kernel_cost(parse_module(hlo, "test.hlo"))


def xla_cost(hlo):
    jax = pytest.importorskip("jax")
    from jax._src.lib import xla_client as xc

    client = jax.devices("cpu")[0].client
    return xc._xla.hlo_module_cost_analysis(client, xc._xla.hlo_module_from_text(hlo))


def agrees(ours, xla, key):
    want = xla.get(key, 0.0)
    return abs(ours[key] - want) <= 0.01 * abs(want)


CONV = """HloModule conv
ENTRY e {
  x = f32[2,17,19,3]{3,2,1,0} parameter(0)
  w = f32[3,3,3,5]{3,2,1,0} parameter(1)
  ROOT c = f32[2,8,38,5]{3,2,1,0} convolution(x, w), window={size=3x3 stride=2x1 pad=1_2x0_3 lhs_dilate=1x2 rhs_dilate=2x1}, dim_labels=b01f_01io->b01f
}
"""


def test_convolution_counts_only_valid_positions():
    # dim 0 (in 17, out 8, stride 2, pad_low 1, window dilation 2):
    #   kernel tap 0 hits 7 outputs, tap 1 hits 8, tap 2 hits 7 -> 22
    # dim 1 (in 19 with base dilation 2, out 38, stride 1, pad_low 0):
    #   taps hit 19, 18, 18 real (non-hole) inputs -> 55
    # 2 flops x 3 in-features x 5 out-features x batch 2 x 22 x 55
    c = cost(CONV)
    assert c["flops"] == 2 * 3 * 5 * 2 * 22 * 55 == 72600
    assert c["transcendentals"] == 0
    assert c["bytes_read"] == 4 * (2 * 17 * 19 * 3 + 3 * 3 * 3 * 5)
    assert c["bytes_written"] == c["output_bytes"] == 4 * 2 * 8 * 38 * 5


def test_grouped_convolution():
    c = cost("""HloModule g
ENTRY e {
  x = f32[2,6,9,9]{3,2,1,0} parameter(0)
  w = f32[6,2,3,3]{3,2,1,0} parameter(1)
  ROOT c = f32[2,6,9,9]{3,2,1,0} convolution(x, w), window={size=3x3 pad=1_1x1_1}, dim_labels=bf01_oi01->bf01, feature_group_count=3
}
""")
    # per spatial dim: 9 + 8 + 8 = 25 valid (output, tap) pairs (edges padded)
    assert c["flops"] == 2 * (6 // 3) * 6 * 2 * 25 * 25


FUSION = """HloModule f
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
fused {
  p0 = f32[64,32]{1,0} parameter(0)
  p1 = f32[4,32]{1,0} parameter(1)
  i = s32[] parameter(2)
  z = s32[] constant(0)
  e = f32[4,32]{1,0} exponential(p1)
  sl = f32[4,32]{1,0} slice(p0), slice={[0:4], [0:32]}
  m = f32[4,32]{1,0} multiply(e, sl)
  ROOT u = f32[64,32]{1,0} dynamic-update-slice(p0, m, i, z)
}
ENTRY e {
  a = f32[64,32]{1,0} parameter(0)
  b = f32[4,32]{1,0} parameter(1)
  i = s32[] parameter(2)
  ROOT f = f32[64,32]{1,0} fusion(a, b, i), kind=kLoop, calls=fused
}
"""


def test_fusion_sums_fused_ops_and_counts_sliced_and_aliased_bytes():
    c = cost(FUSION)
    assert c["flops"] == 4 * 32                  # multiply; exp is a transcendental
    assert c["transcendentals"] == 4 * 32
    # p0: read only through its slice (512 B; the update-slice aliases it),
    # p1 whole (512 B), i (4 B); written: only the 4x32 update
    assert c["bytes_read"] == 512 + 512 + 4
    assert c["bytes_written"] == 512
    assert c["output_bytes"] == 64 * 32 * 4


REDUCE_WINDOW = """HloModule rw
max {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT m = f32[] maximum(a, b)
}
ENTRY e {
  x = f32[8,8]{1,0} parameter(0)
  c = f32[] constant(-inf)
  ROOT r = f32[4,4]{1,0} reduce-window(x, c), window={size=3x3 stride=2x2 pad=0_1x0_1}, to_apply=max
}
"""


def test_reduce_window():
    c = cost(REDUCE_WINDOW)
    assert c["flops"] == (9 - 1) * 16


@pytest.mark.parametrize("hlo", [CONV, FUSION, REDUCE_WINDOW], ids=["conv", "fusion", "rw"])
def test_hand_written_modules_agree_with_xla(hlo):
    ours = cost(hlo)
    xla = xla_cost(hlo)
    for key in ("flops", "transcendentals"):
        assert agrees(ours, xla, key), (key, ours, xla)
    assert ours["bytes_read"] + ours["bytes_written"] == xla["bytes accessed"]
    assert ours["bytes_written"] == xla["bytes accessedout{}"]


# ---------------------------------------------------------------- against XLA on real kernels

def compare(kernel_records):
    """(agreeing, total, [(program, kernel, opcode, ours, xla), ...])."""
    good = 0
    total = 0
    misses = []
    for r in kernel_records:
        ours = cost(r["hlo"])
        xla = xla_cost(r["hlo"])
        total += 1
        # bytes: equal, except where XLA counts a tuple result as its pointer
        # table (8 B per element) and we count the arrays, and custom-calls (-1).
        # XLA leaves out a key whose value is 0 (an identity transpose is a
        # bitcast: nothing accessed).
        root = parse_module(r["hlo"], "k.hlo").entry.root
        if r["opcode"] != "custom-call" and not root.shape.is_tuple:
            assert ours["bytes_read"] + ours["bytes_written"] == xla.get("bytes accessed", 0.0), \
                r["kernel"]
        if agrees(ours, xla, "flops") and agrees(ours, xla, "transcendentals"):
            good += 1
        else:
            misses.append((r["program"], r["kernel"], r["opcode"],
                           {k: ours[k] for k in ("flops", "transcendentals")},
                           {k: xla.get(k, 0.0) for k in ("flops", "transcendentals")}))
    return good, total, misses


def split(text, program):
    from tpuperf_cli.hlo.split import kernel_records

    return list(kernel_records(parse_module(text, program), program=program))


def check_agreement(records):
    good, total, misses = compare(records)
    unexplained = [m for m in misses if m[2] not in KNOWN_EXCEPTIONS]
    print(f"\ncost analysis vs XLA: {good}/{total} kernels agree on flops and "
          f"transcendentals ({100 * good / total:.1f}%)")
    for m in misses:
        print("  exception:", m, KNOWN_EXCEPTIONS.get(m[2], "UNEXPLAINED"))
    assert total > 0
    assert good >= 0.95 * total
    assert not unexplained, unexplained


def jax_programs():
    """Small JAX programs covering ops the examples lack (dilated and grouped
    convolutions, fft, sort, scatter, select-and-scatter, rng, linalg)."""
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    lax = jax.lax
    x4 = jnp.ones((2, 3, 17, 19))
    yield "conv", lambda x, w: lax.conv_general_dilated(
        x, w, (2, 1), ((1, 2), (0, 3)), lhs_dilation=(1, 2), rhs_dilation=(2, 1)), \
        (x4, jnp.ones((5, 3, 3, 4)))
    yield "grouped", lambda x, w: lax.conv_general_dilated(
        x, w, (1, 1), "SAME", feature_group_count=3), (jnp.ones((2, 6, 9, 9)), jnp.ones((6, 2, 3, 3)))
    yield "transcendental", lambda x: (jnp.sin(x) + jnp.tan(x) + lax.erf(x) + jnp.arctan2(x, x + 1)
                                       + jnp.cosh(x) + x ** x + jnp.log1p(x) + jnp.expm1(x)), \
        (jnp.ones((7, 9)),)
    yield "fft", lambda x: jnp.fft.rfft2(x), (jnp.ones((8, 16, 32)),)
    yield "sort", lambda x: jnp.sort(x, axis=1), (jnp.ones((5, 100)),)
    yield "scatter", lambda x, i, u: x.at[i].add(u), (jnp.ones((50, 8)), jnp.array([1, 3, 3]),
                                                      jnp.ones((3, 8)))
    yield "maxpool_grad", jax.grad(lambda x: lax.reduce_window(
        x, -jnp.inf, lax.max, (1, 3, 3, 1), (1, 2, 2, 1), "SAME").sum()), (jnp.ones((2, 9, 9, 4)),)
    yield "dus", lambda x, u, i: lax.dynamic_update_slice(x * 2, u, (i, 0)), \
        (jnp.ones((64, 32)), jnp.ones((4, 32)), 3)
    yield "rng", lambda k: jax.random.normal(k, (32, 32)), (jax.random.PRNGKey(0),)
    yield "linalg", lambda a, b: jax.scipy.linalg.solve_triangular(a, b) + jnp.linalg.cholesky(a), \
        (jnp.eye(8) * 2, jnp.ones((8, 8)))


def test_agrees_with_xla_on_jax_programs():
    import jax

    records = []
    for name, f, args in jax_programs():
        records += split(jax.jit(f).lower(*args).compile().as_text(), name)
    check_agreement(records)


def test_agrees_with_xla_on_sample_examples():
    picked = [p for p in EXAMPLES if p.name in ("cnn_s_train.hlo.zst", "gru_s_train.hlo.zst")]
    if not picked:
        pytest.skip("examples/hlo not generated")
    records = []
    for p in picked:
        records += split(read_hlo(p).text, p.name.removesuffix(".hlo.zst"))
    check_agreement(records)


def test_agrees_with_xla_on_every_example_kernel():
    # ~5 s for the ~14,600 kernels of the 77 example programs: not slow-marked
    if not EXAMPLES:
        pytest.skip("examples/hlo not generated")
    records = []
    for p in EXAMPLES:
        records += split(read_hlo(p).text, p.name.removesuffix(".hlo.zst"))
    check_agreement(records)


def test_kernel_feature_names():
    # only ever appended to: models read the first ones they were trained with
    assert KERNEL_FEATURES == ("flops", "transcendentals", "bytes_read", "bytes_written",
                               "output_bytes", "matmul_batch", "matmul_m", "matmul_n",
                               "matmul_k", "matmul_m_align", "matmul_n_align",
                               "matmul_k_align", "matmul_lhs_k_minor", "matmul_rhs_k_minor",
                               "relayout_bytes", "output_minor_dim", "output_minor_align",
                               "indexed_slices", "touched_bytes", "relayout_stride",
                               "relayout_stride_align", "reduce_bytes",
                               "reduce_kept_minor_bytes", "reduce_kept_minor_align",
                               "minor_loop_unrolled", "matmul_rhs_row_align", "needed_flops")


def matmul(c):
    return tuple(c[k] for k in ("matmul_batch", "matmul_m", "matmul_n", "matmul_k"))


def test_matmul_shape_of_dots_and_convolutions():
    # a batched dot: 3 x (8 x 16) . (16 x 4)
    assert matmul(cost("""HloModule d
ENTRY e {
  a = f32[3,8,16]{2,1,0} parameter(0)
  b = f32[3,16,4]{2,1,0} parameter(1)
  ROOT d = f32[3,8,4]{2,1,0} dot(a, b), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={1}
}
""")) == (3, 8, 4, 16)
    # the convolution above: m = batch 2 x 8 x 38 output positions, n = 5
    # output features, k = 3 input features x 3 x 3 taps
    assert matmul(cost(CONV)) == (1, 2 * 8 * 38, 5, 3 * 3 * 3)
    # grouped: 3 groups of (2 x 9 x 9) x (2 x 9 taps) . (2 outputs)
    assert matmul(cost("""HloModule g
ENTRY e {
  x = f32[2,6,9,9]{3,2,1,0} parameter(0)
  w = f32[6,2,3,3]{3,2,1,0} parameter(1)
  ROOT c = f32[2,6,9,9]{3,2,1,0} convolution(x, w), window={size=3x3 pad=1_1x1_1}, dim_labels=bf01_oi01->bf01, feature_group_count=3
}
""")) == (3, 2 * 9 * 9, 2, 2 * 9)
    # none: zeros
    assert matmul(cost(FUSION)) == (0, 0, 0, 0)


def test_matmul_shape_is_the_largest_dot_inside_a_fusion():
    c = cost("""HloModule f
fused {
  p0 = f32[64,32]{1,0} parameter(0)
  p1 = f32[32,16]{1,0} parameter(1)
  p2 = f32[2,32]{1,0} parameter(2)
  small = f32[2,16]{1,0} dot(p2, p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  big = f32[64,16]{1,0} dot(p0, p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT t = f32[64,16]{1,0} tanh(big)
}
ENTRY e {
  a = f32[64,32]{1,0} parameter(0)
  b = f32[32,16]{1,0} parameter(1)
  c = f32[2,32]{1,0} parameter(2)
  ROOT f = f32[64,16]{1,0} fusion(a, b, c), kind=kOutput, calls=fused
}
""")
    assert matmul(c) == (1, 64, 16, 32)


def test_alignment_of_the_matmul_sizes():
    assert [alignment(x) for x in (0, 1, 3, 2, 12, 48, 96, 128, 256, 4096 * 3)] == \
        [0, 0, 0, 1, 2, 4, 5, 7, 7, 7]
    aligned = ("matmul_m_align", "matmul_n_align", "matmul_k_align")
    # a WaveNet-like 1-D convolution: m = 4 x 1024 positions, n = 48
    # features, k = 48 features x 2 taps
    c = cost("""HloModule w
ENTRY e {
  x = f32[4,1025,48]{2,1,0} parameter(0)
  w = f32[2,48,48]{2,1,0} parameter(1)
  ROOT c = f32[4,1024,48]{2,1,0} convolution(x, w), window={size=2}, dim_labels=b0f_0io->b0f
}
""")
    assert matmul(c) == (1, 4096, 48, 96)
    assert tuple(c[k] for k in aligned) == (7, 4, 5)
    # the same with 35 features: odd n, k = 70
    c = cost("""HloModule w
ENTRY e {
  x = f32[4,1025,35]{2,1,0} parameter(0)
  w = f32[2,35,35]{2,1,0} parameter(1)
  ROOT c = f32[4,1024,35]{2,1,0} convolution(x, w), window={size=2}, dim_labels=b0f_0io->b0f
}
""")
    assert tuple(c[k] for k in aligned) == (7, 0, 1)
    # no matmul: zeros
    assert tuple(cost(FUSION)[k] for k in aligned) == (0, 0, 0)


def layout(c):
    return c["matmul_lhs_k_minor"], c["matmul_rhs_k_minor"]


def dot_module(lhs, rhs, out, lc, rc):
    return f"""HloModule d
ENTRY e {{
  a = f32{lhs} parameter(0)
  b = f32{rhs} parameter(1)
  ROOT d = f32{out} dot(a, b), lhs_batch_dims={{0}}, lhs_contracting_dims={{{lc}}}, rhs_batch_dims={{0}}, rhs_contracting_dims={{{rc}}}
}}
"""


def test_matmul_layout_says_which_operands_are_contracted_along_their_minor_dim():
    # MoE's batched dots: a row-major GEMM, then the same sizes with a
    # transposed rhs (2.6x slower on XLA:CPU), then a transposed lhs
    assert layout(cost(dot_module("[8,64,256]{2,1,0}", "[8,256,512]{2,1,0}", "[8,64,512]{2,1,0}", 2, 1))) \
        == (1, 0)
    assert layout(cost(dot_module("[8,64,256]{2,1,0}", "[8,512,256]{2,1,0}", "[8,64,512]{2,1,0}", 2, 2))) \
        == (1, 1)
    assert layout(cost(dot_module("[8,256,64]{2,1,0}", "[8,256,512]{2,1,0}", "[8,64,512]{2,1,0}", 1, 1))) \
        == (0, 0)
    # the physical layout decides, not the logical order: rhs [8,256,512]
    # laid out with dim 1 minor is contracted along its minor dim
    assert layout(cost(dot_module("[8,64,256]{2,1,0}", "[8,256,512]{1,2,0}", "[8,64,512]{2,1,0}", 2, 1))) \
        == (1, 1)
    # no layout printed: XLA's default (the last dim minor)
    assert layout(cost(dot_module("[8,64,256]", "[8,256,512]", "[8,64,512]", 2, 1))) == (1, 0)
    # convolutions: NHWC input and HWIO kernel (features minor, outputs
    # minor), then NCHW input and OIHW kernel (spatial minor)
    def conv(x, w, out, labels):
        return cost(f"""HloModule c
ENTRY e {{
  x = f32{x}{{3,2,1,0}} parameter(0)
  w = f32{w}{{3,2,1,0}} parameter(1)
  ROOT c = f32{out}{{3,2,1,0}} convolution(x, w), window={{size=3x3}}, dim_labels={labels}
}}
""")

    assert layout(conv("[2,10,10,8]", "[3,3,8,16]", "[2,8,8,16]", "b01f_01io->b01f")) == (1, 0)
    nchw = conv("[2,8,10,10]", "[16,8,3,3]", "[2,16,8,8]", "bf01_oi01->bf01")
    assert layout(nchw) == (0, 0)
    assert layout(cost(FUSION)) == (0, 0)


def test_matmul_rhs_row_align_is_the_power_of_two_in_a_transposed_weights_row_stride():
    """Rows of a weight stored transposed that lie a power of two of bytes
    apart run 3x slower on XLA:CPU (bench_dot_strides.py): f32 rows of 512
    are 2 KiB apart (2^11), of 576 2,304 bytes (2^8 x 9)."""
    def row_align(lhs, rhs, out, lc, rc):
        return cost(dot_module(lhs, rhs, out, lc, rc))["matmul_rhs_row_align"]

    assert row_align("[8,16,512]{2,1,0}", "[8,256,512]{2,1,0}", "[8,16,256]{2,1,0}", 2, 2) == 11
    assert row_align("[8,16,576]{2,1,0}", "[8,256,576]{2,1,0}", "[8,16,256]{2,1,0}", 2, 2) == 8
    # capped at 2^14 bytes, as the stride features are
    assert row_align("[8,16,8192]{2,1,0}", "[8,64,8192]{2,1,0}", "[8,16,64]{2,1,0}", 2, 2) == 14
    # the rhs read as the product reads it (contracted along its major dim): 0
    assert row_align("[8,16,512]{2,1,0}", "[8,512,256]{2,1,0}", "[8,16,256]{2,1,0}", 2, 1) == 0
    # the physical layout decides: [8,512,256] with dim 1 minor is transposed
    assert row_align("[8,16,512]{2,1,0}", "[8,512,256]{1,2,0}", "[8,16,256]{2,1,0}", 2, 1) == 11
    # bf16 rows of 512 are 1 KiB apart; no matmul at all: 0
    bf16 = dot_module("[8,16,512]{2,1,0}", "[8,256,512]{2,1,0}", "[8,16,256]{2,1,0}", 2, 2)
    assert cost(bf16.replace("f32", "bf16"))["matmul_rhs_row_align"] == 10
    assert cost(FUSION)["matmul_rhs_row_align"] == 0


def test_needed_flops_counts_what_a_loop_fusion_computes_of_what_its_result_needs():
    """A ViT's class-token sum: the fusion computes an expression over
    f32[8,65,192] but sums only the slice of its first row, so it needs a
    65th of the flops XLA's accounting charges; unsliced, every element is
    needed and needed_flops is flops + transcendentals."""
    def fused(slice_rows):
        return f"""HloModule m
%add (a: f32[], b: f32[]) -> f32[] {{
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}}
%fused (p0: f32[8,65,192], p1: f32[8,65,192]) -> f32[192] {{
  %p0 = f32[8,65,192]{{2,1,0}} parameter(0)
  %p1 = f32[8,65,192]{{2,1,0}} parameter(1)
  %m = f32[8,65,192]{{2,1,0}} multiply(%p0, %p1)
  %e = f32[8,65,192]{{2,1,0}} exponential(%m)
  %sl = f32[8,{slice_rows},192]{{2,1,0}} slice(%e), slice={{[0:8], [0:{slice_rows}], [0:192]}}
  %z = f32[] constant(0)
  ROOT %r = f32[192]{{0}} reduce(%sl, %z), dimensions={{0,1}}, to_apply=%add
}}
ENTRY %e (a: f32[8,65,192], b: f32[8,65,192]) -> f32[192] {{
  %a = f32[8,65,192]{{2,1,0}} parameter(0)
  %b = f32[8,65,192]{{2,1,0}} parameter(1)
  ROOT %f = f32[192]{{0}} fusion(%a, %b), kind=kLoop, calls=%fused
}}
"""
    whole, one = cost(fused(65)), cost(fused(1))
    n = 8 * 65 * 192
    # multiply (flops) and exponential (a transcendental) over every element, then the sum
    assert whole["flops"] == n + (n - 192) and whole["transcendentals"] == n
    assert whole["needed_flops"] == whole["flops"] + whole["transcendentals"]
    # one row of 65: the same accounting, a 65th of the work
    assert one["flops"] == n + (8 * 192 - 192) and one["transcendentals"] == n
    assert one["needed_flops"] == 8 * 192 + 8 * 192 + (8 * 192 - 192)
    # an unfused op: its flops
    assert cost(FUSION)["needed_flops"] > 0
    plain = cost(dot_module("[8,16]{1,0}", "[16,4]{1,0}", "[8,4]{1,0}", 1, 0))
    assert plain["needed_flops"] == plain["flops"] == 1024


def test_relayout_bytes_counts_operands_read_in_another_layout():
    # a WaveNet add: both operands in the result's layout
    same = cost("""HloModule a
ENTRY e {
  x = f32[8,512,48]{2,1,0} parameter(0)
  y = f32[8,512,48]{2,1,0} parameter(1)
  ROOT a = f32[8,512,48]{2,1,0} add(x, y)
}
""")
    assert same["relayout_bytes"] == 0
    # one operand laid out the other way round: 8*512*48*4 bytes transposed
    other = cost("""HloModule a
ENTRY e {
  x = f32[8,512,48]{0,1,2} parameter(0)
  y = f32[8,512,48]{2,1,0} parameter(1)
  ROOT a = f32[8,512,48]{2,1,0} add(x, y)
}
""")
    assert other["relayout_bytes"] == 8 * 512 * 48 * 4
    # a copy that changes the layout, inside a fusion; no layout printed
    # is XLA's default ({1,0} here)
    fused = cost("""HloModule f
fc {
  p = f32[64,32]{0,1} parameter(0)
  c = f32[64,32] copy(p)
  ROOT n = f32[64,32]{1,0} negate(c)
}
ENTRY e {
  x = f32[64,32]{0,1} parameter(0)
  ROOT f = f32[64,32]{1,0} fusion(x), kind=kLoop, calls=fc
}
""")
    assert fused["relayout_bytes"] == 64 * 32 * 4
    # a broadcast or a reduce changes dims, not layout: not counted
    assert cost(FUSION)["relayout_bytes"] == 0


def test_relayout_stride_is_the_jump_of_the_copys_inner_loop():
    # ssm_m_train's slow transposes: f32[16,256,128] to [128,16,256] by a
    # copy whose result's minor dim (256) steps 128 floats through its operand
    ssm = cost("""HloModule t
fc {
  p = f32[16,256,128]{2,1,0} parameter(0)
  t = f32[128,16,256]{0,2,1} transpose(p), dimensions={2,0,1}
  ROOT c = f32[128,16,256]{2,1,0} copy(t)
}
ENTRY e {
  x = f32[16,256,128]{2,1,0} parameter(0)
  ROOT f = f32[128,16,256]{2,1,0} fusion(x), kind=kLoop, calls=fc
}
""")
    assert ssm["relayout_stride"] == 128 * 4 and ssm["relayout_stride_align"] == 9
    # bf16 and a stride off a power of two: 48 elements of 2 bytes
    odd = cost("""HloModule a
ENTRY e {
  x = bf16[8,512,48]{1,2,0} parameter(0)
  ROOT c = bf16[8,512,48]{2,1,0} copy(x)
}
""")
    assert odd["relayout_stride"] == 512 * 2 and odd["relayout_stride_align"] == 10
    # of two relayouts, the larger one's; none: 0
    two = cost("""HloModule a
ENTRY e {
  x = f32[64,32]{0,1} parameter(0)
  y = f32[4,1000]{0,1} parameter(1)
  a = f32[64,32]{1,0} copy(x)
  b = f32[4,1000]{1,0} copy(y)
  ROOT t = (f32[64,32]{1,0}, f32[4,1000]{1,0}) tuple(a, b)
}
""")
    assert two["relayout_stride"] == 4 * 4
    assert cost(FUSION)["relayout_stride"] == 0 and cost(FUSION)["relayout_stride_align"] == 0
    assert alignment(1 << 20, 14) == 14 and alignment(1 << 20) == 7


def test_reduce_shape_tells_column_from_row_reductions():
    def reduce(shape, dims):
        kept = ",".join(d for i, d in enumerate(shape.split(",")) if i not in dims)
        layout = ",".join(str(i) for i in reversed(range(kept.count(",") + 1)))
        return cost(f"""HloModule r
add {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}}
ENTRY e {{
  x = f32[{shape}]{{3,2,1,0}} parameter(0)
  z = f32[] constant(0)
  ROOT r = f32[{kept}]{{{layout}}} reduce(x, z), dimensions={{{",".join(map(str, dims))}}}, to_apply=add
}}
""")
    # densenet's batch-norm sums: the minor dim (72 channels) kept
    col = reduce("16,32,32,72", [0, 1, 2])
    assert col["reduce_bytes"] == 16 * 32 * 32 * 72 * 4
    assert col["reduce_kept_minor_bytes"] == 72 * 4 and col["reduce_kept_minor_align"] == 5
    # 64 kept: the slow one of the same bytes
    assert reduce("16,32,32,64", [0, 1, 2])["reduce_kept_minor_align"] == 8
    # a row reduction: bytes, nothing kept minor
    row = reduce("16,32,32,72", [3])
    assert row["reduce_bytes"] == 16 * 32 * 32 * 72 * 4 and row["reduce_kept_minor_bytes"] == 0
    assert row["reduce_kept_minor_align"] == 0
    # no reduce at all (a reduce-window is not one)
    none = cost("""HloModule a
ENTRY e {
  x = f32[8,8]{1,0} parameter(0)
  ROOT a = f32[8,8]{1,0} add(x, x)
}
""")
    assert (none["reduce_bytes"], none["reduce_kept_minor_bytes"]) == (0, 0)


def test_output_minor_dim_follows_the_physical_layout():
    def add(shape):
        c = cost(f"""HloModule a
ENTRY e {{
  x = {shape} parameter(0)
  ROOT a = {shape} add(x, x)
}}
""")
        assert c["output_minor_align"] == alignment(c["output_minor_dim"])
        return c["output_minor_dim"]
    # the slow adds of the corpus (minor dim 32) and the fast ones (40)
    assert add("f32[16,8,8,32]{3,2,1,0}") == 32
    assert add("f32[16,8,8,40]") == 40                 # XLA's default layout
    assert add("f32[16,8,8,32]{0,3,2,1}") == 16        # dim 0 is minor-most
    assert add("f32[]") == 0
    # a tuple root: its largest array's
    tup = cost("""HloModule t
ENTRY e {
  x = f32[4,1024]{0,1} parameter(0)
  y = f32[7]{0} parameter(1)
  ROOT t = (f32[4,1024]{0,1}, f32[7]{0}) tuple(x, y)
}
""")
    assert tup["output_minor_dim"] == 4 and tup["output_minor_align"] == 2
    assert add("f32[8,512,48]") == 48 and alignment(48) == 4


def test_indexed_slices_counts_the_index_tuples_of_gathers_and_scatters():
    # gnn_s_train's scatter-adds: 8,192 tuples, whether each moves a scalar or a row
    def scatter(window):
        upd = "f32[8192,1]" if not window else f"f32[8192,1,{window}]"
        out = "f32[1024]" if not window else f"f32[1024,{window}]"
        dims = "update_window_dims={1}" if not window else "update_window_dims={1,2}"
        return cost(f"""HloModule s
add {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = f32[] add(a, b)
}}
fused {{
  p0 = {out} parameter(0)
  p1 = s32[8192,1] parameter(1)
  p2 = {upd} parameter(2)
  ROOT s = {out} scatter(p0, p1, p2), {dims}, inserted_window_dims={{}}, scatter_dims_to_operand_dims={{0}}, index_vector_dim=1, to_apply=add
}}
ENTRY e {{
  x = {out} parameter(0)
  i = s32[8192,1] parameter(1)
  u = {upd} parameter(2)
  ROOT f = {out} fusion(x, i, u), kind=kLoop, calls=fused
}}
""")
    scalar, rows = scatter(0), scatter(32)
    assert scalar["indexed_slices"] == rows["indexed_slices"] == 8192
    assert rows["flops"] == 32 * scalar["flops"]      # what flops said instead
    # index_vector_dim past the last dim: each index element is a tuple of one
    gather = cost("""HloModule g
ENTRY e {
  x = f32[100,16] parameter(0)
  i = s32[6,5] parameter(1)
  ROOT g = f32[6,5,16] gather(x, i), offset_dims={2}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=2, slice_sizes={1,16}
}
""")
    assert gather["indexed_slices"] == 30
    # two indices a tuple (index_vector_dim=1): 7 tuples; no gather or scatter: 0
    pairs = cost("""HloModule g
ENTRY e {
  x = f32[10,10,4] parameter(0)
  i = s32[7,2] parameter(1)
  ROOT g = f32[7,4] gather(x, i), offset_dims={1}, collapsed_slice_dims={0,1}, start_index_map={0,1}, index_vector_dim=1, slice_sizes={1,1,4}
}
""")
    assert pairs["indexed_slices"] == 7
    assert cost(FUSION)["indexed_slices"] == 0


def test_touched_bytes_follow_the_elements_a_fusion_needs():
    # ssm_m_train's scans: a parameter bitcast, then sliced to every second
    # row twice, added to another parameter: a quarter of the first is read
    scan = cost("""HloModule scan
fused {
  p0 = f32[4096,128]{1,0} parameter(0)
  b = f32[16,256,128]{2,1,0} bitcast(p0)
  s1 = f32[16,128,128]{2,1,0} slice(b), slice={[0:16], [0:256:2], [0:128]}
  s2 = f32[16,64,128]{2,1,0} slice(s1), slice={[0:16], [0:128:2], [0:128]}
  p1 = f32[16,64,128]{2,1,0} parameter(1)
  ROOT a = f32[16,64,128]{2,1,0} add(s2, p1)
}
ENTRY e {
  x = f32[4096,128]{1,0} parameter(0)
  y = f32[16,64,128]{2,1,0} parameter(1)
  ROOT f = f32[16,64,128]{2,1,0} fusion(x, y), kind=kLoop, calls=fused
}
""")
    quarter = 16 * 64 * 128 * 4
    assert scan["touched_bytes"] == 2 * quarter
    assert scan["bytes_read"] == 4096 * 128 * 4 + quarter     # XLA: all of it, behind a bitcast
    # a reduce needs all of its input for all of its output; a broadcast no
    # more than its operand; a dynamic-update-slice's buffer is updated in place
    softmax = cost("""HloModule r
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = f32[] add(a, b)
}
fused {
  p0 = f32[64,512]{1,0} parameter(0)
  z = f32[] constant(0)
  r = f32[64]{0} reduce(p0, z), dimensions={1}, to_apply=add
  p1 = f32[8]{0} parameter(1)
  bc = f32[64,8]{1,0} broadcast(p1), dimensions={1}
  br = f32[64,8]{1,0} broadcast(r), dimensions={0}
  m = f32[64,8]{1,0} multiply(bc, br)
  p2 = f32[1024,8]{1,0} parameter(2)
  i = s32[] parameter(3)
  ROOT d = f32[1024,8]{1,0} dynamic-update-slice(p2, m, i, i)
}
ENTRY e {
  x = f32[64,512]{1,0} parameter(0)
  y = f32[8]{0} parameter(1)
  buf = f32[1024,8]{1,0} parameter(2)
  i = s32[] parameter(3)
  ROOT f = f32[1024,8]{1,0} fusion(x, y, buf, i), kind=kLoop, calls=fused
}
""")
    assert softmax["touched_bytes"] == (64 * 512 + 8 + 1) * 4
    # an unfused kernel: what it reads, as bytes_read counts it
    dot = cost("""HloModule m
ENTRY e {
  a = f32[8,16]{1,0} parameter(0)
  b = f32[16,4]{1,0} parameter(1)
  ROOT d = f32[8,4]{1,0} dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
""")
    assert dot["touched_bytes"] == dot["bytes_read"] == 768


def loop_fusion(shape, body, kind="kLoop"):
    """A fusion kernel of f32[shape] (4-D, default layout) whose fused
    computation runs body on its parameters p (f32[shape]) and b (f32[C],
    C the minor dim)."""
    minor = shape.split(",")[-1]
    return cost(f"""HloModule f
fused {{
  p = f32[{shape}]{{3,2,1,0}} parameter(0)
  b = f32[{minor}]{{0}} parameter(1)
  zero = f32[] constant(0)
  z = f32[{shape}]{{3,2,1,0}} broadcast(zero), dimensions={{}}
  bb = f32[{shape}]{{3,2,1,0}} broadcast(b), dimensions={{3}}
{body}
}}

ENTRY e {{
  x = f32[{shape}]{{3,2,1,0}} parameter(0)
  y = f32[{minor}]{{0}} parameter(1)
  ROOT f = f32[{shape}]{{3,2,1,0}} fusion(x, y), kind={kind}, calls=fused
}}
""")["minor_loop_unrolled"]


def test_minor_loop_unrolled_marks_short_minor_loops_with_small_bodies():
    relu = "  ROOT m = f32[{s}]{{3,2,1,0}} maximum(p, z)"
    bias_relu = """  a = f32[{s}]{{3,2,1,0}} multiply(p, bb)
  c = f32[{s}]{{3,2,1,0}} add(a, bb)
  ROOT m = f32[{s}]{{3,2,1,0}} maximum(c, z)"""
    # measured on XLA:CPU: relu of f32[16,8,8,32] 1.1 ns an element (unrolled,
    # gathers across rows), the same with a bias 0.2, a minor dim of 64 0.13
    assert loop_fusion("16,8,8,32", relu.format(s="16,8,8,32")) == 1
    assert loop_fusion("16,8,8,32", bias_relu.format(s="16,8,8,32")) == 0
    assert loop_fusion("16,8,8,64", relu.format(s="16,8,8,64")) == 0
    # a shorter minor dim leaves room for a bigger body: 16 x (2 + 3) <= 108
    assert loop_fusion("8,16,16,16", bias_relu.format(s="8,16,16,16")) == 1
    # 8 or fewer: one vector a row, nothing to gather
    assert loop_fusion("16,16,16,8", relu.format(s="16,16,16,8")) == 0
    # only loops: an input fusion (a reduce's) is emitted otherwise
    assert loop_fusion("16,8,8,32", relu.format(s="16,8,8,32"), kind="kInput") == 0
    # an unfused elementwise op is a loop of one op
    unfused = cost("""HloModule a
ENTRY e {
  x = f32[64,16]{1,0} parameter(0)
  ROOT a = f32[64,16]{1,0} add(x, x)
}
""")
    assert unfused["minor_loop_unrolled"] == 1
    # a copy in the loop body (a relayout's loop) is not an elementwise loop
    assert loop_fusion("16,8,8,32", "  ROOT m = f32[16,8,8,32]{3,2,1,0} copy(p)") == 0
