"""`tpuperf generate`: write kernel records to measure, from generators."""

import sys
import textwrap
import time

import click

from tpuperf_cli.commands.options import CONTEXT, output_option, quiet_option, record_writer
from tpuperf_cli.generate import SOURCES
from tpuperf_cli.generate.ops import NOT_GENERATED


def _not_generated():
    lines = []
    for why, ops in NOT_GENERATED.items():
        lines.append(f"  {why}:")
        lines += textwrap.wrap(ops, 72, initial_indent="    ", subsequent_indent="    ",
                               break_on_hyphens=False)
    return "\n".join(lines)


HELP = """Write kernel records to measure, made by generators.

Writes kernel records (hlo-split's fields, each `hlo` a standalone module
XLA compiles alone) to stdout or -o FILE (zstd if it ends in .zst; never to
a terminal), so that `tpuperf generate ... | featurize | measure` works
as hlo-split's output does. Each record also has `source` (the generator)
and, for kernels drawn from a program, `origin` (that program's name).

\b
Sources (--source, repeatable; several are taken in turn, one
candidate each):
  ops      single-op modules of every opcode of featurize's opcode table
           that XLA:CPU runs, at random valid shapes, dtypes (f32, bf16,
           f16, f64, s8..s64, u8..u64, pred, c64, ...), layouts (other
           minor-to-major orders too) and attributes: convolutions in 1, 2
           and 3 spatial dims with strides, lhs/rhs dilation, padding,
           feature and batch groups; dot with batch dims and s8->s32,
           bf16->f32; fft of every type; sort of 1 to 3 operands, topk and
           the TopK custom call; gather, scatter; reduce (add, max, min,
           multiply, and/or, argmax of (value, index)), reduce-window,
           select-and-scatter; pad (negative, interior), slice, concatenate,
           dynamic-(update-)slice, rng, rng-bit-generator, cholesky,
           triangular-solve, batch norm, while loops and conditionals (the
           kernels of their bodies and branches), elementwise ops, now and
           then as a one-op kLoop fusion. Sizes are log-uniform, capped at
           2e8 flops and 64 MB per kernel, for runtimes of about 1 us to a
           few ms on a CPU. It draws from no programs and never ends.
  fusions  from PROGRAMS (optimized HLO files, plain or zstd), their
           fusions undone: random connected producer-consumer groups of
           fusible ops, one op to dozens, kept when XLA:CPU compiles the
           group into exactly one kernel. Records: program fusions:...,
           origin the program.
  variants fusions' groups of PROGRAMS with their arithmetic changed:
           each float elementwise op, half the time, becomes another of
           its arity (add, subtract, multiply, divide, maximum, minimum;
           exp, log, tanh, logistic, sqrt, rsqrt, negate, abs, ...), and
           half the groups clamp one op's result between broadcast 0 and 6
           (relu6), so ops the programs lack reach fused kernels. Kept as
           fusions' are. Records: program variants:..., origin the program.
  sweeps   the example programs named in PROGRAMS (resnet_s_train, or its
           file examples/hlo/resnet_s_train.hlo.zst) rebuilt in JAX at other
           batches, sizes, sequence lengths and dtypes, compiled by XLA:CPU
           and split; needs a checkout (examples/make_programs.py). Ends
           when every point of the grid is built. Records: program
           sweeps:..., origin the example program.
  heavy    large f32 convolutions (1-D and 2-D) and dots, 3e6 to 2e9
           flops, beyond ops' cap: up to 512 features (round counts, as
           models', for half the convolutions), windows dilated up to 512
           with the pads frameworks write (none, same, causal), and filter
           gradients' whole-input windows (half of them a dilated
           convolution's: strided by the dilation, the layer's channels
           in the batch dim, as WaveNet's); compiled by XLA:CPU first,
           as ops' are. Draws from no programs and never ends. Records:
           program heavy:convolution or heavy:dot.
  indexed  gathers and scatters of many small slices, as GNN message
           passing, embeddings, MoE routing and max-pool gradients write
           them: 256 to 2^20 index tuples (ops draws few), each one element
           or a row of 2 to 256 of a table of 16 to 2^16 rows, or one
           element of a rank-2 to rank-4 array; scatters combine with add,
           maximum or assign; compiled by XLA:CPU first. Draws from no
           programs and never ends. Records: program indexed:gather or
           indexed:scatter.
  layers   the convolutions of one convolution layer's training step
           (forward, input gradient, filter gradient), built in JAX at
           random shapes and compiled by XLA:CPU: 1-D, 2-D and 3-D,
           plain, strided, dilated, transposed, grouped or depthwise,
           f32 or bf16, 1e5 to 2e8 forward flops; a kernel that may take
           over 0.1 s a run is dropped (counted as failed). It holds the
           forms XLA:CPU runs through its naive loop nest (3-D,
           window-reversed filter gradients, groups), which ops caps at
           2e6 flops and heavy never draws; needs jax. Draws from no
           programs and never ends.
           Records: program layers:KIND-RANKd (layers:transposed-2d).
  skinny   dots with one small dim (1 to 64: an RNN step's minibatch
           rows, a weight gradient's contraction), the others 32 to
           4,096, in the four operand orders (each operand as the
           product reads it or transposed), a batch dim at times, f32 or
           bf16, 1e5 to 2e8 flops; compiled by XLA:CPU first. XLA:CPU's
           speed for these moves by 7x with the small dim and the order,
           and heavy draws few. Draws from no programs and never ends.
           Records: program skinny:SMALL-ORDER (skinny:rows-nt).
  stems    the convolutions of a network's first layer in a training
           step (forward and filter gradient: its input is data), built
           in JAX and compiled by XLA:CPU: 1 to 4 input channels at the
           data's size, as image (2-D: 3x3 to 7x7 windows, patch
           embeddings), video and volume (3-D: 3x3x3, 3x7x7, 5x5x5,
           tubelets) and audio (1-D) models write them, f32 or bf16,
           1e6 to 1e9 forward flops; a kernel that may take over 0.5 s a
           run is dropped (counted as failed). The few-channel
           contraction runs slower a flop than later layers' and layers
           draws it small; needs jax. Draws from no programs and never
           ends. Records: program stems:first-RANKd (stems:first-3d).
  pools    every kernel of one pooling layer's training step (forward
           and input gradient), built in JAX and compiled by XLA:CPU:
           1-D, 2-D and 3-D, max or average, windows of 2 (stride 2), 3
           (stride 2 or 1, padded) or 1x2x2, 8 to 512 channels, inputs
           of 4,096 to 16M elements. A max-pool's gradient is iotas, a
           windowed argmax and a scatter on XLA:CPU, which ops never
           draws together; needs jax. Draws from no programs and never
           ends. Records: program pools:KIND-RANKd (pools:max-3d).

A source whose module this build lacks is refused with "source NAME is
not available in this build".

\b
Opcodes of the table the ops source does not write, and why:
{not_generated}

Kernels are unique by fingerprint: a repeat of one already written, or
one whose fingerprint is in a stream given with --exclude (plain or
zstd), is skipped. The output is the same for the same --seed, sources
and PROGRAMS on a machine with as many CPUs: XLA:CPU, which compiles the
candidates of fusions and variants, splits kernels by the CPUs the process
may use, so a run pinned to one CPU keeps other kernels than one on two.
The run stops after --limit kernels, when every source has ended, or when
20000 candidates in a row gave nothing new.

On stderr (unless -q): progress (a line updated in place on a terminal,
else one a minute), then a summary: kernels per source and per opcode,
duplicates and excluded kernels skipped, candidates that failed (with the
first reasons).

\b
Examples:
  tpuperf generate --source ops --limit 500 -o ops.zst
  tpuperf generate --source ops --limit 50 | featurize | measure --backend cpu -o ops.msgpack
  tpuperf generate --source ops --seed 7 --exclude 'shards/*.zst' -o more.zst
  tpuperf generate --source fusions examples/hlo/*.hlo.zst --limit 2000 -o fusions.zst
  tpuperf generate --source variants examples/hlo/cnn_s_train.hlo.zst --limit 200 -o variants.zst

\b
Exit status:
  0  success
  1  a file cannot be read (a program, an --exclude stream)
  2  bad usage: an unknown source, programs for sources that read none
"""


