"""Reading HLO the way XLA writes it: dump directories, HLO protos, and
telling the optimized module (what XLA runs) from the program before
optimization.

    modules, skipped = scan_dump(directory, module_re=None)
        the optimized modules of an XLA_FLAGS=--xla_dump_to=DIR directory
        (DumpModule each) and a Counter of the files left out, by reason
    expand_inputs(sources, module_re=None, ...) -> [(source, program, read)]
        a tool's FILES, dump directories expanded
    read_hlo(path) -> HloInput        text, proto (via jaxlib) or zstd text
    decode_hlo(data, name) -> HloInput
    unoptimized(hlo) -> str or None   why the input is not optimized HLO
    unscheduled_without_fusions(text) -> bool   a hint it may be unoptimized
    optimized_text(hlo, backend=None, warn=None) -> str
        the optimized module of an input: as it is, or compiled for
        backend; TpuperfError for input before optimization without one

Only reading a proto needs jaxlib (its HloModule parser and printer); the
rest is plain Python so that hlo-split starts fast.

XLA names its dump files module_NNNN.NAME.SUFFIX (NNNN: the module's id in
the process, NAME: the HloModule's name). The optimized module is
*after_optimizations.txt (text) and *after_optimizations.hlo.pb (with
--xla_dump_hlo_as_proto: an HloProto, the module plus its buffer
assignment); the platform sits before it (cpu_, tpu_, sm_8.0_gpu_).
"""

import os
import re
from collections import Counter
from dataclasses import dataclass

from tpuperf_cli.errors import TpuperfError, read_file

ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"

OPTIMIZED_TEXT = "after_optimizations.txt"
OPTIMIZED_PROTO = "after_optimizations.hlo.pb"
BEFORE_SUFFIXES = (".before_optimizations.txt", ".before_optimizations.hlo.pb")

# (reason, test on the file name): how files other than optimized modules
# are counted on stderr; the first that matches names the reason.
_SKIP_RULES = (
    ("before optimization (other kinds)", lambda n: ".before_optimizations." in n),
    ("buffer assignments and memory reports",
     lambda n: "after_optimizations-buffer-assignment" in n
     or "after_optimizations-memory-usage-report" in n),
    ("HLO between passes (--xla_dump_hlo_pass_re)",
     lambda n: re.search(r"\.\d{4}\.[^/]*\.after_", n) is not None),
    ("LLVM IR and object code",
     lambda n: n.endswith((".ll", ".o", ".ptx", ".cubin", ".s", ".asm")) or ".obj-file." in n),
    ("debug options", lambda n: n.endswith(".debug_options")),
)

_RE_MODULE_ID = re.compile(r"^(module_\d+)\.")
_RE_HEADER = re.compile(r"^\s*HloModule\s+([^\s,]+)", re.M)
# StableHLO / MHLO as jax.jit(f).lower(...).as_text() prints it
_RE_MLIR = re.compile(r"^\s*(module\b|func\.func\b|#loc|\"?builtin\.module)|\b(stablehlo|mhlo)\.[a-z_]+\b",
                      re.M)


@dataclass
class HloInput:
    """One input module: its text and where it came from."""

    text: str
    name: str                   # for messages: a path or <stdin>
    proto: bool = False         # read from an HloProto / HloModuleProto


@dataclass
class DumpModule:
    """An optimized module found in a dump directory."""

    path: str
    program: str                # module_NNNN.NAME: unique in the directory
    module_name: str            # the HloModule's own name
    proto: bool


# ---------------------------------------------------------------- dumps

