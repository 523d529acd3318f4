"""The `pools` source: the kernels of one pooling layer's training step
(its forward pass and its input gradient), built in JAX at random shapes
and compiled by XLA:CPU.

A max-pool's forward pass is a reduce-window, but its gradient is no
windowed op on XLA:CPU: XLA expands JAX's select-and-scatter into iotas
of the input's shape, a variadic reduce-window that finds each window's
argmax, a concatenation of the indices and a scatter of the output
gradient, each a kernel over the whole activation. An average pool's
gradient is a padded, dilated reduce-window. `ops` draws reduce-windows
and select-and-scatters one op at a time, at random windows on random
shapes under its caps, never the pattern a layer's gradient makes of
them; the example programs hold it only in their own families (conv3d's
3-D max-pools, ResNet's and U-Net's 2-D ones), which a split's held-out
families take with them.

A layer is drawn as models write them: 1-D, 2-D or 3-D (NWC, NHWC or
NDHWC, channels first at times), max (six in ten) or average; a window
of 2 at stride 2 (most), 3 at stride 2 (ResNet's stem, padded) or 3 at
stride 1 (Inception's, padded), in 3-D also 1x2x2 (frames kept); 8 to
512 channels, batches of 1 to 32, f32 mostly, bf16 at times; the input
at most 16M elements and at least 4,096. Every kernel of the compiled
step is kept (the argmax's iotas and the scatter's index concatenation
too: they are the gradient's time).

Records: program "pools:<kind>-<rank>d", e.g. "pools:max-3d". Draws
from no programs; needs jax (`tpuperf generate` has it).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterator, Sequence

from tpuperf_cli.generate import log_uniform
from tpuperf_cli.generate.layers import CHANNELS, FIRST, LAST, MAX_ELEMENTS, step_kernels
from tpuperf_cli.records import Record

SOURCE_NAME = "pools"
KINDS = ("max", "max", "max", "avg", "avg")
RANKS = (1, 2, 2, 2, 3, 3)
DTYPES = ("f32", "f32", "f32", "bf16")
# (window, stride, padding) per spatial dim, one entry per pool kind
WINDOWS = [(2, 2, "VALID"), (2, 2, "VALID"), (2, 2, "VALID"), (3, 2, "SAME"), (3, 1, "SAME")]
SIDES = {1: (64, 8192), 2: (8, 256), 3: (4, 64)}
MIN_ELEMENTS = 4096


def draw_pool(r: random.Random) -> dict | None:
    """One pooling layer's settings, or None when the draw's size is out of
    range (the caller draws again)."""
    kind, rank = r.choice(KINDS), r.choice(RANKS)
    taps, stride, padding = r.choice(WINDOWS)
    lo, hi = SIDES[rank]
    side = log_uniform(r, lo, hi)
    spatial = [side] * rank
    window, strides = [taps] * rank, [stride] * rank
    if rank == 3 and r.random() < 0.5:
        spatial[0] = max(2, side // r.choice((2, 4)))      # fewer frames than pixels
        if r.random() < 0.5:
            window[0] = strides[0] = 1                     # frames kept: 1x2x2
    if any(s < t for s, t in zip(spatial, window)):
        return None
    batch = log_uniform(r, 1, 32)
    channels = r.choice(CHANNELS[1:])
    elements = batch * channels * math.prod(spatial)
    if not MIN_ELEMENTS <= elements <= MAX_ELEMENTS:
        return None
    return dict(kind=kind, rank=rank, dtype=r.choice(DTYPES), batch=batch, channels=channels,
                spatial=spatial, window=window, strides=strides, padding=padding,
                channels_first=r.random() < 0.2)


def step_text(pool: dict) -> str:
    """The optimized HLO text XLA:CPU makes of the pooling layer's training
    step: (output, input gradient) of (input, output gradient)."""
    import jax
    import jax.numpy as jnp

    from tpuperf_cli.generate.fusions import FAST_COMPILE

    rank = pool["rank"]
    layout = (FIRST if pool["channels_first"] else LAST)[rank][0]      # e.g. "NHWC"
    dtype = jnp.dtype({"f32": "float32", "bf16": "bfloat16"}[pool["dtype"]])
    rest = iter(range(rank))
    axes = [None if ch in "NC" else next(rest) for ch in layout]    # spatial dim of each axis
    shape = tuple(pool["batch"] if ch == "N" else pool["channels"] if ch == "C"
                  else pool["spatial"][a] for ch, a in zip(layout, axes))
    window = tuple(1 if a is None else pool["window"][a] for a in axes)
    strides = tuple(1 if a is None else pool["strides"][a] for a in axes)

    # Python scalars as the initial values: JAX then takes the windowed max
    # or sum for its own differentiable primitive (an array would not be)
    def layer(x):
        if pool["kind"] == "max":
            return jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, window, strides,
                                         pool["padding"])
        total = jax.lax.reduce_window(x, 0.0, jax.lax.add, window, strides, pool["padding"])
        return total / math.prod(window)

    def step(x, g):
        out, vjp = jax.vjp(layer, x)
        return out, vjp(g)[0]

    x = jax.ShapeDtypeStruct(shape, dtype)
    y = jax.eval_shape(layer, x)
    with jax.default_device(jax.devices("cpu")[0]):
        lowered = jax.jit(step).lower(x, jax.ShapeDtypeStruct(y.shape, dtype))
        return lowered.compile(compiler_options=FAST_COMPILE).as_text()


def generate(seed: int, programs: Sequence[str], log: Callable[[str], None]) -> Iterator[Record]:
    """Kernel records of random pooling layers' training steps, forever (see
    the module docstring). programs: unused (this source draws from none)."""
    return step_kernels(SOURCE_NAME, draw_pool, step_text, lambda k: True, lambda k: False, "",
                        seed, log)