class _Progress:
    """Kernels written so far: in place on a terminal, else a line a minute."""

    def __init__(self, tty, prog):
        self.tty, self.prog = tty, prog
        self.start = self.last = time.monotonic()
        self.shown = False

    def update(self, summary, force=False):
        now = time.monotonic()
        if not force and now - self.last < (0.2 if self.tty else 60):
            return
        self.last = now
        rate = summary.written / max(now - self.start, 1e-9)
        line = (f"{self.prog}: {summary.written} kernels, {rate:.1f}/s, "
                f"{summary.duplicates} duplicates, {summary.failures} failed")
        if self.tty:
            sys.stderr.write("\r" + line)
            self.shown = True
        else:
            sys.stderr.write(line + "\n")
        sys.stderr.flush()

    def close(self):
        if self.shown:
            sys.stderr.write("\n")
            sys.stderr.flush()


@click.command("generate", context_settings=CONTEXT,
               help=HELP.format(not_generated=_not_generated()))
@click.argument("programs", nargs=-1, type=click.Path(dir_okay=False))
@click.option("--source", "sources", multiple=True, required=True,
              type=click.Choice(list(SOURCES)),
              help="A generator to draw kernels from (repeatable: taken in turn).")
@click.option("--seed", type=int, default=0, show_default=True,
              help="Random seed: the same seed gives the same kernels.")