def scan_dump(directory, module_re=None, unoptimized=False):
    """(modules, skipped) for an XLA dump directory.

    modules: DumpModule per optimized module, in module id order; a module
    dumped both as text and as proto is read from its text. module_re (a
    compiled regex) keeps the modules whose program name
    (module_NNNN.NAME) it matches (re.search). skipped: Counter of
    reason -> files left out (files of other kinds, modules not matching).
    A module dumped only before optimization (XLA failed or was stopped
    before the end) is counted under "modules dumped only before
    optimization", or with unoptimized=True returned (its
    *before_optimizations* file) for the caller to compile.
    """
    try:
        names = sorted(os.listdir(directory))
    except OSError as e:
        raise TpuperfError(f"{directory}: {e.strerror}") from None
    skipped = Counter()
    found = {}                  # program -> DumpModule (text wins over proto)
    before = {}                 # program -> DumpModules of its before_optimizations files
    for n in names:
        path = os.path.join(directory, n)
        if not os.path.isfile(path):
            skipped["subdirectories and other non-files"] += 1
            continue
        optimized = n.endswith((OPTIMIZED_TEXT, OPTIMIZED_PROTO))
        if optimized or n.endswith(BEFORE_SUFFIXES):
            proto = n.endswith(".pb")
            module_name = _module_name_of(path, proto)
            program = program_name(n, module_name) or n
            m = DumpModule(path, program, module_name, proto)
            if not optimized:
                before.setdefault(program, []).append(m)
                continue
            seen = found.get(program)
            if seen is not None:
                # the same module as text and as proto: one is enough
                skipped["protos of modules also dumped as text"] += 1
                if seen.proto and not proto:
                    found[program] = m
                continue
            found[program] = m
            continue
        for reason, test in _SKIP_RULES:
            if test(n):
                skipped[reason] += 1
                break
        else:
            skipped["other files"] += 1
    for program, files in before.items():
        if program in found:
            skipped["before optimization"] += len(files)
        elif unoptimized:
            files.sort(key=lambda m: m.proto)          # text first
            found[program] = files[0]
            if len(files) > 1:
                skipped["protos of modules also dumped as text"] += len(files) - 1
        else:
            skipped["modules dumped only before optimization (--compile compiles them)"] += 1
    modules = sorted(found.values(), key=lambda m: m.program)
    if module_re is not None:
        kept = [m for m in modules if module_re.search(m.program)]
        if len(kept) < len(modules):
            skipped["modules not matching --module"] = len(modules) - len(kept)
        modules = kept
    return modules, skipped


def expand_inputs(sources, module_re=None, unoptimized=False, report=None, stdin=None,
                  check=None):
    """[(source, program name or None, read)] for the inputs of a tool:
    files and stdin ("-") as given, dump directories expanded into their
    modules (scan_dump; report(message) gets each one's summary of what was
    skipped). read() returns the HloInput; check(data, name) may refuse
    the bytes of a file (see decode_hlo). TpuperfError for a directory
    without a module to read, or module_re without a directory."""
    out = []
    dirs = 0
    for source in sources:
        if source != "-" and os.path.isdir(source):
            dirs += 1
            modules, skipped = scan_dump(source, module_re, unoptimized=unoptimized)
            if report and skipped:
                report(f"{source}: {len(modules)} module(s); skipped {skipped_summary(skipped)}")
            if not modules:
                every = scan_dump(source, None, unoptimized)[0] if module_re is not None else []
                if every:
                    names = [m.program for m in every]
                    more = f", ... ({len(names)} in all)" if len(names) > 8 else ""
                    raise TpuperfError(f"{source}: no module matches --module "
                                       f"{module_re.pattern!r} (modules: "
                                       f"{', '.join(names[:8])}{more})")
                raise TpuperfError(f"{source}: no optimized HLO module in this directory "
                                   f"(XLA writes *after_optimizations.txt there when run "
                                   f"with XLA_FLAGS=--xla_dump_to={source})")
            for m in modules:
                out.append((m.path, m.program, lambda p=m.path: read_hlo(p, check)))
        elif source == "-":
            out.append((source, None, stdin or (lambda: decode_hlo(_stdin_bytes(), "<stdin>",
                                                                   check))))
        else:
            out.append((source, None, lambda p=source: read_hlo(p, check)))
    if module_re is not None and not dirs:
        raise TpuperfError("--module picks modules of dump directories: give a directory",
                           exit_code=2)
    return out


def _stdin_bytes():
    import sys

    return sys.stdin.buffer.read()


def skipped_summary(skipped):
    """'12 files: 3 before optimization, ...' for stderr ('' if none)."""
    if not skipped:
        return ""
    return ", ".join(f"{n} {reason}" for reason, n in skipped.items())


