"""tpuperf generate's fusions, sweeps, heavy, indexed, layers, skinny,
stems and pools sources: kernel records drawn from programs (fusion
groups XLA:CPU makes one kernel of), from the example programs rebuilt at
other sizes, large convolutions and dots, gathers and scatters of many
small slices, the convolutions of convolution layers' training steps,
dots with one small dim, the convolutions of networks' first layers, and
the kernels of pooling layers' training steps."""

import itertools
import math
import random
import re
from pathlib import Path

import pytest

from tpuperf_cli.errors import TpuperfError
from tpuperf_cli.generate import (
    driver,
    fusions,
    heavy,
    indexed,
    layers,
    ops,
    pools,
    skinny,
    source,
    stems,
    sweeps,
    variants,
)
from tpuperf_cli.hlo.compilable import compilable_module
from tpuperf_cli.hlo.compile import optimize
from tpuperf_cli.hlo.cost import kernel_cost
from tpuperf_cli.hlo.dump import read_hlo
from tpuperf_cli.hlo.parser import parse_module
from tpuperf_cli.hlo.split import find_kernels, module_fingerprint
from tpuperf_cli.records import (
    FINGERPRINT,
    HLO,
    KERNEL_FIELDS,
    ORIGIN,
    PROGRAM,
    SOURCE,
)
from tpuperf_cli.split import train_in_all

EX = Path(__file__).resolve().parent.parent / "examples"
MLP = str(EX / "hlo" / "mlp_s_train.hlo.zst")


def take(gen, n):
    return list(itertools.islice(gen, n))


def compiled_kernels(record):
    """How many kernels XLA:CPU makes of the record's module, compiled as
    measure compiles it."""
    optimized = optimize(compilable_module(record[HLO]), "cpu", mlir=False)
    return len(find_kernels(parse_module(optimized, "optimized")))


def assert_one_kernel(record):
    """The record's module parses, holds one kernel and compiles."""
    module = parse_module(record[HLO], "record")
    assert len(find_kernels(module)) == 1
    assert module_fingerprint(record[HLO]) == record[FINGERPRINT]
    assert compiled_kernels(record) >= 1


# ---------------------------------------------------------------- fusions

def test_sources_are_registered():
    assert source("fusions") is fusions.generate
    assert source("sweeps") is sweeps.generate
    assert source("heavy") is heavy.generate
    assert source("variants") is variants.generate
    assert source("indexed") is indexed.generate
    assert source("layers") is layers.generate
    assert source("skinny") is skinny.generate
    assert source("stems") is stems.generate
    assert source("pools") is pools.generate


def test_fusions_records_are_single_kernels_and_deterministic():
    log = []
    gen = fusions.generate(0, [MLP], log.append)
    first = take(gen, 4)
    gen.close()                               # as the driver does at --limit: a summary
    assert "4 kept" in log[-1] and "kernels/s" in log[-1]
    again = take(fusions.generate(0, [MLP], log.append), 4)
    other = take(fusions.generate(1, [MLP], log.append), 4)
    assert [r[HLO] for r in first] == [r[HLO] for r in again]
    assert [r[FINGERPRINT] for r in first] != [r[FINGERPRINT] for r in other]
    # the fusions XLA made of the groups (a group of one op may stay unfused)
    assert "fusion" in {r["opcode"] for r in first}
    for r in first:
        assert set(KERNEL_FIELDS) <= set(r)
        assert (r[SOURCE], r[ORIGIN], r[PROGRAM]) == ("fusions", "mlp_s_train",
                                                      "fusions:mlp_s_train")
        assert_one_kernel(r)
        assert compiled_kernels(r) == 1       # and XLA makes it one kernel again


def test_flattened_program_has_no_fusions_and_closed_operands():
    graphs = fusions.load_graphs([MLP])
    assert graphs
    for g in graphs:
        assert not any(ins.opcode in ("fusion", "call") for ins in g.nodes.values())
        for ins in g.nodes.values():
            assert all(o in g.nodes for o in ins.operands), ins.name
    # the fused ops are there, standing alone
    opcodes = {ins.opcode for g in graphs for ins in g.nodes.values()}
    assert {"exponential", "broadcast", "maximum", "reduce"} <= opcodes


def test_groups_have_one_output_and_compile():
    import random

    graphs = fusions.load_graphs([MLP])
    rng = random.Random(3)
    for size in (1, 3, 12):
        g = rng.choice(graphs)
        group = fusions.draw_group(g, rng, size)
        assert 1 <= len(group) <= size
        members = set(group)
        used = {o for n in group for o in g.nodes[n].operands}
        assert len([n for n in group if n not in used]) == 1
        assert all(g.nodes[n].opcode in fusions.FUSIBLE for n in group)
        text = fusions.group_module(g, group)
        assert parse_module(text, "group").entry.root is not None
        assert members


