"""The `layers` source: the convolutions of one convolution layer's training
step (its forward pass and both gradients), built in JAX at random shapes
and compiled by XLA:CPU, so that the records are the kernels XLA emits for
a model's layer.

A program's time goes to its convolutions, and XLA:CPU runs them two ways:
plain f32 1-D and 2-D convolutions through Eigen (10 to 40 ps a flop on the
AMD EPYC family 25 model 17 of 2026-12-06), the rest through a naive loop
nest: 3-D convolutions (conv3d's at 57 to 520 ps a flop), the filter
gradients of transposed and strided convolutions, whose window is reversed
and dilated (dcgan's and unet's at 220 to 550), grouped and depthwise ones
(mbconv's at 2,800 to 20,000). `ops` caps those naive forms at 2e6 flops
and never reverses a window, `heavy` draws only Eigen's forms, and
`sweeps` draws them from the example programs, which a split's held-out
families take with them: the family folds' model put conv3d's and dcgan's
largest convolutions at 0.17x to 0.4x their time (README, "The bundled
model").

A layer is drawn as models write them: 1-D, 2-D or 3-D (NWC, NHWC or
NDHWC, NCHW-style at times), channel counts round mostly (3, or a multiple
of 8), a window of 1 to 7 taps (3 mostly; 1 or 3 in 3-D), and one of six
kinds: plain, strided (2), dilated (2 or 4), transposed (stride 2, as
DCGAN's and U-Net's upsampling), grouped (2 to 32 groups) or depthwise
(MobileNet's, 1 or 2 outputs a channel); f32 mostly, bf16 at times. The
forward pass is 1e6 to 2e8 flops (log-uniform; 3-D and transposed layers
at most 1e8, grouped ones 1e5 to 2e7), its arrays at most 16M elements.
A kernel that may take over MAX_SECONDS (0.1 s) a run, its flops at the
slowest rate seen for its form (SLOWEST_PS), is dropped and counted as a
failure, since measure takes 30 samples of each; that drops nearly all
filter gradients of grouped layers, which XLA writes with the groups as a
dim of their own, lhs-dilated, and which ran at up to 2.6e6 ps a flop
(19 s for 7.6e6 flops). The step returns the layer's output and the gradients of its
input and filter for a given output gradient, so XLA writes three
convolutions (the input gradient of a stride-2 layer lhs-dilated, the
filter gradients' windows as large as the input); every kernel of the
compiled step that runs a convolution is kept, fused or not.

Records: program "layers:<kind>-<rank>d", e.g. "layers:transposed-2d".
Draws from no programs; needs jax (`tpuperf generate` has it).
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Iterator, Sequence

from tpuperf_cli.errors import TpuperfError
from tpuperf_cli.generate import Failed, log_uniform
from tpuperf_cli.hlo import attrs
from tpuperf_cli.hlo.cost import kernel_cost
from tpuperf_cli.hlo.ir import Instruction
from tpuperf_cli.hlo.parser import parse_module
from tpuperf_cli.records import SOURCE, Record

SOURCE_NAME = "layers"
KINDS = ("plain", "plain", "strided", "dilated", "transposed", "grouped", "depthwise")
RANKS = (1, 2, 2, 2, 3, 3)
DTYPES = ("f32", "f32", "f32", "bf16")
CHANNELS = (3, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512)
# the forward pass's flops (log-uniform): grouped layers and the naive loop's
# forms smaller, as they run 10x to 1,000x slower a flop
FLOPS = {"grouped": (1e5, 2e7), "naive": (1e6, 1e8), "eigen": (1e6, 2e8)}
MAX_ELEMENTS = 16 * 2**20
# A kernel is kept when its flops at the slowest rate seen for its form (ps
# a flop, on the AMD EPYC family 25 model 17, 2026-12-06) take at most
# MAX_SECONDS: measure takes 30 samples of it. The filter gradient of a
# grouped layer, which XLA writes with the groups lhs-dilated, ran at up to
# 2.6e6 ps a flop (19 s for 7.6e6 flops), so this drops nearly all of them.
SLOWEST_PS = {"grouped, lhs-dilated": 1e6, "grouped": 1.5e4, "naive": 1e4, "eigen": 100}
MAX_SECONDS = 0.1
# spatial side per rank (log-uniform between): long 1-D sequences, small 3-D volumes
SIDES = {1: (16, 4096), 2: (4, 128), 3: (4, 32)}
# dimension numbers per rank (channels last, as jax models write them; or first)
LAST = {1: ("NWC", "WIO", "NWC"), 2: ("NHWC", "HWIO", "NHWC"), 3: ("NDHWC", "DHWIO", "NDHWC")}
FIRST = {1: ("NCW", "OIW", "NCW"), 2: ("NCHW", "OIHW", "NCHW"), 3: ("NCDHW", "OIDHW", "NCDHW")}


def draw_layer(r: random.Random) -> dict | None:
    """One layer's settings, or None when the draw's size is out of range
    (the caller draws again)."""
    kind, rank = r.choice(KINDS), r.choice(RANKS)
    dtype = r.choice(DTYPES)
    taps = r.choice((1, 3, 3) if rank == 3 else (1, 3, 3, 3, 5, 7))
    if kind in ("dilated", "transposed", "depthwise") and taps == 1:
        taps = 3
    lo, hi = SIDES[rank]
    side = log_uniform(r, lo, hi)
    spatial = [side] * rank
    if rank == 3 and r.random() < 0.5:
        spatial[0] = max(2, side // r.choice((2, 4)))      # fewer frames than pixels
    batch = log_uniform(r, 1, 32)
    cin, cout = r.choice(CHANNELS[1:]), r.choice(CHANNELS)
    if r.random() < 0.1:
        cin = 3                                              # an image's first layer
    groups = 1
    if kind == "grouped":
        groups = r.choice([g for g in (2, 4, 8, 16, 32) if cin % g == 0] or [1])
        cout = max(groups, cout // groups * groups)
    elif kind == "depthwise":
        groups, cout = cin, cin * r.choice((1, 1, 2))
    stride = 2 if kind in ("strided", "transposed") else 1
    dilation = r.choice((2, 4)) if kind == "dilated" else 1
    if any(s < (taps - 1) * dilation + 1 for s in spatial):
        return None
    out = [s * 2 if kind == "transposed" else -(-s // stride) for s in spatial]
    # the forward pass's multiply-adds; a transposed layer's input is the small side
    positions = math.prod(spatial if kind == "transposed" else out)
    flops = 2 * batch * positions * cout * taps ** rank * (cin // groups)
    elements = max(batch * cin * math.prod(spatial), batch * cout * math.prod(out),
                   taps ** rank * cin * cout // groups)
    lo, hi = FLOPS["grouped" if groups > 1 else "naive" if rank == 3 or kind == "transposed"
                  else "eigen"]
    if not lo <= flops <= hi or elements > MAX_ELEMENTS:
        return None
    return dict(kind=kind, rank=rank, dtype=dtype, taps=taps, spatial=spatial, batch=batch,
                cin=cin, cout=cout, groups=groups, stride=stride, dilation=dilation,
                channels_first=r.random() < 0.2, padding=r.choice(("SAME", "SAME", "VALID")))


def step_text(layer: dict) -> str:
    """The optimized HLO text XLA:CPU makes of the layer's training step:
    (output, input gradient, filter gradient) of (input, filter, output
    gradient); (output, filter gradient) when the layer says
    `input_gradient: False` (a network's first layer, whose input is data).
    `taps` and `stride` are one int for every spatial dim or a list of one
    per dim."""
    import jax
    import jax.numpy as jnp

    from tpuperf_cli.generate.fusions import FAST_COMPILE

    rank, kind = layer["rank"], layer["kind"]
    dims = (FIRST if layer["channels_first"] else LAST)[rank]
    dtype = jnp.dtype({"f32": "float32", "bf16": "bfloat16"}[layer["dtype"]])

    def shape(spec, named, spatial):
        """An array's dims in its dimension-number string's order."""
        rest = iter(spatial)
        return tuple(named[ch] if ch in named else next(rest) for ch in spec)

    x_shape = shape(dims[0], {"N": layer["batch"], "C": layer["cin"]}, layer["spatial"])
    # a filter's input channels are one group's (a transposed layer has no groups)
    taps, stride = (v if isinstance(v, list) else [v] * rank
                    for v in (layer["taps"], layer["stride"]))
    w_shape = shape(dims[1], {"I": layer["cin"] // layer["groups"], "O": layer["cout"]}, taps)

    def conv(x, w):
        if kind == "transposed":
            return jax.lax.conv_transpose(x, w, (2,) * rank, layer["padding"],
                                          dimension_numbers=dims)
        return jax.lax.conv_general_dilated(
            x, w, tuple(stride), layer["padding"],
            rhs_dilation=(layer["dilation"],) * rank, dimension_numbers=dims,
            feature_group_count=layer["groups"])

    x = jax.ShapeDtypeStruct(x_shape, dtype)
    w = jax.ShapeDtypeStruct(w_shape, dtype)
    y = jax.eval_shape(conv, x, w)

    def step(x, w, g):
        out, vjp = jax.vjp(conv, x, w)
        dx, dw = vjp(g)
        return out, dx, dw

    def first_step(x, w, g):
        out, vjp = jax.vjp(lambda w: conv(x, w), w)
        return out, vjp(g)[0]

    with jax.default_device(jax.devices("cpu")[0]):
        chosen = step if layer.get("input_gradient", True) else first_step
        lowered = jax.jit(chosen).lower(x, w, jax.ShapeDtypeStruct(y.shape, dtype))
        return lowered.compile(compiler_options=FAST_COMPILE).as_text()


def grouped_gradient(window: list[dict]) -> bool:
    """Whether a convolution's window (attrs.window's dims) is XLA's rewrite
    of a grouped layer's filter gradient: the groups made a dim of their
    own, unpadded, lhs-dilated by the group count, with a window and stride
    that take one element of each group (size=5x5x512 stride=1x1x511
    lhs_dilate=1x1x512)."""
    return any(w["lhs_dilate"] > 1 and w["size"] == w["lhs_dilate"]
               and w["stride"] == w["lhs_dilate"] - 1 and w["pad_low"] == w["pad_high"] == 0
               for w in window)


def kernel_form(conv: Instruction) -> str:
    """Which of SLOWEST_PS's forms a convolution instruction takes."""
    window = attrs.window(conv.attrs.get("window", "{}"))
    grouped = "feature_group_count" in conv.attrs or "batch_group_count" in conv.attrs
    if (grouped and any(w["lhs_dilate"] > 1 for w in window)) or grouped_gradient(window):
        return "grouped, lhs-dilated"
    if grouped:
        return "grouped"
    spatial = attrs.conv_dims(conv.attrs["dim_labels"])["input_spatial"]
    if any(w["rhs_reversal"] for w in window) or len(spatial) >= 3:
        return "naive"
    return "eigen"


