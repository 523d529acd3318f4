"""`measure`: time each kernel of a record stream on a real device via XLA."""

import re
import signal
import sys
import time

import click

from tpuperf_cli.commands.options import CONTEXT, output_option, quiet_option, record_writer, refuse_terminal
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


def _cpus(ctx, param, value):
    if value is None:           # the default: one CPU, or all on a GPU or TPU (cli)
        return "default"
    if str(value).lower() == "all":
        return None
    try:
        n = int(value)
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a number of CPUs or 'all'") from None
    if n < 1:
        raise click.BadParameter("must be at least 1 (or 'all')")
    return n


@click.command("measure", context_settings=CONTEXT)
@click.argument("inputs", nargs=-1, type=click.Path(dir_okay=False, allow_dash=True))
@click.option("--backend", type=click.Choice(["auto", "cpu", "gpu", "tpu"]), default="auto",
              show_default=True,
              help="XLA backend to time on; auto picks the best present (tpu, gpu, cpu).")
@click.option("--samples", "--runs", "samples", type=click.IntRange(1), default=30,
              show_default=True,
              help="Timed samples per kernel; runtime_ns is the fastest (with --clock events, "
                   "their lower quartile). --runs is the old name.")
@click.option("--min-time", "min_time", default="0.5ms", show_default=True, metavar="DURATION",
              help="Shortest duration of one sample (e.g. 1ms, 0.5s, 300us; a bare number is "
                   "milliseconds): the kernel runs in a loop on the device until it passes this.")
@click.option("--batch", type=click.IntRange(1), default=128, show_default=True, metavar="N",
              help="Kernels timed together, their samples interleaved in rounds: the larger, "
                   "the more each kernel's samples spread in time.")
@click.option("--cache-dir", type=click.Path(file_okay=False), default=None,
              help="Cache directory [default: $XDG_CACHE_HOME/tpuperf or ~/.cache/tpuperf].")
@click.option("--no-cache", is_flag=True, help="Neither read nor write the cache.")
@click.option("--retry-errors", is_flag=True,
              help="Measure again kernels whose cached measurement failed.")
@click.option("--progress/--no-progress", default=None,
              help="Show a progress bar on stderr [default: when stderr is a terminal].")
@click.option("--cpus", default=None, metavar="N|all", callback=_cpus,
              help="Time on N CPUs only: the measuring process is pinned to them, and with "
                   "one XLA:CPU runs dots and convolutions on the calling thread. 'all' "
                   "leaves the process on every CPU it may use. [default: 1; all with "
                   "--backend gpu or tpu, whose clock is the device's and whose compiles "
                   "use several threads]")
@click.option("--clock", type=click.Choice(["auto", "wall", "process", "events"]), default="auto",
              show_default=True,
              help="What a sample's duration is: the CPU time of the measuring process "
                   "(process: CPU only; time spent descheduled on a busy machine does not "
                   "count), elapsed time (wall), or the device's own time for one call of the "
                   "kernel compiled alone, read off the profiler's events (events: CUPTI on a "
                   "GPU; no timing loop, whose trip test XLA:GPU reads back to the host every "
                   "trip). auto: events on GPU and TPU, process on CPU with --cpus 1, wall "
                   "elsewhere.")
@click.option("--timeout", type=click.FloatRange(min=1), default=300, show_default=True,
              metavar="SECONDS",
              help="Give up on a kernel (error kind timeout) after this long.")
@click.option("--jobs", "-j", type=click.IntRange(1), default=None, metavar="N",
              help="Time on N worker processes at once, each pinned to its own CPUs (--cpus "
                   "of them); chunks of --batch kernels go to whichever is free, and the "
                   "output stays in input order. With --ray: N Ray workers. [default: 1; "
                   "with --ray, one per CPU (or accelerator) of the cluster]")
@click.option("--compile-jobs", type=click.IntRange(0), default=None, metavar="N",
              help="Compile each batch on N processes, each pinned to its own CPU, while the "
                   "timing process waits; 0 compiles where the kernels are timed. CPU only. "
                   "[default: with --jobs 1 and --cpus 1, one per CPU this process may use; "
                   "otherwise 0]")
@click.option("--ray", "ray_address", default=None, metavar="auto|ADDRESS",
              help="Time on a Ray cluster (pip install -e '.[dist]'): auto joins the one "
                   "this machine belongs to (or $RAY_ADDRESS), ADDRESS is its head "
                   "(host:port or ray://host:port).")