SPLIT_GROUP = """HloModule p

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}

ENTRY %main (x: f32[64,128], y: f32[64,128]) -> f32[64,128] {
  %x = f32[64,128] parameter(0)
  %y = f32[64,128] parameter(1)
  %zero = f32[] constant(0)
  %r = f32[64] reduce(%x, %zero), dimensions={1}, to_apply=%add
  %e = f32[64] exponential(%r)
  %bc = f32[64,128] broadcast(%e), dimensions={0}
  ROOT %m = f32[64,128] multiply(%bc, %y)
}
"""


def test_a_group_xla_splits_is_not_kept(tmp_path, monkeypatch):
    path = tmp_path / "p.hlo"
    path.write_text(SPLIT_GROUP)
    graph = fusions.load_graphs([str(path)])[0]
    whole = [n for n in graph.nodes if graph.nodes[n].opcode in fusions.FUSIBLE]
    # XLA:CPU fuses no reduce or exponential into a broadcast: the whole
    # graph is several kernels
    text = fusions.group_module(graph, whole)
    assert fusions.count_kernels(fusions.compile_cpu(text)) > 1
    # ... so the generator, made to draw it, keeps nothing
    monkeypatch.setattr(fusions, "draw_group", lambda g, rng, size: whole)
    monkeypatch.setattr(fusions, "GIVE_UP_AFTER", 3)
    log = []
    assert list(fusions.generate(0, [str(path)], log.append)) == []
    assert "0 kept" in log[-1] and "stopped" in log[-1]
    # ... and draw_group itself never grows an expensive op into a broadcast
    monkeypatch.undo()
    import random

    rng = random.Random(0)
    for _ in range(30):
        group = fusions.draw_group(graph, rng, 10)
        assert not fusions.recomputes_expensive(graph, set(group))
        assert not {"exponential", "broadcast"} <= {graph.nodes[n].opcode for n in group}


def test_fusions_needs_programs():
    with pytest.raises(TpuperfError, match="needs programs"):
        next(fusions.generate(0, [], print))


# ---------------------------------------------------------------- variants

CNN = str(EX / "hlo" / "cnn_s_train.hlo.zst")


def test_variants_are_fusions_with_other_arithmetic_and_clamps():
    """Real groups of a program, their elementwise ops changed: single
    kernels, deterministic, named variants:ORIGIN, and holding ops the
    program's own fusions never have (cnn_s has no clamp, tanh or divide
    in a fusion)."""
    program_ops = set(re.findall(r"= \S+ ([a-z-]+)\(", read_hlo(CNN).text))
    assert "clamp" not in program_ops
    log = []
    first = take(variants.generate(0, [CNN], log.append), 12)
    again = take(variants.generate(0, [CNN], log.append), 12)
    plain = take(fusions.generate(0, [CNN], log.append), 12)
    assert [r[FINGERPRINT] for r in first] == [r[FINGERPRINT] for r in again]
    assert not {r[FINGERPRINT] for r in first} & {r[FINGERPRINT] for r in plain}
    assert any(line.startswith("variants: ") for line in log)
    new_ops = set()
    for r in first:
        assert (r[SOURCE], r[ORIGIN], r[PROGRAM]) == ("variants", "cnn_s_train",
                                                      "variants:cnn_s_train")
        assert_one_kernel(r)
        new_ops |= set(re.findall(r"= \S+ ([a-z-]+)\(", r[HLO])) - program_ops
    assert "clamp" in new_ops


def _graph(text):
    """A fusions.Graph of a small module's entry."""
    module = parse_module(text, "t")
    nodes = fusions.flatten(module, module.entry)
    users = {n: [u for u, ins in nodes.items() if n in ins.operands] for n in nodes}
    return fusions.Graph("t", module, nodes, users,
                         [n for n, ins in nodes.items() if ins.opcode in fusions.FUSIBLE])


SMALL = """HloModule t

ENTRY %main (a: f32[8,16], b: f32[8,16], i: s32[8,16]) -> f32[8,16] {
  %a = f32[8,16]{1,0} parameter(0)
  %b = f32[8,16]{1,0} parameter(1)
  %i = s32[8,16]{1,0} parameter(2)
  %j = s32[8,16]{1,0} add(%i, %i)
  %m = f32[8,16]{1,0} multiply(%a, %b)
  %t = f32[8,16]{1,0} tanh(%m)
  ROOT %s = f32[8,16]{1,0} add(%t, %a)
}
"""