def first_convolution(module) -> Instruction | None:
    """The first convolution of a kernel's module, in any computation (a
    fusion's too), or None."""
    return next((ins for comp in module.computations.values() for ins in comp.instructions
                 if ins.opcode == "convolution"), None)


def slow_to_measure(record: Record, slowest_ps: dict = SLOWEST_PS,
                    max_seconds: float = MAX_SECONDS) -> bool:
    """Whether a kernel may take over max_seconds a run: its flops at
    slowest_ps's rate (ps a flop) for the form of its convolution."""
    module = parse_module(record["hlo"], "<layers kernel>")
    form = kernel_form(first_convolution(module))
    return kernel_cost(module)["flops"] * slowest_ps[form] * 1e-12 > max_seconds


def layer_name(layer: dict) -> str:
    return f"{layer['kind']}-{layer['rank']}d"


def generate(seed: int, programs: Sequence[str], log: Callable[[str], None]) -> Iterator[Record]:
    """Kernel records of the convolutions of random layers' training steps,
    forever (see the module docstring). programs: unused (this source draws
    from none)."""
    return convolution_kernels(SOURCE_NAME, draw_layer, SLOWEST_PS, MAX_SECONDS, seed, log)


def convolution_kernels(source_name: str, draw: Callable[[random.Random], dict | None],
                        slowest_ps: dict, max_seconds: float, seed: int,
                        log: Callable[[str], None]) -> Iterator[Record]:
    """The kernels holding a convolution of the training steps (step_text)
    of layers draw(r) makes, forever, deterministically for a seed; those
    slow_to_measure at slowest_ps and max_seconds dropped and counted as
    failures. Shared by the layers and stems sources."""
    return step_kernels(source_name, draw, step_text, lambda k: " convolution(" in k["hlo"],
                        lambda k: slow_to_measure(k, slowest_ps, max_seconds),
                        f"may take over {max_seconds} s a run", seed, log)