@output_option(help="Where to write the measured records: a file (zstd if it ends in .zst) or "
                    "- for stdout.")
@quiet_option(help="No summary on stderr.")
def cli(inputs, backend, samples, min_time, batch, cache_dir, no_cache, retry_errors, progress,
        cpus, clock, timeout, jobs, compile_jobs, ray_address, output, quiet):
    """Time kernels on a real device through XLA and add their runtimes.

    Reads kernel records (hlo-split) or graph records (featurize) from the
    files given, plain or zstd, or from stdin, and writes the same records to
    stdout or -o FILE (never to a terminal) with four fields added:

    \b
      runtime_ns  the kernel's runtime in nanoseconds: the fastest of its
                  samples (with --clock events, their lower quartile)
      runs        the samples (ns per run of the kernel), in the order taken
      noise       how far runtime_ns may be off: how far the fastest sits
                  below the samples' 10th percentile (q10 / fastest - 1;
                  with --clock events their spread, 1.4826 * MAD / median,
                  a robust relative standard deviation); train and eval
                  use it
      target      the machine: platform (cpu/gpu/tpu), device_kind, chip
                  (the CPU model name or the accelerator); on CPU also cpu
                  (vendor, family, model, stepping), caches (sizes by
                  level), cpu_count (CPUs the process could use) and cores;
                  clock, method (the timing method's version), jax and
                  jaxlib versions, platform_version

    A kernel that cannot be timed gets `error` (a reason, prefixed by its
    kind: collective, parse, convert, compile, unsupported, inputs, run,
    untimed, crash, timeout) instead of runtime_ns, and the stream goes on.
    "untimed" is a kernel whose samples were mostly not above the fixed
    cost of a call twice, the second time after a new calibration (a burst
    of interference can overstate the fixed cost; the work of a few of
    XLA:CPU's parallel_* kernels never shows): no runtime is better than a
    zero. All other fields pass through untouched.

    How a kernel is timed: its standalone HloModule (the record's `hlo`) is
    put inside a while loop that runs it n times in one call of one
    executable (n is a parameter), converted to StableHLO and compiled with
    XLA by jaxlib's PJRT client for one device of --backend; the code path
    is the same for every backend. Fusions are unfused first and re-fused by
    XLA (the StableHLO importer drops the layouts inside a fusion, which
    XLA:CPU aborts on), bitcasts become reshapes, and parameters whose
    layout is not row-major arrive flat in memory order, so that a
    layout-changing copy still moves its data. The loop carries the inputs
    through an opt-barrier (so XLA cannot hoist the kernel out of it) and
    writes the output into the same buffer every trip. A sample is the time
    of a call with n trips less the time of a call with none, divided by n:
    the kernel's own time, without Python or PJRT dispatch (the paper times
    kernels on the device). n is chosen so that a sample takes at least
    --min-time.

    Inputs of the parameters' shapes and dtypes are put on the device once:
    floating-point values uniform in [0.5, 1.5] (finite under log, sqrt,
    divide; no denormals), integers all zero (a valid index into any
    dimension, so every gather, scatter and dynamic-slice stays in bounds),
    booleans random.

    Kernels are timed --batch at a time. They are compiled up to 16 to an
    executable, each in its own loop with its own n (a call gives one
    kernel n trips and the others none): XLA's fixed cost per executable,
    a third or more of a small kernel's compile time on XLA:CPU, is paid
    once per 16 (a kernel that fails sends its executable's kernels back
    to one-by-one compiles, so each failure stays its own). Each kernel is
    calibrated, then the samples are taken in rounds across the batch, so
    that a burst
    of interference from other processes hits one sample of many kernels
    rather than every sample of one. On CPU, a sample during which the
    measuring thread was switched out (its context-switch count moved) is
    dropped, unless that leaves fewer than half of them. The runtime is the
    fastest sample kept, less the fastest call with no trips (one is timed
    beside each sample): interference only ever adds time, and on a cloud
    VM it comes as a regime (most likely a neighbour on the host's other
    hyperthread slows everything 1.6x to 2x for milliseconds at a time,
    most of the time), so the fastest sample is the machine undisturbed,
    and any other quantile lands in the slow regime by chance. Many samples (--samples)
    spread over the seconds a round of a large --batch takes give each
    kernel its chance at an undisturbed moment. With --clock events (an
    accelerator's own clock) the runtime is the samples' lower quartile.

    The steady settings are the defaults: on a shared CPU machine the
    process is pinned to one CPU (--cpus 1) and a sample's duration is the
    CPU time it got (--clock process). benchmarks/bench_measure_noise.py
    measures how well two independent runs agree on this machine (the
    README gives the figures). The target (with clock and CPU count) is
    part of the cache key: another machine, clock or method is measured
    afresh.

    The summary on stderr (unless -q) counts the kernels measured, failed,
    timed now and read from the cache, groups the failures by reason, and
    gives the median noise of the kernels timed now. When that is 8% or
    more over 30 kernels or more, it warns that the machine is loud: two
    runs of the same kernels disagree by about their median noise (2% to
    6% on a quiet machine), so such labels should not train or judge a
    model.

    Collectives, infeed/outfeed and send/recv cannot run alone and fail with
    kind "collective"; custom calls the runtime lacks fail to compile.

    Compiling is most of the cost on XLA:CPU, and timing on one CPU leaves
    the others idle, but timing beside other work lengthens kernels. So a
    batch is first compiled on a pool of processes, one pinned to each CPU
    measure may use (--compile-jobs; each set up as the timing process is,
    so XLA emits the same code), while the timing process waits; the
    executables come back serialized, and are loaded and timed with the
    other CPUs idle.

    Compilation and timing happen in a child process: XLA aborts the process
    on some internal errors (a failed CHECK), and a kernel may never finish;
    a batch hit by either is timed again one kernel at a time, and the
    guilty kernel gets error kind "crash" or "timeout" (--timeout). A child
    whose measure was killed (even with SIGKILL) exits within a round of
    samples, its compiles with it.

    The cache: each measurement (or failure, but for a timeout, which
    depends on the load and --timeout) is stored under the fingerprint of
    the kernel's hlo text (computed from the text, as hlo-split computes the
    record's fingerprint; a record whose fingerprint field disagrees is
    keyed by its text, with a warning) and the target, in an sqlite3 file
    in --cache-dir, committed batch by batch. A second run of the same
    pipeline times nothing again, an interrupted run resumes, and a kernel
    seen twice in one stream is timed once. Several measure processes may
    share one cache. A cached value is reused whatever --samples and
    --min-time are now; use --no-cache (or another --cache-dir) to measure
    afresh. Ctrl-C keeps every finished batch in the cache and leaves stdout
    a valid stream up to the last whole record.

    In parallel: --jobs N starts N measuring children, each pinned to its
    own --cpus CPUs of the process's affinity set (N times --cpus must fit
    in it: with --cpus 1, N at most the CPUs the process may use). Chunks of
    --batch kernels go to whichever child is free; the records come out in
    input order, and the parent alone reads and writes the cache, each
    chunk's results as soon as they come back. A child's CPU time is its
    own, so on an otherwise idle machine N jobs time each kernel as one job
    does (benchmarks/bench_measure_jobs.py measures the speedup and the
    agreement).

    On a cluster: --ray auto|ADDRESS sends the chunks to Ray actors instead
    (pip install -e '.[dist]'; every host needs this checkout's tpuperf and
    the same jax): one per CPU of the cluster, each pinned to --cpus CPUs
    that no other tpuperf worker on its host holds, or one per GPU or TPU
    chip with --backend gpu or tpu; --jobs N caps them at N. Each actor times
    in its own child process, as above. Results are cached as they arrive;
    the chunk of an actor that dies (or whose host does) goes to another,
    and the dead one is replaced; after 3 deaths on one chunk its kernels
    get error kind "crash". All workers must describe one target (one kind
    of machine per run).

    On stderr: a progress bar with rate and ETA when stderr is a terminal
    (the input is then read whole first, to know the total), otherwise a
    line a minute; at the end, how many kernels were measured and failed,
    failures grouped by reason.

    \b
    Examples:
      hlo-split prog.hlo | featurize | measure --backend cpu > prog.msgpack
      hlo-split prog.hlo | featurize | measure -o prog.zst
      measure --backend tpu --samples 9 kernels.zst > timed.msgpack
      measure --no-cache --samples 15 --min-time 5ms kernels.msgpack
      measure --cpus all --clock wall kernels.zst > timed.msgpack
      measure --jobs 2 kernels.zst > timed.msgpack
      measure --ray auto --backend tpu kernels.zst -o timed.zst

    \b
    On a TPU host (none is reachable from the project's own machines):
      pip install -e '.[tpu]'           # in a tpuperf checkout: jax[tpu]==0.6.2, libtpu
      hlo-split prog.hlo | measure --backend tpu > timed.msgpack

    Exit status: 0 when the stream was read whole (even if some kernels
    failed to run: see their error fields), 1 for a bad or truncated input
    stream, a record without hlo text, a backend that is not present, more
    --jobs than CPUs, or a Ray cluster that cannot be joined; 130 when
    interrupted.
    """
    from tpuperf_cli.measure.parallel import LocalPool

    prog = click.get_current_context().info_name or "measure"
    refuse_terminal(output, "predict")
    seconds = parse_duration(min_time)
    if cpus == "default":
        cpus = None if backend in ("gpu", "tpu") else 1
    settings = dict(backend=backend, samples=samples, min_time=seconds, timeout=timeout,
                    cpus=cpus, clock=clock)
    data_stdout = sys.stdout
    if ray_address is not None:
        from tpuperf_cli.measure.distributed import RayPool

        # Ray prints its workers' deaths to sys.stdout: keep it off the data
        sys.stdout = sys.stderr
        try:
            measurer = RayPool(ray_address, jobs, log=lambda m: print(f"{prog}: {m}", file=sys.stderr),
                               **settings)
        except BaseException:
            sys.stdout = data_stdout
            raise
    else:
        measurer = LocalPool(jobs or 1, compile_jobs=compile_jobs, **settings)
    try:
        _measure(prog, measurer, data_stdout, inputs, batch, cache_dir, no_cache, retry_errors,
                 progress, output, quiet)
    finally:
        sys.stdout = data_stdout