def test_vary_keeps_arity_and_float_types_and_clamps_in_place():
    graph = _graph(SMALL)
    seen = set()
    for seed in range(40):
        got = variants.vary(graph, ["m", "t", "s"], random.Random(seed))
        if got is None:                   # nothing drawn to change: fusions' own group
            continue
        varied, group = got
        assert varied.nodes != graph.nodes
        assert graph.nodes["m"].opcode == "multiply"      # the program's graph is untouched
        for name in group:
            ins = varied.nodes[name]
            if name in ("m", "s"):
                assert ins.opcode in variants.BINARY
            elif name == "t":
                assert ins.opcode in variants.UNARY
            seen.add(ins.opcode)
        clamps = [n for n in group if varied.nodes[n].opcode == "clamp"]
        if clamps:
            (c,) = clamps
            lo, target, hi = varied.nodes[c].operands
            assert group.index(target) < group.index(lo) < group.index(hi) < group.index(c)
            assert varied.nodes[lo].opcode == "broadcast"
            # every user of the clamped op in the group reads the clamp instead
            assert all(target not in varied.nodes[n].operands
                       for n in group if n not in (c, lo, hi))
            text = fusions.group_module(varied, group)
            assert "clamp(" in text and "constant(6)" in text
            parse_module(text, "varied")                # well-formed HLO
    assert "clamp" in seen and len(seen) > 6
    # integer ops never change, and a group with nothing to vary is skipped
    assert variants.vary(graph, ["j"], random.Random(0)) is None


# ---------------------------------------------------------------- sweeps

def test_sweep_points_are_deterministic_and_skip_example_programs():
    a = sweeps.sweep_points(["resnet_s_train", "mlp_s_train"], 0)
    assert a == sweeps.sweep_points(["resnet_s_train", "mlp_s_train"], 0)
    assert a != sweeps.sweep_points(["resnet_s_train", "mlp_s_train"], 1)
    mp = sweeps.make_programs()
    examples = {s.name for s in mp.all_specs()}
    names = {mp.sweep_spec(*p).name for p in a}
    assert not names & examples
    assert len(names) == len(a)
    # resnet_s_train in bf16 is an example program: not rebuilt
    assert ("resnet_s_train", 16, "bf16", 1) not in a
    assert ("resnet_s_train", 16, "bf16", 2) in a


def test_sweep_spec_names_like_make_spec():
    mp = sweeps.make_programs()
    assert mp.sweep_spec("resnet_s_train").name == "resnet_s_train"
    assert mp.sweep_spec("resnet_s_train", 16, "bf16").name == "resnet_s_train_bf16"
    assert mp.sweep_spec("densenet_s_train_nofuse", 32, "f32", 1.5).name == (
        "densenet_s_train_b32_k1.5_nofuse")


def test_sweep_program_names():
    assert sweeps.program_names([MLP, "mlp_s_train", "cnn_s_train", "hlo/cnn_s_train.hlo"]) == [
        "mlp_s_train", "cnn_s_train"]
    with pytest.raises(TpuperfError, match="not an example program"):
        sweeps.program_names(["nosuch_train"])


def test_sweeps_yields_kernels_of_one_swept_program():
    log = []
    records = take(sweeps.generate(0, ["mlp_s_train"], log.append), 6)
    first_point = sweeps.sweep_points(["mlp_s_train"], 0)[0]
    swept = sweeps.make_programs().sweep_spec(*first_point).name
    assert len(records) == 6
    for r in records:
        assert (r[SOURCE], r[ORIGIN], r[PROGRAM]) == ("sweeps", "mlp_s_train", f"sweeps:{swept}")
        assert set(KERNEL_FIELDS) <= set(r)
    for r in records[:3]:
        assert_one_kernel(r)
    again = take(sweeps.generate(0, ["mlp_s_train"], log.append), 6)
    assert [r[FINGERPRINT] for r in again] == [r[FINGERPRINT] for r in records]
    assert any(swept in line for line in log)


def test_train_in_all_splits(tmp_path):
    a = tmp_path / "a.json"
    b = tmp_path / "b.json"
    b.write_text('{"train": ["y", "z", "w", "ops:*", "fusions:z"], "valid": [], "test": ["x"]}')
    a.write_text('{"train": ["x", "y", "z", "ops:*", "fusions:z"], "valid": ["w"], "test": []}')
    assert train_in_all([str(a), str(b)]) == ["y", "z"]
    real = train_in_all(sorted(str(p) for p in (EX / "splits").glob("*.json")))
    assert "mlp_s_train" in real and "gpt_s_train" not in real


