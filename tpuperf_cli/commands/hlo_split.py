"""`hlo-split`: split optimized HLO programs into kernel records."""

import os
import sys

import click

from tpuperf_cli.commands.options import CONTEXT, output_option, quiet_option, record_writer
from tpuperf_cli.errors import TpuperfError, read_file


def _read_text(source):
    if source == "-":
        if sys.stdin.isatty():
            print("hlo-split: reading HLO text from stdin (pipe a module in, or name a file; "
                  "--help for help)", file=sys.stderr)
        data = sys.stdin.buffer.read()
        name = "<stdin>"
    else:
        data = read_file(source)
        name = source
    if data[:4] == b"\x28\xb5\x2f\xfd":
        from tpuperf_cli.stream import zstd_decompress

        data = zstd_decompress(data, name)    # every frame; a cut one is an error
    _not_hlo(data, name)
    return data.decode("utf-8", errors="replace"), name


def _not_hlo(data, name):
    """Refuse, with a pointer to the right tool, input that is plainly not
    HLO text: a record stream (a msgpack map first), JSON, a zip."""
    head = data.lstrip()[:1]
    if data[:1] and (0x80 <= data[0] <= 0x8f or data[0] in (0xde, 0xdf)):
        why = ("a msgpack record stream, not HLO text (records go to the next tool: "
               "featurize reads kernel records, predict graph records)")
    elif head in (b"{", b"["):
        why = "JSON, not HLO text (tpuperf import tuning-json reads TPU tile-tuning JSON)"
    elif data[:4] == b"PK\x03\x04":
        why = "a zip (.npz) file, not HLO text (tpuperf import tpugraphs reads TpuGraphs .npz)"
    else:
        return
    raise TpuperfError(f"{name}: this is {why}", exit_code=2)


def _program_name(source, module):
    if source == "-":
        return module.name
    base = os.path.basename(source)
    for ext in (".zst", ".hlo", ".txt", ".pbtxt"):
        if base.endswith(ext):
            base = base[: -len(ext)]
    return base or module.name


def _ops(module, ins):
    """Instructions that run inside one kernel (the fused computation's, or 1)."""
    if ins.opcode == "fusion" and ins.called:
        return len(module.computations[ins.called[0]].instructions)
    return 1


@click.command("hlo-split", context_settings=CONTEXT)
@click.argument("files", nargs=-1, type=click.Path(dir_okay=False, allow_dash=True))
@click.option("--program", "-p", metavar="NAME",
              help="Program name for the records (default: the file name without "
                   ".hlo/.txt, or the HloModule name when reading stdin). Only with one input.")
@click.option("--summary", "-s", is_flag=True,
              help="Also print a table of the kernels (index, count, opcode, fusion kind, "
                   "ops, name) and totals to stderr.")
@output_option(help="Where to write the kernel records: a file (zstd if it ends in .zst) or - "
                    "for stdout.")
