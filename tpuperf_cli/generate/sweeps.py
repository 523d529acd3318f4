"""The `sweeps` source: the example programs at other sizes, batches,
sequence lengths and dtypes, so that the same ops occur at many shapes.

`programs` name the example programs to sweep, each by name
(`resnet_s_train`) or by its HLO file (`examples/hlo/resnet_s_train.hlo.zst`
or a plain .hlo: the file name less those endings is the name);
`examples/make_programs.py --list` lists them. Each is rebuilt in JAX by
make_programs.sweep_spec at points of a grid (batch BATCH_SCALES x its
default, size axis SIZE_SCALES x its own: image side, sequence length or
widths, dtype in DTYPES), compiled by XLA:CPU and split into kernels as
hlo-split splits a program. The seed shuffles the points of all programs
given into the order they are built; the source ends when all are. A point
that is an example program itself (resnet_s_train at bf16 is
resnet_s_train_bf16) is skipped: a sweep must not rebuild a program that may
be on the test side of a split.

Records: program "sweeps:<swept program>", origin the example program it is
a sweep of. make_programs.py lives in the checkout's examples/ (the models
are JAX code, not part of the installed tool), so the source needs a
checkout.
"""

from __future__ import annotations

import importlib.util
import random
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from tpuperf_cli.errors import TpuperfError
from tpuperf_cli.records import ORIGIN, SOURCE, Record

SOURCE_NAME = "sweeps"
BATCH_SCALES = (0.25, 0.5, 1, 2)
SIZE_SCALES = (0.5, 0.75, 1, 1.5, 2)
DTYPES = ("f32", "bf16")
# A swept program with a larger array is skipped: its kernels would take
# long to measure (the example programs stay under 4.2M elements).
MAX_ELEMENTS = 16 * 2**20
MAKE_PROGRAMS = Path(__file__).resolve().parents[2] / "examples" / "make_programs.py"


def make_programs():
    """examples/make_programs.py as a module (loaded once)."""
    name = "make_programs"
    if name not in sys.modules:
        if not MAKE_PROGRAMS.is_file():
            raise TpuperfError(f"--source sweeps: needs the checkout's {MAKE_PROGRAMS} "
                               f"(install tpuperf from a checkout: pip install -e .)")
        spec = importlib.util.spec_from_file_location(name, MAKE_PROGRAMS)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module        # its dataclasses look the module up
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[name]
            raise
    return sys.modules[name]


def program_names(programs: Sequence[str]) -> list[str]:
    """The example program names of `programs` (names or HLO file paths),
    each once; TpuperfError for one that is no example program."""
    from tpuperf_cli.hlo.dump import file_program

    known = {s.name for s in make_programs().all_specs()}
    names = []
    for p in programs:
        name = file_program(p) if p.endswith((".hlo", ".hlo.zst")) else p
        if name not in known:
            raise TpuperfError(f"--source sweeps: {p}: not an example program "
                               f"(examples/make_programs.py --list names them)")
        if name not in names:
            names.append(name)
    return names


def sweep_points(names: Sequence[str], seed: int) -> list:
    """(program, batch, dtype, k) of every grid point of every program but
    the example programs themselves, in the seed's order."""
    mp = make_programs()
    specs = {s.name: s for s in mp.all_specs()}
    points = []
    for name in names:
        base = specs[name]
        for bs in BATCH_SCALES:
            batch = max(1, int(base.batch * bs))
            for k in SIZE_SCALES:
                for dtype in DTYPES:
                    if mp.sweep_spec(name, batch, dtype, k).name not in specs:
                        points.append((name, batch, dtype, k))
    random.Random(seed).shuffle(points)
    return points


def generate(seed: int, programs: Sequence[str],
             log: Callable[[str], None]) -> Iterator[Record]:
    """Kernel records of the example programs `programs` swept (see the
    module docstring), deterministically for a seed."""
    from tpuperf_cli.hlo.parser import parse_module
    from tpuperf_cli.hlo.split import kernel_records

    if not programs:
        raise TpuperfError("--source sweeps: needs example programs to sweep "
                           "(names, or their files in examples/hlo)")
    names = program_names(programs)
    points = sweep_points(names, seed)
    mp = make_programs()
    kernels = 0
    t0 = time.monotonic()
    for i, (name, batch, dtype, k) in enumerate(points):
        spec = mp.sweep_spec(name, batch, dtype, k)
        started = time.monotonic()
        try:
            text = compile_cpu(mp, spec)
        except Exception as e:  # a point the model or XLA cannot take: skip it, say why
            first = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
            log(f"sweeps: [{i + 1}/{len(points)}] {spec.name}: skipped, does not build "
                f"({first})")
            continue
        biggest = mp.max_elements(text)
        if biggest > MAX_ELEMENTS:
            log(f"sweeps: [{i + 1}/{len(points)}] {spec.name}: skipped, an array of "
                f"{biggest} elements (over {MAX_ELEMENTS}) would be slow to measure")
            continue
        module = parse_module(text, spec.name)
        records = list(kernel_records(module, program=f"{SOURCE_NAME}:{spec.name}"))
        kernels += len(records)
        elapsed = time.monotonic() - t0
        log(f"sweeps: [{i + 1}/{len(points)}] {spec.name}: {len(records)} kernels in "
            f"{time.monotonic() - started:.1f}s; {kernels} in all, "
            f"{kernels / elapsed if elapsed > 0 else 0:.1f} kernels/s")
        for record in records:
            record[SOURCE] = SOURCE_NAME
            record[ORIGIN] = name
            yield record


def compile_cpu(mp, spec) -> str:
    """The optimized HLO text XLA:CPU makes of a make_programs Spec, with the
    program's fusion variant (as make_programs.compile_text, on the CPU
    whatever jax's default backend; LLVM not optimizing, which leaves the
    HLO as it is, see fusions.FAST_COMPILE)."""
    import jax

    from tpuperf_cli.generate.fusions import FAST_COMPILE

    mp.setup_jax()
    with jax.default_device(jax.devices("cpu")[0]):
        return mp.compile_text(spec, FAST_COMPILE)