# ---------------------------------------------------------------- heavy

def test_heavy_records_are_large_f32_convolutions_and_dots():
    first = [r for r in take(heavy.generate(0, [], print), 8) if not isinstance(r, str)]
    again = [r for r in take(heavy.generate(0, [], print), 8) if not isinstance(r, str)]
    assert [r[FINGERPRINT] for r in first] == [r[FINGERPRINT] for r in again]
    assert len(first) >= 6
    for r in first:
        module = parse_module(r[HLO], "record")
        flops = kernel_cost(module)["flops"]
        assert (r[SOURCE], r[PROGRAM]) == ("heavy", f"heavy:{r['opcode']}")
        assert r["opcode"] in ("convolution", "dot")
        # the source's range; XLA:CPU may drop a dilation's empty taps
        assert heavy.FLOPS[0] / 4 <= flops <= heavy.FLOPS[1], (flops, r[HLO])
        assert "f16" not in r[HLO] and "f64" not in r[HLO]
    assert {r["opcode"] for r in first} == {"convolution", "dot"}
    assert_one_kernel(first[0])


def test_heavy_windows_are_dilated_like_a_frameworks():
    """Dilations beyond ops' 2, pads that frameworks write (none, same or
    causal), and filter gradients' whole windows, with no lhs dilation."""
    g = ops._Gen(random.Random(0))
    texts = [heavy.DRAWS["convolution"][0](g)[1] for _ in range(300)]
    dilations = {int(d) for t in texts for m in re.findall(r"rhs_dilate=([0-9x]+)", t)
                 for d in m.split("x")}
    assert max(dilations) >= 64
    assert not any("lhs_dilate" in t for t in texts)
    assert not any("feature_group_count" in t or "batch_group_count" in t for t in texts)
    causal = [t for t in texts if "size=2 " in t and "rhs_dilate=8}" in t and "pad=8_0" in t]
    assert causal, "a causal dilated window (WaveNet's form) is among them"


def test_heavy_draws_filter_gradients_of_dilated_convolutions():
    """A dilated 1-D convolution's filter gradient (WaveNet's: a window of
    512 taps over 528 inputs, strided by the dilation 16, 2 outputs, the
    layer's channels in the batch dim): the window spans all but (taps - 1)
    strides of the input, unpadded."""
    g = ops._Gen(random.Random(0))
    texts = [heavy.DRAWS["convolution"][0](g)[1] for _ in range(400)]
    found, channels_in_batch = 0, 0
    for t in texts:
        m = re.search(r"window=\{size=(\d+) stride=(\d+)\}, dim_labels=(\w+)_\w+->(\w+)", t)
        if not m or int(m.group(1)) <= 64 or m.group(2) == "1":    # not the strided form
            continue
        size, stride, lhs_labels, out_labels = int(m.group(1)), int(m.group(2)), m.group(3), m.group(4)
        lhs = [int(x) for x in re.search(r"%p0 = f32\[([0-9,]+)\]", t).group(1).split(",")]
        out = [int(x) for x in re.search(r"ROOT %r = f32\[([0-9,]+)\]", t).group(1).split(",")]
        width, taps = lhs[lhs_labels.index("0")], out[out_labels.index("0")]
        assert taps in (2, 3) and size == width - (taps - 1) * stride, t
        found += 1
        channels_in_batch += lhs[lhs_labels.index("b")] > 32     # heavy's batch is at most 32
    assert found >= 10 and channels_in_batch >= 2, (found, channels_in_batch)


def test_heavy_draws_round_channel_counts_half_the_time():
    """Models use round channel counts, which XLA:CPU's convolutions run
    faster: heavy draws them for about half its convolutions, where a
    log-uniform draw gives a multiple of 8 about one time in twenty."""
    g = ops._Gen(random.Random(0))
    texts = [heavy.DRAWS["convolution"][0](g)[1] for _ in range(400)]
    round_in = 0
    for t in texts:
        labels = re.search(r"dim_labels=(\w+)_", t).group(1)
        lhs = re.search(r"\(p0: f32\[([0-9,]+)\]", t).group(1).split(",")
        cin = int(lhs[labels.index("f")])
        round_in += cin % 8 == 0
    assert 0.4 <= round_in / len(texts) <= 0.65