@quiet_option(help="Do not warn on stderr about unknown trip counts and conditional branches.")
def cli(files, program, summary, output, quiet):
    """Split optimized XLA HLO programs into kernels, one record each.

    Reads HLO text as XLA prints it (`jax.jit(f).lower(*args).compile().as_text()`
    on CPU, GPU or TPU, `--xla_dump_to` *after_optimizations* files, TPU
    kernel dumps with tiled layouts such as `{3,0,2,1:T(8,128)(2,1)}`),
    from FILES or stdin (`-` or no FILES; plain or zstd-compressed), and
    writes one msgpack `kernel` record per kernel to stdout or -o FILE
    (never to a terminal: pipe it on, e.g. into featurize).

    A kernel is what the compiler runs as one unit: every instruction that
    does work (a fusion or an unfused op such as dot, convolution, copy,
    sort, custom-call) in the ENTRY computation, in while bodies and
    conditions, in conditional branches and in called (call, async)
    computations. Parameters, constants, tuple, get-tuple-element, bitcast
    and the control flow ops themselves (while, conditional, call,
    async-start/-done, ...) are not kernels. Fused computations, reducers
    (to_apply) and sort comparators are part of their kernel and are not
    split further.

    \b
    Fields of each record (type "kernel"):
      program      the --program name, or the input file's stem
      kernel       the instruction's name; "COMP/NAME" outside ENTRY
      index        order in the program (0, 1, ...)
      count        times the kernel runs per program run: the product of the
                   known trip counts of the while loops around it (XLA's
                   known_trip_count in the while's backend_config; a loop
                   condition runs trip+1 times)
      count_known  false where a loop's trip count is unknown (counted as 1)
                   or the kernel sits in a conditional branch (count is
                   then an upper bound); a warning goes to stderr
      hlo          a standalone HloModule with just this kernel: its
                   computations plus an ENTRY with one parameter per
                   distinct operand, layouts kept; XLA's parser accepts
                   it, and measure compiles it (jaxlib compiles through
                   StableHLO, so measure first inlines the fusion)
      opcode       the kernel instruction's opcode ("fusion", "dot", ...)
      fusion_kind  "kLoop", "kInput", "kOutput", "kCustom", or nil
      fingerprint  hex digest of the kernel with names and metadata
                   normalised: equal for identical kernels
      computation  the computation the kernel sits in

    \b
    Examples:
      hlo-split prog.hlo | featurize | predict | score
      hlo-split --summary prog.hlo > kernels.msgpack
      python -c 'import jax, jax.numpy as jnp;
        print(jax.jit(jnp.sin).lower(jnp.ones(8)).compile().as_text())' | hlo-split -p sin
      hlo-split dumps/*after_optimizations.txt -o kernels.zst

    \b
    Exit status:
      0  success
      1  a file cannot be read
      2  the input is not valid HLO; the message is FILE:LINE:COL: what was
         expected (an empty file, or one without an ENTRY computation, is
         an error too)
    """
    import gc

    from tpuperf_cli.hlo.parser import parse_module
    from tpuperf_cli.hlo.split import kernel_records

    # A program's parsed module is thousands of objects without cycles that
    # live until the end: the collector would only walk them again and again.
    gc.disable()

    sources = list(files) or ["-"]
    if program and len(sources) > 1:
        raise click.UsageError("--program names one program: give it with one input only")

    def warn(msg):
        if not quiet:
            print(f"hlo-split: warning: {msg}", file=sys.stderr)

    writer = record_writer(output, "featurize")
    try:
        for source in sources:
            text, name = _read_text(source)
            module = parse_module(text, name)
            prog = program or _program_name(source, module)
            rows = []
            for rec in kernel_records(module, program=prog, warn=warn):
                writer.write(rec)
                if summary:
                    rows.append(rec)
            writer.flush()
            if summary:
                _print_summary(module, prog, rows)
    finally:
        try:
            writer.close()
        except BrokenPipeError:
            pass


def _print_summary(module, program, rows):
    err = sys.stderr
    print(f"{program}: {len(rows)} kernels", file=err)
    print(f"{'index':>5} {'count':>7} {'opcode':<18} {'kind':<8} {'ops':>5}  kernel", file=err)
    by_name = {}
    for comp in module.computations.values():
        for ins in comp.instructions:
            by_name[(comp.name, ins.name)] = ins
    total_runs = 0
    for r in rows:
        ins = by_name[(r["computation"], r["kernel"].rsplit("/", 1)[-1])]
        count = f"{r['count']}" + ("" if r["count_known"] else "?")
        total_runs += r["count"]
        print(f"{r['index']:>5} {count:>7} {r['opcode']:<18} {r['fusion_kind'] or '-':<8} "
              f"{_ops(module, ins):>5}  {r['kernel']}", file=err)
    unique = len({r["fingerprint"] for r in rows})
    print(f"{program}: {len(rows)} kernels ({unique} distinct), {total_runs} kernel runs "
          f"per program run", file=err)