def program_name(filename, module_name):
    """module_NNNN.NAME for a file XLA dumped (module_NNNN.NAME.*), None for
    other file names."""
    m = _RE_MODULE_ID.match(os.path.basename(filename))
    if m and module_name:
        return f"{m.group(1)}.{module_name}"
    return None


def file_program(filename):
    """The program name hlo-split gives a file XLA did not dump: its name
    less .zst, then less its HLO extension (mlp.hlo.zst, mlp.hlo, mlp.pb:
    mlp); '' when nothing is left."""
    base = os.path.basename(filename)
    for ext in (".zst", ".pb", ".hlo", ".txt", ".pbtxt", ".mlir"):
        if base.endswith(ext):
            base = base[: -len(ext)]
    return base


def module_name(text):
    """The name in an HLO text's HloModule header ('' if none)."""
    m = _RE_HEADER.search(text[:20000])
    return m.group(1) if m else ""


def _module_name_of(path, proto):
    """The HloModule's name, from the file's header or the proto's name field."""
    try:
        with open(path, "rb") as f:
            head = f.read() if proto else f.read(1 << 16)
    except OSError as e:
        raise TpuperfError(f"{path}: {e.strerror}") from None
    if proto:
        try:
            for number, wire, value in _fields(_module_proto(head, path)):
                if number == 1 and wire == 2:
                    return value.decode("utf-8", "replace")
        except (TpuperfError, IndexError, ValueError):
            pass                # read_hlo says what is wrong with it
        return ""
    m = _RE_HEADER.search(head.decode("utf-8", "replace"))
    return m.group(1) if m else ""


# ---------------------------------------------------------------- reading

def read_hlo(path, check=None):
    """An HloInput from a file: HLO text (plain or zstd) or an HLO proto."""
    return decode_hlo(read_file(path), path, check)


def decode_hlo(data, name, check=None):
    """An HloInput from the bytes of a file or of stdin. check(data, name),
    when given, is called on bytes that are not a proto (after zstd) and
    may raise TpuperfError for input that is plainly something else."""
    if data[:4] == ZSTD_MAGIC:
        from tpuperf_cli.stream import zstd_decompress

        data = zstd_decompress(data, name)    # every frame; a cut one is an error
    if is_proto(data, name):
        return HloInput(proto_to_text(data, name), name, proto=True)
    if check is not None:
        check(data, name)
    return HloInput(data.decode("utf-8", errors="replace"), name)


def is_proto(data, name=""):
    """True for a serialized HloProto or HloModuleProto: named *.pb, or
    binary where text would start (field 1, length-delimited: byte 0x0a)."""
    if str(name).endswith(".pb"):
        return True
    return data[:1] == b"\x0a" and b"\x00" in data[:4096]


def proto_to_text(data, name):
    """HLO text of a serialized HloProto (what --xla_dump_hlo_as_proto
    writes) or HloModuleProto (HloModule.as_serialized_hlo_module_proto()),
    printed by XLA itself (jaxlib's HloModule)."""
    module = _module_proto(data, name)
    try:
        from tpuperf_cli.hlo.xla import module_from_proto
    except ImportError as e:    # pragma: no cover - jaxlib is a dependency
        raise TpuperfError(f"{name}: reading HLO protos needs jaxlib ({e})") from None
    try:
        return module_from_proto(module).to_string()
    except Exception as e:      # XlaRuntimeError and friends
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise TpuperfError(f"{name}: not an HLO module proto XLA can read ({first})") from None


def _module_proto(data, name):
    """The HloModuleProto bytes of an HloProto (field 1, hlo_module) or of
    an HloModuleProto itself (which has field 2, entry_computation_name)."""
    try:
        fields = list(_fields(data))
    except (IndexError, ValueError):
        raise TpuperfError(f"{name}: not an HLO proto (not a protocol buffer, or cut short)") from None
    numbers = {n for n, _, _ in fields}
    if 2 in numbers or 3 not in numbers and 1 not in numbers:
        if not fields:
            raise TpuperfError(f"{name}: empty HLO proto")
        return bytes(data)
    for number, wire, value in fields:
        if number == 1 and wire == 2:
            return bytes(value)
    raise TpuperfError(f"{name}: an HloProto without a module (field hlo_module)")