def test_a_space_without_round_counts_draws_as_before():
    """round_p 0 (ops' space) takes no random number for it: the same
    seed gives the same channel counts with or without the field set."""
    plain, explicit = ops.ConvSpace(), ops.ConvSpace(round_p=0.0)
    a, b = ops._Gen(random.Random(3)), ops._Gen(random.Random(3))
    assert [ops._channels(a, plain) for _ in range(50)] == [ops._channels(b, explicit) for _ in range(50)]
    rounded = ops.ConvSpace(round_p=1.0, min_features=8, features=512)
    g = ops._Gen(random.Random(3))
    counts = [ops._channels(g, rounded) for _ in range(200)]
    assert all(8 <= c <= 512 and (c % 8 == 0 or c & (c - 1) == 0) for c in counts)


# ---------------------------------------------------------------- indexed

def test_indexed_records_are_gathers_and_scatters_of_many_small_slices():
    first = [r for r in take(indexed.generate(0, [], print), 10) if not isinstance(r, str)]
    again = [r for r in take(indexed.generate(0, [], print), 10) if not isinstance(r, str)]
    assert [r[FINGERPRINT] for r in first] == [r[FINGERPRINT] for r in again]
    assert len(first) == 10
    for r in first:
        assert r[SOURCE] == "indexed" and r[PROGRAM] in ("indexed:gather", "indexed:scatter")
        c = kernel_cost(parse_module(r[HLO], "record"))
        # many slices, each at most a row of ROW_WIDTH elements
        assert indexed.SLICES[0] <= c["indexed_slices"] <= indexed.SLICES[1], r[HLO]
    kinds = {r[PROGRAM] for r in first}
    assert kinds == {"indexed:gather", "indexed:scatter"}
    # XLA:CPU's own kernels: a scatter is its wrapped_scatter kLoop fusion
    assert any("wrapped_scatter" in r["kernel"] for r in first if r[PROGRAM] == "indexed:scatter")
    assert_one_kernel(first[0])


def test_indexed_draws_the_three_forms_within_the_caps():
    g = ops._Gen(random.Random(0))
    drawn = [indexed._draw(g) for _ in range(300)]
    forms = set()
    for dims, sizes, index_map, n in drawn:
        moved = math.prod(sizes)
        assert indexed.SLICES[0] <= n <= indexed.SLICES[1]
        assert n * moved <= indexed.MAX_MOVED or n == indexed.SLICES[0]
        if index_map == list(range(len(dims))) and len(dims) > 1:
            forms.add("point")          # one element of a rank-2..4 array
            assert sizes == [1] * len(dims)
        elif moved == 1:
            forms.add("one")            # one element of a [rows] or [rows, 1] table
        else:
            forms.add("row")
            assert indexed.ROW_WIDTH[0] <= moved <= indexed.ROW_WIDTH[1]
    assert forms == {"one", "row", "point"}


# ---------------------------------------------------------------- layers

def test_layers_records_are_the_convolutions_of_layers_training_steps():
    """Every record is a kernel of a compiled training step that runs a
    convolution, the same for the same seed; among a few dozen are the
    forms XLA:CPU runs through its naive loop nest, which the other
    sources lack at these sizes: 3-D convolutions, the window-reversed
    filter gradients of strided and transposed layers, grouped ones."""
    def records(seed, n):
        return take((r for r in layers.generate(seed, [], print) if not isinstance(r, str)), n)

    first, again = records(0, 40), records(0, 40)
    assert [r[FINGERPRINT] for r in first] == [r[FINGERPRINT] for r in again]
    for r in first:
        assert r[SOURCE] == "layers" and " convolution(" in r[HLO]
        kind, rank = re.fullmatch(r"layers:(\w+)-([123])d", r[PROGRAM]).groups()
        assert kind in layers.KINDS
        assert kernel_cost(parse_module(r[HLO], "record"))["flops"] > 0
    texts = [r[HLO] for r in first]
    assert any("rhs_reversal" in t for t in texts)
    assert any("b012f" in t for t in texts)              # 3-D
    assert any("feature_group_count" in t for t in texts)
    assert any("lhs_dilate" in t for t in texts)         # a strided layer's input gradient
    assert_one_kernel(next(r for r in first if "rhs_reversal" in r[HLO]))


