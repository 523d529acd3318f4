"""The `stems` source: the convolutions of a network's first layer (its
stem) in a training step, built in JAX at random shapes and compiled by
XLA:CPU: the forward pass and the filter gradient (the input is data, so
there is no input gradient).

A first layer reads the data itself: 1 to 4 channels (grey, RGB, RGBA; a
mono or stereo waveform) at the data's full size, so its convolution
contracts a few channels over many positions, a form later layers never
take and that runs several times slower a flop through XLA:CPU's naive
loop. The `layers` source draws 3 input channels for one layer in ten, at
its caps of 1e6 to 1e8 flops (1e7 for the naive loop's forms), so the
corpus held few stems and none at the sizes models feed them.

A stem is drawn as vision, video, volume and audio models write theirs:
- 2-D (half): 1, 3 or 4 channels, 28 to 256 pixels a side, a window of 3
  (stride 1 or 2), 5 (stride 1 or 2), 4 (stride 2, DCGAN's), 7 (stride 2,
  ResNet's), or a patch embedding (window = stride = 4, 8 or 16: ConvNeXt's
  and ViT's, VALID padding); 16 to 128 outputs, 192 to 768 for patches;
- 3-D (a third): 1 or 3 channels, 4 to 32 frames of 16 to 128 pixels (a
  volume cubic at times), a window of 3x3x3 (stride 1 or 2), 3x7x7 (stride
  1x2x2, I3D's), 5x5x5 or a 2x16x16 tubelet (video ViT's); 16 to 96
  outputs;
- 1-D (the rest): 1 or 2 channels, 1,024 to 65,536 samples, a window of 3
  (stride 1), 10 (stride 5, wav2vec's), 16 (stride 8) or 80 (stride 4);
  32 to 512 outputs.
Batches of 1 to 64 (log-uniform), f32 mostly, bf16 at times, channels
last mostly. The forward pass is 1e6 to 1e9 flops, its arrays at most 16M
elements; a kernel that may take over MAX_SECONDS a run at the
slowest rate seen for its form (SLOWEST_PS) is dropped and counted as a
failure (0.5 s here, as stems are drawn to reach the sizes models feed
them, against layers' 0.1 s).

Records: program "stems:first-<rank>d", e.g. "stems:first-3d". Draws from
no programs; needs jax (`tpuperf generate` has it).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterator, Sequence

from tpuperf_cli.generate import layers, log_uniform
from tpuperf_cli.generate.layers import MAX_ELEMENTS, convolution_kernels
from tpuperf_cli.records import Record

SOURCE_NAME = "stems"
FLOPS = (1e6, 1e9)
# (window, stride) per rank, one entry per stem kind; patch embeddings
# (window == stride) unpadded
STEMS = {
    1: [([3], [1]), ([10], [5]), ([16], [8]), ([80], [4])],
    2: [([3, 3], [1, 1]), ([3, 3], [2, 2]), ([5, 5], [1, 1]), ([5, 5], [2, 2]), ([4, 4], [2, 2]),
        ([7, 7], [2, 2]), ([4, 4], [4, 4]), ([8, 8], [8, 8]), ([16, 16], [16, 16])],
    3: [([3, 3, 3], [1, 1, 1]), ([3, 3, 3], [2, 2, 2]), ([3, 7, 7], [1, 2, 2]),
        ([5, 5, 5], [1, 1, 1]), ([2, 16, 16], [2, 16, 16])],
}
RANKS = (1, 2, 2, 2, 3, 3)
DTYPES = ("f32", "f32", "f32", "bf16")
CHANNELS = {1: (1, 1, 2), 2: (1, 3, 3, 3, 4), 3: (1, 3, 3)}
OUTPUTS = {1: (32, 64, 128, 256, 512), 2: (16, 32, 64, 64, 96, 128), 3: (16, 32, 64, 96)}
PATCH_OUTPUTS = (192, 384, 768)
# A kernel is kept when its flops at the slowest rate seen for its form (ps
# a flop; layers.kernel_form's forms) take at most MAX_SECONDS. 80 stems
# measured unguarded on an AMD EPYC family 26 model 2 (2026-12-07): the 3-D
# ones (the naive loop) 30 to 490 ps a flop, the 1-D and 2-D ones (Eigen)
# 4 to 40. A stem has no groups, so layers' grouped rates never apply.
SLOWEST_PS = {**layers.SLOWEST_PS, "naive": 600, "eigen": 100}
# half a second a run (15 s for measure's 30 samples): the 3-D stems of
# video models reach 1e9 flops at 0.4 s
MAX_SECONDS = 0.5


def draw_stem(r: random.Random) -> dict | None:
    """One first layer's settings, in layers.step_text's terms, or None when
    the draw's size is out of range (the caller draws again)."""
    rank = r.choice(RANKS)
    taps, stride = r.choice(STEMS[rank])
    patch = taps == stride and taps[-1] > 2
    if rank == 1:
        spatial = [log_uniform(r, 1024, 65536)]
    elif rank == 2:
        side = log_uniform(r, 28, 256)
        spatial = [side, side]
    else:
        side = log_uniform(r, 16, 128)
        frames = side if r.random() < 0.25 else log_uniform(r, 4, 32)
        spatial = [frames, side, side]
    if any(s < t for s, t in zip(spatial, taps)):
        return None
    cin = r.choice(CHANNELS[rank])
    cout = r.choice(PATCH_OUTPUTS if patch and rank == 2 else OUTPUTS[rank])
    batch = log_uniform(r, 1, 64)
    padding = "VALID" if patch else "SAME"
    out = [(s - t) // d + 1 if patch else -(-s // d) for s, t, d in zip(spatial, taps, stride)]
    flops = 2 * batch * math.prod(out) * cout * math.prod(taps) * cin
    elements = max(batch * cin * math.prod(spatial), batch * cout * math.prod(out))
    if not FLOPS[0] <= flops <= FLOPS[1] or elements > MAX_ELEMENTS:
        return None
    return dict(kind="first", rank=rank, dtype=r.choice(DTYPES), taps=taps, spatial=spatial,
                batch=batch, cin=cin, cout=cout, groups=1, stride=stride, dilation=1,
                channels_first=r.random() < 0.2, padding=padding, input_gradient=False)


def generate(seed: int, programs: Sequence[str], log: Callable[[str], None]) -> Iterator[Record]:
    """Kernel records of the convolutions of random first layers' training
    steps, forever (see the module docstring). programs: unused (this
    source draws from none)."""
    return convolution_kernels(SOURCE_NAME, draw_stem, SLOWEST_PS, MAX_SECONDS, seed, log)
