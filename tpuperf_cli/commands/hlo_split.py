"""`hlo-split`: split optimized HLO programs into kernel records."""

import os
import sys

import click

from tpuperf_cli.commands.options import CONTEXT, output_option, quiet_option, record_writer
from tpuperf_cli.errors import TpuperfError


def _read_stdin():
    from tpuperf_cli.hlo.dump import decode_hlo

    if sys.stdin.isatty():
        print("hlo-split: reading HLO text from stdin (pipe a module in, or name a file; "
              "--help for help)", file=sys.stderr)
    return decode_hlo(sys.stdin.buffer.read(), "<stdin>", check=_not_hlo)


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
    from tpuperf_cli.hlo.dump import file_program, program_name

    if source == "-":
        return module.name
    base = os.path.basename(source)
    if base.startswith("module_") and "_optimizations." in base:
        return program_name(base, module.name) or base    # as in a dump directory
    return file_program(base) or module.name


def _ops(module, ins):
    """Instructions that run inside one kernel (the fused computation's, or 1)."""
    if ins.opcode == "fusion" and ins.called:
        return len(module.computations[ins.called[0]].instructions)
    return 1


@click.command("hlo-split", context_settings=CONTEXT)
@click.argument("files", nargs=-1, type=click.Path(allow_dash=True))
@click.option("--program", "-p", metavar="NAME",
              help="Program name for the records (default: the file name without "
                   ".hlo/.txt and .zst, module_NNNN.NAME in a dump directory, or the HloModule "
                   "name when reading stdin). Only with one input.")
@click.option("--module", "module_re", metavar="REGEX",
              help="In dump directories, only the modules whose name (module_NNNN.NAME) "
                   "matches REGEX (Python re.search), e.g. --module train_step.")
@click.option("--compile", "-c", "backend", type=click.Choice(["cpu", "gpu", "tpu"]),
              help="Compile inputs that are not optimized yet (StableHLO/MHLO, HLO before "
                   "optimization) with XLA for this backend (through jax's client for it) and "
                   "split the optimized module. Optimized inputs are split as they are.")
@click.option("--summary", "-s", is_flag=True,
              help="Also print a table of the kernels (index, count, opcode, fusion kind, "
                   "ops, name) and totals to stderr.")
@output_option(help="Where to write the kernel records: a file (zstd if it ends in .zst) or - "
                    "for stdout.")
@quiet_option(help="Do not warn on stderr about unknown trip counts, conditional branches "
                   "and HLO that looks unoptimized, nor count the files skipped in dump "
                   "directories.")
def cli(files, program, module_re, backend, summary, output, quiet):
    """Split optimized XLA HLO programs into kernels, one record each.

    Reads optimized HLO as XLA prints it (`jax.jit(f).lower(*args).compile().as_text()`
    on CPU, GPU or TPU, TPU kernel dumps with tiled layouts such as
    `{3,0,2,1:T(8,128)(2,1)}`), from FILES or stdin (`-` or no FILES;
    plain or zstd-compressed), and writes one msgpack `kernel` record per
    kernel to stdout or -o FILE (never to a terminal: pipe it on, e.g. into
    featurize).

    A FILE may be a directory that XLA_FLAGS=--xla_dump_to=DIR filled:
    every module's optimized HLO (*after_optimizations.txt, or
    *after_optimizations.hlo.pb with --xla_dump_hlo_as_proto) is one
    program, named module_NNNN.NAME from the file; --module picks some. The
    other dump files (before optimization, buffer assignments, LLVM IR,
    debug options, ...) are skipped, with a count per kind on stderr.
    Serialized HLO protos (HloProto or HloModuleProto, *.pb) are read
    through jaxlib as FILES too.

    Input before optimization is refused with a message saying how to get
    the optimized module: StableHLO/MHLO text
    (`jax.jit(f).lower(*args).as_text()`) and XLA's *before_optimizations*
    dumps. With --compile BACKEND it is compiled for that backend instead,
    and the optimized module is split. HLO text that is not scheduled and
    has no fusions (XLA schedules and fuses what it compiles) gets a
    warning, or is compiled with --compile.

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
                   (module_NNNN.NAME for the files XLA dumps)
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
      XLA_FLAGS=--xla_dump_to=dump python train.py
      hlo-split --module train_step dump | featurize | predict | score
      python -c 'import jax, jax.numpy as jnp;
        print(jax.jit(jnp.sin).lower(jnp.ones(8)).as_text())' | hlo-split --compile cpu

    \b
    Exit status:
      0  success
      1  a file cannot be read
      2  the input is not valid HLO; the message is FILE:LINE:COL: what was
         expected (an empty file, or one without an ENTRY computation, is
         an error too); or it is not optimized yet (without --compile)
    """
    import gc

    from tpuperf_cli.hlo.dump import optimized_text
    from tpuperf_cli.hlo.parser import parse_module
    from tpuperf_cli.hlo.split import kernel_records

    # A program's parsed module is thousands of objects without cycles that
    # live until the end: the collector would only walk them again and again.
    gc.disable()

    pattern = _compile_regex(module_re)
    inputs = _inputs(list(files) or ["-"], pattern, quiet, backend)
    if program and len(inputs) > 1:
        raise click.UsageError(f"--program names one program: give it with one input only "
                               f"(the input has {len(inputs)} modules)")

    def warn(msg):
        if not quiet:
            print(f"hlo-split: warning: {msg}", file=sys.stderr)

    writer = record_writer(output, "featurize")
    try:
        for source, dump_name, read in inputs:
            hlo = read()
            text = optimized_text(hlo, backend, warn)
            module = parse_module(text, hlo.name)
            prog = program or dump_name or _program_name(source, module)
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


def _compile_regex(module_re):
    if module_re is None:
        return None
    import re

    try:
        return re.compile(module_re)
    except re.error as e:
        raise click.BadParameter(f"{module_re!r} is not a regular expression ({e})",
                                 param_hint="--module") from None


def _inputs(sources, pattern, quiet, backend, prog="hlo-split"):
    """expand_inputs for a tool: the summary of each dump directory on
    stderr unless quiet; input that is plainly not HLO refused (_not_hlo)."""
    from tpuperf_cli.hlo.dump import expand_inputs

    def report(msg):
        if not quiet:
            print(f"{prog}: {msg}", file=sys.stderr)

    return expand_inputs(sources, pattern, unoptimized=backend is not None, report=report,
                         stdin=_read_stdin, check=_not_hlo)


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