def test_layers_draws_every_kind_and_rank_within_the_caps():
    r = random.Random(0)
    drawn = [x for x in (layers.draw_layer(r) for _ in range(3000)) if x is not None]
    assert len(drawn) >= 300
    assert {x["kind"] for x in drawn} == set(layers.KINDS)
    assert {x["rank"] for x in drawn} == {1, 2, 3}
    assert {x["dtype"] for x in drawn} == {"f32", "bf16"}
    for x in drawn:
        assert x["cin"] % x["groups"] == 0 and x["cout"] % x["groups"] == 0, x
        if x["kind"] == "depthwise":
            assert x["groups"] == x["cin"]
        assert x["stride"] == (2 if x["kind"] in ("strided", "transposed") else 1)
        assert x["batch"] * x["cin"] * math.prod(x["spatial"]) <= layers.MAX_ELEMENTS


def conv_form(out, attributes):
    """layers.kernel_form of a convolution with result f32[out] and these
    attributes (window, dim_labels, groups)."""
    module = parse_module(f"""HloModule c
ENTRY e {{
  a = f32[1] parameter(0)
  b = f32[1] parameter(1)
  ROOT c = f32[{out}] convolution(a, b), {attributes}
}}
""", "conv")
    return layers.kernel_form(module.entry.root)


def test_layers_keeps_no_kernel_too_slow_to_measure():
    """A grouped layer's filter gradient, which XLA writes with the feature
    dim lhs-dilated, runs up to 520,000 ps a flop: 1.1e7 flops of it took
    5.5 s. The same flops of an Eigen convolution take about a millisecond."""
    grouped_grad = ("window={size=10x10x128 stride=1x1x127 lhs_dilate=1x1x128}, "
                    "dim_labels=b012f_012io->b012f, feature_group_count=128")
    assert conv_form("1,3,3,128,2", grouped_grad) == "grouped, lhs-dilated"
    assert conv_form("1,3,3,128,2", grouped_grad.replace(" lhs_dilate=1x1x128", "")) == "grouped"
    # XLA's rewrite of a depthwise layer's filter gradient: the groups a dim
    # of their own, no group count left (it took 19 s)
    rewritten = ("window={size=5x5x512 stride=1x1x511 pad=1_1x1_1x0_0 lhs_dilate=1x1x512}, "
                 "dim_labels=b012f_012io->b012f")
    assert conv_form("1,3,3,512,2", rewritten) == "grouped, lhs-dilated"
    # a 2-tap stride-2 layer's input gradient is no such rewrite: it is padded
    assert conv_form("4,8,16", "window={size=2 pad=1_1 lhs_dilate=2}, dim_labels=b0f_0io->b0f") == "eigen"
    assert conv_form("4,8,8,8,16", "window={size=3x3x3}, dim_labels=b012f_012io->b012f") == "naive"
    transposed_grad = "window={size=18x18 rhs_dilate=2x2 rhs_reversal=1x1}, dim_labels=01fb_o01i->f01b"
    assert conv_form("3,5,5,24", transposed_grad) == "naive"
    assert conv_form("4,8,8,16", "window={size=3x3 lhs_dilate=2x2}, dim_labels=b01f_01io->b01f") == "eigen"
    rate = layers.SLOWEST_PS
    assert 1.1e7 * rate["grouped, lhs-dilated"] * 1e-12 > layers.MAX_SECONDS
    assert 1.1e7 * rate["eigen"] * 1e-12 < layers.MAX_SECONDS / 10
    records = [r for r in take(layers.generate(1, [], print), 40) if not isinstance(r, str)]
    assert records and not any(layers.slow_to_measure(r) for r in records)


# ---------------------------------------------------------------- stems

