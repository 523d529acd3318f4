"""The `heavy` source: large f32 convolutions and dots, beyond the flop cap
of the `ops` source, with the windows frameworks write.

A program spends most of its time in a few convolutions and dots. The `ops`
source keeps each under 1e8 flops so that measuring it stays cheap, draws
dilations of 1 or 2, pads smaller than the window and windows of at most 7
taps. Programs have more: a WaveNet's causal 1-D convolutions dilated up
to 512 and padded by the dilated window's span, and the filter gradients
of training, whose window is the whole input. A model that saw none of
those predicted a WaveNet's dilated convolutions 4x to 8x too slow: the
corpus's `ops` 1-D convolutions of 5 us or more run at a median 2.6
GFLOP/s on its machine, WaveNet's at 187, this source's 12,000 at 96
(README, "The examples" and "The bundled model"). Their speed depends on
the shape of the matrix multiply they amount to, which featurize's
matmul_* kernel features give the model.

This source draws as `ops` does (the same generators: random labels,
layouts, strides and windows) from larger spaces: 3e6 to 2e9 flops, 8 to
512 features, rhs dilations up to 512, pads of none, 'same' or causal
around the dilated window, and now and then a window as large as the input
(stride 1, padded to a small filter's size) or, for half of those, a
dilated convolution's filter gradient as WaveNet's training writes it: a
window of all but (taps - 1) dilations of the input, strided by the
dilation, unpadded, the layer's input channels in the batch dim and the
minibatch contracted as features (f32[48,528,8] with f32[512,8,48],
window 512 stride 16: 2 taps; bench_conv_lookalikes.py found none of
WaveNet's 26 such kernels had a look-alike in the corpus of 2026-11-28). Half the convolutions have
round channel counts (multiples of 8, 16 or 32, or powers of two), as
models do: odd counts cost XLA:CPU up to 1.5x a multiply-add
(benchmarks/bench_conv_channels.py), and the committed corpus's 12,000,
drawn log-uniformly before 2026-11-28, hold 2% with both counts a
multiple of 8. (Added to mend WaveNet's 48-channel convolutions, which
the manual split's model predicts 1.5x too slow; on one machine's
labels a model of `heavy` alone had them right with or without round
counts, and over seeds no mix of sources tried mends the recipe's:
README, "Where the error is".) Only the Eigen path's forms
(f32; 1-D or 2-D convolutions without groups or lhs dilation; dots with at
most one batch dim): XLA:CPU runs the others through a naive loop nest two
orders of magnitude slower, seconds a run at these sizes. Compiled by
XLA:CPU first, like `ops`' convolutions and dots.

Records: program "heavy:convolution" or "heavy:dot". Draws from no programs.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator, Sequence

from tpuperf_cli.errors import TpuperfError
from tpuperf_cli.generate import Failed
from tpuperf_cli.generate.ops import ConvSpace, DotSpace, _convolution, _dot, _Gen, compiled_kernels
from tpuperf_cli.records import Record

SOURCE_NAME = "heavy"
FLOPS = (3e6, 2e9)
CONVOLUTIONS = ConvSpace(
    spatial_ranks=(1, 1, 2), dtypes=("f32",), groups=(1,), batch_groups=(1,), batch=32,
    min_features=8, features=512, spatial={1: 1 << 16, 2: 1 << 16}, lhs_dilations=(1,),
    rhs_dilations=(1, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512),
    window_sizes=(1, 2, 2, 3, 3, 5, 7), whole_window_p=0.2, framework_pads=True,
    flops=FLOPS, tries=200, fall_back=False, round_p=0.5)
DOTS = DotSpace(kinds=("f32",), batch_ranks=(0, 0, 1), free=8192, contracting=16384,
                flops=FLOPS, tries=200, fall_back=False)
# two convolutions to a dot: their space (ranks, windows, dilations) is larger
DRAWS = {"convolution": (lambda g: _convolution(g, CONVOLUTIONS), 2),
         "dot": (lambda g: _dot(g, DOTS), 1)}


def generate(seed: int, programs: Sequence[str], log: Callable[[str], None]) -> Iterator[Record]:
    """Kernel records of large single convolutions and dots, forever (see
    the module docstring). programs: unused (this source draws from none)."""
    r = random.Random(f"{SOURCE_NAME}:{seed}")
    g = _Gen(r)
    names = list(DRAWS)
    weights = [DRAWS[n][1] for n in names]
    while True:
        picked = r.choices(names, weights)[0]
        try:
            opcode, text = DRAWS[picked][0](g)
        except ValueError as e:         # no shape of the space's size in its tries
            yield Failed(f"{SOURCE_NAME}:{picked}: {e}")
            continue
        try:
            yield from compiled_kernels(text, opcode, SOURCE_NAME)
        except TpuperfError as e:
            yield Failed(f"{SOURCE_NAME}:{opcode}: {e}")