def _measure(prog, measurer, data_stdout, inputs, batch, cache_dir, no_cache, retry_errors,
             progress, output, quiet):
    from tpuperf_cli.measure import MeasureSession
    from tpuperf_cli.measure.cache import Cache
    from tpuperf_cli.measure.parallel import measure_chunks
    from tpuperf_cli.stream import read_records

    try:
        cache = None if no_cache else Cache(cache_dir)
    except TpuperfError:
        measurer.close()
        raise

    def warn(message):
        print(f"{prog}: warning: {message}", file=sys.stderr)

    session = MeasureSession(measurer, cache, retry_errors=retry_errors, warn=warn)
    tty = sys.stderr.isatty()
    show = tty if progress is None else progress

    def numbered():
        for source in inputs or ["-"]:
            name = "<stdin>" if source == "-" else source
            for number, record in enumerate(read_records(source), 1):
                yield record, number, name

    records = numbered()
    total = None
    bad_input = None
    if show:
        # the bar needs a total: read the input first, but keep (and measure)
        # the records before a corrupt or truncated one
        records, bad_input = _read_all(records)
        total = len(records)
    bar = _Progress(total, show and total is not None, prog)
    ray_stdout, sys.stdout = sys.stdout, data_stdout  # the writer takes the real stdout
    try:
        writer = record_writer(output, "predict")
    except TpuperfError:
        measurer.close()
        raise
    finally:
        sys.stdout = ray_stdout
    to_stdout = output == "-"

    def emit(chunk):
        for record in chunk:
            # a record is written whole or not at all, even under Ctrl-C
            old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
            try:
                writer.write(record)
                if to_stdout:  # the reader downstream sees each record at once
                    writer.flush()
            finally:
                signal.pthread_sigmask(signal.SIG_SETMASK, old)
            bar.step(str(record.get("kernel", "")))

    try:
        # a few chunks queued per worker, so that none waits for the next
        window = 2 * getattr(measurer, "size", 1) + 2
        measure_chunks(session, measurer, _chunks(records, batch, session.check), emit, window)
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


def _chunks(items, size, check):
    """Lists of up to `size` (record, number, name) items; a reading error,
    or a record that `check` refuses, ends the last list early and is raised
    after it was handed out (good records first)."""
    chunk = []
    try:
        for item in items:
            check(*item)
            chunk.append(item)
            if len(chunk) >= size:
                yield chunk
                chunk = []
    except TpuperfError:
        if chunk:
            yield chunk
        raise
    if chunk:
        yield chunk