def test_stems_draws_first_layers_of_few_channels_within_the_caps():
    """Every rank and stem kind is drawn, 1 to 4 input channels, a patch
    embedding unpadded, no input gradient asked, and the forward pass's
    flops and arrays within the caps."""
    r = random.Random(0)
    drawn = [x for x in (stems.draw_stem(r) for _ in range(3000)) if x is not None]
    assert len(drawn) >= 300
    assert {x["rank"] for x in drawn} == {1, 2, 3}
    assert {(tuple(x["taps"]), tuple(x["stride"])) for x in drawn} == {
        (tuple(t), tuple(s)) for kinds in stems.STEMS.values() for t, s in kinds}
    for x in drawn:
        assert 1 <= x["cin"] <= 4 and x["groups"] == 1 and not x["input_gradient"]
        patch = x["taps"] == x["stride"] and x["taps"][-1] > 2
        assert x["padding"] == ("VALID" if patch else "SAME")
        assert all(s >= t for s, t in zip(x["spatial"], x["taps"]))
        assert x["batch"] * x["cin"] * math.prod(x["spatial"]) <= layers.MAX_ELEMENTS
    flops = sorted(2 * x["batch"] * x["cout"] * x["cin"] * math.prod(x["taps"])
                   * math.prod(-(-s // d) for s, d in zip(x["spatial"], x["stride"]))
                   for x in drawn)
    assert flops[0] >= stems.FLOPS[0] / 2 and flops[-1] <= stems.FLOPS[1] * 2
    assert flops[len(flops) // 2] > 1e7                  # sizes later layers' caps stop at


def test_stems_records_are_a_first_layers_forward_and_filter_gradient():
    """A stem's step compiles to its forward convolution and its filter
    gradient, with no input gradient (the input is data): two convolution
    kernels a layer, the same for the same seed, none slow to measure, and
    a 3-D one over layers' 1e7-flop reach among a few dozen."""
    def records(seed, n):
        return take((r for r in stems.generate(seed, [], print) if not isinstance(r, str)), n)

    first, again = records(0, 30), records(0, 30)
    assert [r[FINGERPRINT] for r in first] == [r[FINGERPRINT] for r in again]
    flops = []
    for r in first:
        assert r[SOURCE] == "stems" and " convolution(" in r[HLO]
        assert re.fullmatch(r"stems:first-[123]d", r[PROGRAM])
        assert not layers.slow_to_measure(r, stems.SLOWEST_PS, stems.MAX_SECONDS)
        flops.append((kernel_cost(parse_module(r[HLO], "record"))["flops"], r[HLO]))
    assert any(f > 1e7 and "b012f" in text for f, text in flops)
    # no lhs-dilated convolution: that is an input gradient of a strided layer
    assert not any("lhs_dilate" in r[HLO] for r in first)
    layer = dict(kind="first", rank=2, dtype="f32", taps=[3, 3], spatial=[16, 16], batch=2,
                 cin=3, cout=8, groups=1, stride=[2, 2], dilation=1, channels_first=False,
                 padding="SAME")
    with_input = layers.step_text(layer).count(" convolution(")
    assert layers.step_text({**layer, "input_gradient": False}).count(" convolution(") \
        == with_input - 1 == 2
    assert_one_kernel(first[0])


# ---------------------------------------------------------------- pools

def test_pools_draws_every_kind_rank_and_window_within_the_caps():
    r = random.Random(0)
    drawn = [x for x in (pools.draw_pool(r) for _ in range(3000)) if x is not None]
    assert len(drawn) >= 300
    assert {x["kind"] for x in drawn} == {"max", "avg"}
    assert {x["rank"] for x in drawn} == {1, 2, 3}
    assert {(w, s, p) for x in drawn for w, s, p in zip(x["window"], x["strides"],
                                                         [x["padding"]] * x["rank"])} \
        >= set(pools.WINDOWS) | {(1, 1, "VALID")}                  # 1x2x2: frames kept
    for x in drawn:
        elements = x["batch"] * x["channels"] * math.prod(x["spatial"])
        assert pools.MIN_ELEMENTS <= elements <= layers.MAX_ELEMENTS
        assert all(s >= w for s, w in zip(x["spatial"], x["window"]))


def test_pools_records_are_the_kernels_of_pooling_layers_training_steps():
    """Every kernel of the compiled step is kept, the same for the same
    seed: a max-pool's gradient as XLA:CPU expands it (iotas of the
    input's shape, the windows' argmax, a scatter of the output gradient)
    and an average pool's (a reduce-window over the padded, dilated output
    gradient)."""
    def records(seed, n):
        return take((r for r in pools.generate(seed, [], print) if not isinstance(r, str)), n)

    first, again = records(0, 40), records(0, 40)
    assert [r[FINGERPRINT] for r in first] == [r[FINGERPRINT] for r in again]
    for r in first:
        assert r[SOURCE] == "pools"
        assert re.fullmatch(r"pools:(max|avg)-[123]d", r[PROGRAM])
    texts = [r[HLO] for r in first]
    assert any(" reduce-window(" in t for t in texts)
    assert any(" iota(" in t for t in texts)
    scatter = next(r for r in first if " scatter(" in r[HLO])
    assert_one_kernel(scatter)
    layer = dict(kind="avg", rank=2, dtype="f32", batch=2, channels=8, spatial=[16, 16],
                 window=[2, 2], strides=[2, 2], padding="VALID", channels_first=False)
    text = pools.step_text(layer)
    assert " scatter(" not in text
    assert re.search(r"reduce-window\(.*lhs_dilate=1x2x2x1", text)
    assert " scatter(" in pools.step_text({**layer, "kind": "max"})


# ---------------------------------------------------------------- skinny

def test_skinny_draws_one_small_dim_in_every_role_and_order():
    r = random.Random(0)
    drawn = [x for x in (skinny.draw_dot(r) for _ in range(3000)) if x is not None]
    assert len(drawn) >= 500
    assert {(x["small"], x["order"]) for x in drawn} == {
        (s, o) for s in ("rows", "columns", "contraction") for o in skinny.ORDERS}
    assert {x["dtype"] for x in drawn} == {"f32", "bf16"}
    role = {"rows": "m", "columns": "n", "contraction": "k"}
    for x in drawn:
        assert 1 <= x[role[x["small"]]] <= 64
        assert all(32 <= x[d] <= 4096 for d in "mnk" if d != role[x["small"]]), x
        lo, hi = skinny.FLOPS[x["dtype"]]
        assert lo <= 2 * max(x["batch"], 1) * x["m"] * x["n"] * x["k"] <= hi


def test_skinny_dot_text_contracts_the_drawn_dims():
    """The module's operands are row-major with the contracting dim minor
    (n) or major (t), and its result is m by n, whatever the order."""
    for order in skinny.ORDERS:
        dot = dict(small="rows", order=order, dtype="f32", batch=0, m=16, n=128, k=512)
        module = parse_module(skinny.dot_text(dot), "skinny")
        root = module.entry.root
        assert root.opcode == "dot" and root.shape.dims == (16, 128)
        lhs, rhs = (p.shape for p in module.entry.parameters)
        assert lhs.dims == ((512, 16) if order[0] == "t" else (16, 512))
        assert rhs.dims == ((128, 512) if order[1] == "t" else (512, 128))
        assert lhs.minor_to_major == rhs.minor_to_major == (1, 0)
        assert kernel_cost(module)["flops"] == 2 * 16 * 128 * 512
    batched = dict(small="contraction", order="tn", dtype="bf16", batch=4, m=64, n=96, k=8)
    assert parse_module(skinny.dot_text(batched), "skinny").entry.root.shape.dims == (4, 64, 96)


def test_skinny_records_are_compiled_dots_named_by_their_small_dim():
    def records(seed, n):
        return take((r for r in skinny.generate(seed, [], print) if not isinstance(r, str)), n)

    first = records(0, 30)
    assert [r[FINGERPRINT] for r in first] == [r[FINGERPRINT] for r in records(0, 30)]
    for r in first:
        assert r[SOURCE] == "skinny" and " dot(" in r[HLO]
        assert re.fullmatch(r"skinny:(rows|columns|contraction)-[nt][nt]", r[PROGRAM])
    assert len({r[PROGRAM] for r in first}) >= 6
    assert_one_kernel(first[0])


def drawn_op(record):
    """What the ops source drew, less what XLA:CPU's optimizer made of it on
    this CPU: a convolution or dot is compiled first, and XLA:CPU keeps an
    f16 convolution in f16 on a CPU with AVX512-FP16 (an Intel Xeon family
    6 model 207) but computes it in f32 elsewhere (the corpus's AMD EPYC),
    renaming the instruction and dropping its metadata; the shapes, window
    and dimensions stay."""
    if record["opcode"] not in ops.COMPILED_FIRST:
        return record[FINGERPRINT]
    text = re.sub(r"\b[a-z]+\d*\[", "[", record["hlo"])        # element types
    text = re.sub(r"\b([A-Za-z][\w-]*)\.\d+\b", r"\1", text)     # name suffixes
    text = re.sub(r", metadata=\{[^}]*\}", "", text)
    return record["program"], text


def test_ops_source_still_draws_the_committed_corpus():
    """The ops generators take their sizes from ConvSpace and DotSpace now:
    their defaults must draw what they drew when the corpus was generated
    (the first kernels of its ops chunk, seed 0, program kernels
    excluded), on whichever CPU compiles them (drawn_op)."""
    from tpuperf_cli.stream import read_records

    corpus = EX / "corpus"
    committed = list(itertools.islice(
        read_records(str(corpus / "generated" / "ops-000.zst")), 60))
    assert {"convolution", "dot"} <= {r["opcode"] for r in committed}
    exclude = driver.excluded_fingerprints(
        str(p) for p in sorted((corpus / "kernels").glob("*.zst")))
    drawn = [drawn_op(r) for r in driver.run(["ops"], 0, [], 60, exclude, lambda m: None,
                                             driver.Summary())]
    assert drawn == [drawn_op(r) for r in committed]
