"""`measure`: time each kernel of a record stream on a real device via XLA."""

import re
import signal
import sys
import time

import click

from tpuperf_cli.commands.options import (CONTEXT, output_option, quiet_option, record_writer,
                                         refuse_terminal)
from tpuperf_cli.errors import TpuperfError

_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0}


def parse_duration(text):
    """'5ms', '0.5s', '200us' -> seconds; a bare number is milliseconds."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(ns|us|µs|ms|s)?\s*", str(text))
    if not m:
        raise click.BadParameter(f"{text!r} is not a duration (e.g. 5ms, 0.2s, 500us)")
    value = float(m.group(1)) * _UNITS[m.group(2) or "ms"]
    if value <= 0:
        raise click.BadParameter("must be positive")
    return value


def _read_all(records):
    """(records read, the TpuperfError that stopped the reading or None)."""
    good = []
    try:
        for item in records:
            good.append(item)
    except TpuperfError as e:
        return good, e
    return good, None


class _Progress:
    """A one-line bar with rate and ETA on a terminal; else a line a minute."""

    def __init__(self, total, tty, prog):
        self.total, self.tty, self.prog = total, tty, prog
        self.done = 0
        self.start = self.last = time.monotonic()

    def step(self, label=""):
        self.done += 1
        now = time.monotonic()
        if self.tty:
            if now - self.last < 0.1 and self.done != self.total:
                return
            self.last = now
            rate = self.done / max(now - self.start, 1e-9)
            frac = self.done / self.total if self.total else 0
            bar = "#" * int(24 * frac) + "." * (24 - int(24 * frac))
            eta = (self.total - self.done) / rate if rate and self.total else 0
            line = (f"\r{self.prog}: [{bar}] {self.done}/{self.total} {rate:5.1f} kernel/s "
                    f"ETA {int(eta) // 60}:{int(eta) % 60:02d} {label[:30]:<30}")
            sys.stderr.write(line)
            sys.stderr.flush()
        elif now - self.last >= 60:
            self.last = now
            rate = self.done / max(now - self.start, 1e-9)
            print(f"{self.prog}: {self.done} kernel(s) so far, {rate:.1f}/s", file=sys.stderr,
                  flush=True)

    def close(self):
        if self.tty and self.done:
            sys.stderr.write("\n")
            sys.stderr.flush()


@click.command("measure", context_settings=CONTEXT)
@click.argument("inputs", nargs=-1, type=click.Path(dir_okay=False, allow_dash=True))
@click.option("--backend", type=click.Choice(["auto", "cpu", "gpu", "tpu"]), default="auto",
              show_default=True,
              help="XLA backend to time on; auto picks the best present (tpu, gpu, cpu).")
@click.option("--runs", type=click.IntRange(1), default=3, show_default=True,
              help="Timed runs per kernel; runtime_ns is their minimum.")
@click.option("--min-time", "min_time", default="10ms", show_default=True, metavar="DURATION",
              help="Shortest duration of one run (e.g. 2ms, 0.5s, 300us; a bare number is "
                   "milliseconds); the kernel is repeated inside a run until it passes this.")
@click.option("--cache-dir", type=click.Path(file_okay=False), default=None,
              help="Cache directory [default: $XDG_CACHE_HOME/tpuperf or ~/.cache/tpuperf].")
@click.option("--no-cache", is_flag=True, help="Neither read nor write the cache.")
@click.option("--retry-errors", is_flag=True,
              help="Measure again kernels whose cached measurement failed.")
@click.option("--progress/--no-progress", default=None,
              help="Show a progress bar on stderr [default: when stderr is a terminal].")
@click.option("--cpus", type=click.IntRange(1), default=None, metavar="N",
              help="Time on N CPUs only (the process is pinned to them, so XLA:CPU runs N "
                   "threads) [default: all]. --cpus 1 is far steadier on a busy machine.")
@click.option("--clock", type=click.Choice(["wall", "process"]), default="wall",
              show_default=True,
              help="What a run's duration is: elapsed wall time, or the CPU time of the "
                   "measuring process (CPU only; with --cpus 1 it discounts time spent "
                   "descheduled on a busy machine).")
@click.option("--timeout", type=click.FloatRange(min=1), default=300, show_default=True,
              metavar="SECONDS",
              help="Give up on a kernel (error kind timeout) after this long.")
@output_option(help="Where to write the measured records: a file (zstd if it ends in .zst) or "
                    "- for stdout.")
@quiet_option(help="No summary on stderr.")
def cli(inputs, backend, runs, min_time, cache_dir, no_cache, retry_errors, progress, cpus,
        clock, timeout, output, quiet):
    """Time kernels on a real device through XLA and add their runtimes.

    Reads kernel records (hlo-split) or graph records (featurize) from the
    files given, plain or zstd, or from stdin, and writes the same records to
    stdout or -o FILE (never to a terminal) with three fields added:

    \b
      runtime_ns  the kernel's runtime in nanoseconds: the minimum over
                  --runs runs (3, as in the paper)
      runs        the runtime of each run, in ns
      target      where it ran: platform (cpu/gpu/tpu), device_kind, chip
                  (the CPU model or the accelerator), jax and jaxlib
                  versions, platform_version; on CPU cpu_count (the CPUs
                  the process could use); clock when not "wall"

    A kernel that cannot be timed gets `error` (a reason, prefixed by its
    kind: collective, parse, convert, compile, unsupported, inputs, run,
    crash, timeout) instead of runtime_ns, and the stream goes on. All other fields pass through
    untouched.

    How a kernel is timed: its standalone HloModule (the record's `hlo`) is
    parsed, converted to StableHLO and compiled with XLA by jaxlib's PJRT
    client for one device of --backend; the code path is the same for every
    backend. The text is already optimized, so this runs XLA's pipeline on it
    a second time; for a one-kernel module that changes little (there is
    nothing left to fuse with), but the backend may still rewrite it. Inputs
    of the parameters' shapes and dtypes are put on the device once:
    floating-point values uniform in [0.5, 1.5) (finite under log, sqrt,
    divide; no denormals), integers all zero (a valid index into any
    dimension, so every gather, scatter and dynamic-slice stays in bounds),
    booleans random. After one warm-up call, untimed calibration calls find
    how many calls pass --min-time; each of the --runs runs then repeats the
    kernel that many times (waiting for each call to finish) and divides. Each call waits for the execution's completion token (outputs
    are not wrapped as Python arrays). Per-call dispatch overhead (about
    4.4 us on this project's CPU machine: the runtime of a one-op kernel)
    is part of every runtime, so kernels near that floor are told apart
    poorly on CPU.

    On a shared CPU machine, `--cpus 1 --clock process` is the steady
    setting: the measuring process is pinned to one CPU (XLA then runs one
    thread) and a run's duration is the CPU time the process got, so time
    spent waiting for the CPU does not count. On this project's 2-core
    machine, busy with other jobs (load 3 to 7), the spread (max-min)/median
    of 5 repeated min-of-3 measurements of one kernel had a median of 4-6%
    and a 90th percentile of 14-19% this way, against 7-76% and 45-180%
    with the wall clock on both CPUs (benchmarks/bench_measure_noise.py). A
    target with another clock or CPU count is another cache key.

    Collectives, infeed/outfeed and send/recv cannot run alone and fail with
    kind "collective"; custom calls the runtime lacks fail to compile.

    Compilation and timing happen in a child process: XLA aborts the process
    on some internal errors (a failed CHECK), and a kernel may never finish;
    such a kernel gets error kind "crash" or "timeout" (--timeout) and a new
    child takes over. Before compiling, fusions in the ENTRY are inlined (a
    module whose ENTRY only calls one fusion becomes the fused computation;
    XLA then re-fuses the ops) and bitcasts become reshapes: the StableHLO
    importer drops the layouts inside fusions, which XLA:CPU aborts on, and
    mishandles bitcasts. StableHLO has no layouts: the ENTRY parameter
    layouts are passed on as the executable's argument layouts; layouts
    inside the kernel (and TPU tiling such as T(8,128)) are chosen again by
    the compiler.

    The cache: each measurement (or failure, but for a timeout, which
    depends on the load and --timeout) is stored under the kernel's
    fingerprint (a hash of its text when the record has none) and the
    target, in an sqlite3 file in --cache-dir, committed one by one. A
    second run of the same pipeline times nothing again, an interrupted run
    resumes, and a fingerprint seen twice in one stream is timed once. A
    cached value is reused whatever --runs and --min-time are now; use
    --no-cache (or another --cache-dir) to measure afresh. Ctrl-C keeps
    every finished measurement in the cache and leaves stdout a valid
    stream up to the last whole record.

    On stderr: a progress bar with rate and ETA when stderr is a terminal
    (the input is then read whole first, to know the total), otherwise a
    line a minute; at the end, how many kernels were measured and failed,
    failures grouped by reason.

    \b
    Examples:
      hlo-split prog.hlo | featurize | measure --backend cpu > prog.msgpack
      hlo-split prog.hlo | featurize | measure --min-time 2ms -o prog.zst
      measure --backend tpu --runs 5 kernels.zst > timed.msgpack
      measure --no-cache --runs 10 --min-time 50ms kernels.msgpack
      measure --cpus 1 --clock process --min-time 3ms kernels.zst > timed.msgpack

    \b
    On a TPU host (none is reachable from the project's own machines):
      pip install -e '.[tpu]'           # in a tpuperf checkout: jax[tpu]==0.6.2, libtpu
      hlo-split prog.hlo | measure --backend tpu > timed.msgpack

    Exit status: 0 when the stream was read whole (even if some kernels
    failed to run: see their error fields), 1 for a bad or truncated input
    stream, a record without hlo text or a backend that is not present,
    130 when interrupted.
    """
    from tpuperf_cli.measure import MeasureSession
    from tpuperf_cli.measure.cache import Cache
    from tpuperf_cli.measure.runner import IsolatedMeasurer, MeasureError
    from tpuperf_cli.stream import read_records

    prog = click.get_current_context().info_name or "measure"
    refuse_terminal(output, "predict")
    seconds = parse_duration(min_time)
    try:
        measurer = IsolatedMeasurer(backend, runs=runs, min_time=seconds, timeout=timeout,
                                    cpus=cpus, clock=clock)
    except MeasureError as e:
        raise TpuperfError(e.message) from None
    cache = None if no_cache else Cache(cache_dir)
    session = MeasureSession(measurer, cache, retry_errors=retry_errors)
    tty = sys.stderr.isatty()
    show = tty if progress is None else progress

    def numbered():
        for source in inputs or ["-"]:
            for number, record in enumerate(read_records(source), 1):
                yield source, number, record

    records = numbered()
    total = None
    bad_input = None
    if show:
        # the bar needs a total: read the input first, but keep (and measure)
        # the records before a corrupt or truncated one
        records, bad_input = _read_all(records)
        total = len(records)
    bar = _Progress(total, show and total is not None, prog)
    try:
        writer = record_writer(output, "predict")
    except TpuperfError:
        measurer.close()
        raise
    to_stdout = output == "-"
    try:
        for source, number, record in records:
            name = "<stdin>" if source == "-" else source
            session.update(record, number, name)
            # a record is written whole or not at all, even under Ctrl-C
            old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
            try:
                writer.write(record)
                if to_stdout:       # the reader downstream sees each record at once
                    writer.flush()
            finally:
                signal.pthread_sigmask(signal.SIG_SETMASK, old)
            bar.step(str(record.get("kernel", "")))
        if bad_input is not None:
            raise bad_input
    finally:
        bar.close()
        measurer.close()
        try:
            writer.close()
        except BrokenPipeError:
            pass
        if cache is not None:
            cache.close()
        if not quiet and session.total:
            for line in session.summary(prog):
                print(line, file=sys.stderr)