def _varint(buf, i):
    shift = value = 0
    while True:
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return value, i
        if shift > 63:
            raise ValueError("varint too long")


def _fields(buf):
    """(field number, wire type, value) of one protobuf message's top level."""
    buf = memoryview(buf)
    i = 0
    while i < len(buf):
        key, i = _varint(buf, i)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise ValueError("field number 0")
        if wire == 0:
            value, i = _varint(buf, i)
        elif wire == 1:
            value, i = buf[i:i + 8], i + 8
        elif wire == 2:
            n, i = _varint(buf, i)
            if i + n > len(buf):
                raise ValueError("cut short")
            value, i = bytes(buf[i:i + n]), i + n
        elif wire == 5:
            value, i = buf[i:i + 4], i + 4
        else:
            raise ValueError(f"wire type {wire}")
        if i > len(buf):
            raise ValueError("cut short")
        yield number, wire, value


# ---------------------------------------------------------------- optimized or not

def unoptimized(hlo):
    """Why an input is not the optimized module XLA runs (a short phrase),
    or None when it may be: StableHLO/MHLO text, or a file XLA dumped
    before optimization."""
    base = os.path.basename(str(hlo.name))
    if ".before_optimizations." in base:
        return "HLO before optimization (XLA's *before_optimizations* dump)"
    if is_mlir(hlo.text):
        return "StableHLO/MHLO (MLIR), the program before XLA optimizes it"
    return None


def is_mlir(text):
    """True for MLIR text (StableHLO, MHLO): no HloModule header, MLIR syntax."""
    head = text[:20000]
    if _RE_HEADER.search(head):
        return False
    return _RE_MLIR.search(head) is not None


def unscheduled_without_fusions(text):
    """A hint that HLO text is from before optimization: XLA schedules every
    module it compiles (is_scheduled=true in the header) and fuses on every
    backend, so a module with neither most likely never went through it."""
    m = _RE_HEADER.search(text[:20000])
    if not m:
        return False
    header = text[m.start(): text.find("\n", m.start()) if "\n" in text[m.start():] else len(text)]
    return "is_scheduled=true" not in header and re.search(r"\sfusion\(", text) is None


HOW_TO_OPTIMIZE = (
    "tpuperf reads the optimized module XLA runs: print "
    "jax.jit(f).lower(*args).compile().as_text(), or run with "
    "XLA_FLAGS=--xla_dump_to=DIR and give DIR (its *after_optimizations* files), "
    "or add --compile cpu|gpu|tpu to compile it here")


def optimized_text(hlo, backend=None, warn=None, compile_hint=None):
    """The optimized HLO text of an HloInput: its text when it is optimized
    already; compiled by XLA for `backend` (cpu, gpu, tpu) when it is not
    and a backend is given; else TpuperfError (exit status 2) saying how to
    get the optimized module. HLO text that is neither scheduled nor fused
    is compiled with a backend, and otherwise passed on with a warning
    (warn(message)). compile_hint replaces the advice to use --compile
    (the Python API's is compile=...)."""
    reason = unoptimized(hlo)
    if reason is None and unscheduled_without_fusions(hlo.text):
        if backend is None:
            if warn:
                warn(f"{hlo.name}: not scheduled and without fusions: this looks like HLO "
                     f"before optimization, whose kernels are not what XLA runs; "
                     + HOW_TO_OPTIMIZE.replace("tpuperf reads", "give"))
            return hlo.text
        reason = "unscheduled HLO"
    if reason is None:
        return hlo.text
    if backend is None:
        how = HOW_TO_OPTIMIZE
        if compile_hint:
            how = how.replace("add --compile cpu|gpu|tpu to compile it here", compile_hint)
        raise TpuperfError(f"{hlo.name}: this is {reason}; {how}", exit_code=2)
    from tpuperf_cli.hlo.compile import optimize

    return optimize(hlo.text, backend, hlo.name)