def step_kernels(source_name: str, draw: Callable[[random.Random], dict | None],
                 text_of: Callable[[dict], str], keep: Callable[[Record], bool],
                 too_slow: Callable[[Record], bool], why_slow: str, seed: int,
                 log: Callable[[str], None]) -> Iterator[Record]:
    """The kernels `keep` takes of the compiled training steps (text_of,
    optimized HLO text) of the layers draw(r) makes, forever,
    deterministically for a seed; those `too_slow` takes dropped and
    counted as failures (why_slow says why). Program "SOURCE:NAME", NAME
    the layer's layer_name. Shared by the layers, stems and pools
    sources."""
    from tpuperf_cli.hlo.split import kernel_records

    try:
        import jax  # noqa: F401
    except ImportError as e:
        raise TpuperfError(f"--source {source_name}: needs jax ({e})") from None
    r = random.Random(f"{source_name}:{seed}")
    layers = kernels = 0
    t0 = time.monotonic()
    while True:
        layer = draw(r)
        if layer is None:
            continue
        name = layer_name(layer)
        try:
            text = text_of(layer)
        except Exception as e:  # a layer jax or XLA cannot take: count it, say why
            first = (str(e).strip().splitlines() or [type(e).__name__])[0][:160]
            yield Failed(f"{name} {layer['spatial']}: {first}")
            continue
        module = parse_module(text, f"{source_name}:{name}")
        records = [k for k in kernel_records(module, program=f"{source_name}:{name}") if keep(k)]
        kept = [k for k in records if not too_slow(k)]
        if len(kept) < len(records):
            yield Failed(f"{name}: {len(records) - len(kept)} kernel(s) {why_slow}")
            records = kept
        layers += 1
        kernels += len(records)
        if layers % 20 == 0:
            elapsed = time.monotonic() - t0
            log(f"{source_name}: {layers} layers, {kernels} kernels, "
                f"{layers / elapsed:.1f} layers/s")
        for record in records:
            record[SOURCE] = source_name
            yield record