@click.option("--limit", "-n", type=click.IntRange(0), default=1000, show_default=True,
              metavar="N", help="Stop after N kernels (0: only when the sources end; "
                                "ops never does).")
@click.option("--exclude", "exclude", multiple=True, metavar="FILES",
              help="Skip kernels whose fingerprint is in these record streams (shards, "
                   "measured or not; plain or zstd). Repeatable; a glob in quotes is "
                   "expanded.")
@output_option(help="Where to write the kernel records: a file (zstd if it ends in .zst) or - "
                    "for stdout.")
@quiet_option(help="No progress or summary on stderr (errors always go there).")
def cli(programs, sources, seed, limit, exclude, output, quiet):
    import glob

    from tpuperf_cli.errors import TpuperfError
    from tpuperf_cli.generate.driver import Summary, check_programs, excluded_fingerprints, load_sources, run

    prog = "tpuperf generate"
    names = list(dict.fromkeys(sources))
    load_sources(names)                  # refuse a missing source before any work
    check_programs(names, programs)
    paths = []
    for pattern in exclude:
        found = sorted(glob.glob(pattern)) if glob.has_magic(pattern) else [pattern]
        if not found:
            raise TpuperfError(f"--exclude {pattern}: no file matches")
        paths += found
    skip = excluded_fingerprints(paths)

    def log(message):
        if not quiet:
            print(f"{prog}: {message}", file=sys.stderr)

    summary = Summary()
    progress = None if quiet else _Progress(sys.stderr.isatty(), prog)
    writer = record_writer(output, "featurize")
    to_stdout = output == "-"
    try:
        for record in run(names, seed, programs, limit or None, skip, log, summary):
            writer.write(record)
            if to_stdout:            # the reader downstream sees each record at once
                writer.flush()
            if progress:
                progress.update(summary)
    finally:
        try:
            writer.close()
        except BrokenPipeError:
            pass
        if progress:
            progress.close()
        if not quiet:
            for line in summary.lines(prog):
                print(line, file=sys.stderr)
