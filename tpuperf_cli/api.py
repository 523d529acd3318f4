"""The Python API: estimate a jitted JAX function or an HLO module, compare
several.

    import tpuperf_cli as tp
    est = tp.estimate(jax.jit(step), params, batch)     # compiles, predicts
    est.total_ns, est.kernels[0], est.to_pandas()
    est = tp.estimate_hlo("prog.hlo")                   # text, a path or a dump dir
    cmp = tp.compare({"default": f.lower(x).compile(),
                      "no fusion": f.lower(x).compile(compiler_options={...})})
    print(cmp)                                          # ranked, with the kernels that differ

Each runs what the tools run, in process: hlo-split's kernel splitting,
featurize, predict (the default model: this machine's from `tpuperf calibrate`,
else the bundled one; for a program compiled for a GPU, a model calibrated
for a GPU here, else the bundled GPU model; or model=PATH or a loaded model) and
score's sum over kernels x their counts. The jitted function is lowered and
compiled by the user's own jax, for the backend jax picks for those
arguments (its default, or what the arguments and jax's settings say):
tpuperf never changes jax's configuration or default backend.

torch, DGL and jax are imported on first use, not when tpuperf_cli is.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Union

from tpuperf_cli.errors import TpuperfError

if TYPE_CHECKING:           # pragma: no cover
    import pandas

    from tpuperf_cli.model.predict import Model

ModelLike = Union[None, str, "os.PathLike[str]", "Model"]
HloLike = Union[str, "os.PathLike[str]", bytes]

__all__ = ["KernelRow", "Estimate", "KernelDiff", "Comparison", "estimate", "estimate_hlo",
           "compare", "load_model"]


@dataclass(frozen=True)
class KernelRow:
    """One kernel of a program's estimate."""

    name: str               # hlo-split's kernel name ("COMP/NAME" outside ENTRY)
    opcode: str             # "fusion", "dot", ...
    fusion_kind: str | None  # "kLoop", "kInput", ... for fusions
    count: int              # runs per program run (loop trip counts)
    count_known: bool       # False: a trip count was unknown (counted once)
    pred_ns: float          # predicted runtime of one run
    total_ns: float         # pred_ns x count
    share: float            # total_ns / the program's total (0..1)
    fingerprint: str        # equal for identical kernels (hlo-split)
    spread: float | None = None  # a model of several members: their spread of log runtime (pred_spread)


@dataclass
class Estimate:
    """A program's predicted runtime and its kernels, slowest first."""

    program: str
    total_ns: float
    kernels: list[KernelRow]
    model: str
    count_known: bool = True
    platform: str | None = None      # where jax compiled it, when known
    hlo: str = field(default="", repr=False)   # the optimized module
    warnings: list[str] = field(default_factory=list, repr=False)

    @property
    def total_ms(self) -> float:
        return self.total_ns / 1e6

    def top(self, n: int = 10) -> list[KernelRow]:
        """The n kernels taking the most predicted time."""
        return self.kernels[:n]

    def by_opcode(self) -> dict[str, float]:
        """Predicted ns per opcode (fusions by their kind), largest first."""
        out: dict[str, float] = {}
        for k in self.kernels:
            key = f"fusion ({k.fusion_kind})" if k.opcode == "fusion" and k.fusion_kind else k.opcode
            out[key] = out.get(key, 0.0) + k.total_ns
        return dict(sorted(out.items(), key=lambda kv: -kv[1]))

    def to_pandas(self) -> "pandas.DataFrame":
        """The kernel rows as a DataFrame (one row per kernel, slowest first)."""
        pd = _pandas()
        return pd.DataFrame([asdict(k) for k in self.kernels],
                            columns=[f for f in KernelRow.__dataclass_fields__])

    def to_dict(self) -> dict[str, Any]:
        return {"program": self.program, "pred_ns": self.total_ns, "model": self.model,
                "count_known": self.count_known, "platform": self.platform,
                "kernels": [asdict(k) for k in self.kernels]}

    def table(self, top: int | None = 10) -> str:
        """A text table: the total, then the top kernels."""
        from tpuperf_cli.score import _time

        rows = self.kernels if top is None else self.kernels[:top]
        head = (f"{self.program}: {_time(self.total_ns)}"
                f"{'' if self.count_known else ' (+ loops of unknown trip count, counted once)'}"
                f", {len(self.kernels)} kernels, model {self.model}")
        lines = [head, f"{'share':>6} {'total':>10} {'count':>6} {'opcode':<16} kernel"]
        for k in rows:
            lines.append(f"{100 * k.share:5.1f}% {_time(k.total_ns):>10} "
                         f"{str(k.count) + ('' if k.count_known else '?'):>6} "
                         f"{_opname(k):<16} {k.name}")
        if len(rows) < len(self.kernels):
            rest = sum(k.total_ns for k in self.kernels[len(rows):])
            share = rest / self.total_ns if self.total_ns else 0.0
            lines.append(f"{100 * share:5.1f}% {_time(rest):>10} {'':>6} {'':<16} "
                         f"({len(self.kernels) - len(rows)} more kernels)")
        for w in self.warnings[:3]:
            lines.append(f"warning: {w}")
        if len(self.warnings) > 3:
            lines.append(f"... and {len(self.warnings) - 3} more warnings (.warnings)")
        return "\n".join(lines) + "\n"

    def __str__(self) -> str:
        return self.table()

    def _repr_pretty_(self, p, cycle):      # IPython
        p.text(self.table())


@dataclass(frozen=True)
class KernelDiff:
    """How one kernel's predicted time differs between a program and the
    fastest one (kernels matched by fingerprint: same work, same shapes)."""

    name: str               # the kernel's name in the program (or in the fastest)
    opcode: str
    fastest_ns: float       # its total (x count) in the fastest program; 0 if absent
    this_ns: float          # its total in this program; 0 if absent
    delta_ns: float         # this_ns - fastest_ns


@dataclass
class Comparison:
    """Programs ranked by predicted runtime, fastest first."""

    estimates: list[Estimate]

    @property
    def best(self) -> Estimate:
        return self.estimates[0]

    @property
    def ranking(self) -> list[tuple[str, float, float]]:
        """(program, predicted ns, ratio to the fastest), fastest first."""
        best = self.best.total_ns
        return [(e.program, e.total_ns, e.total_ns / best if best else float("nan"))
                for e in self.estimates]

    def __getitem__(self, program: str) -> Estimate:
        for e in self.estimates:
            if e.program == program:
                return e
        raise KeyError(program)

    def differences(self, program: str, top: int = 5) -> list[KernelDiff]:
        """The kernels whose predicted time differs most between `program`
        and the fastest: kernels are matched by fingerprint, a kernel only
        in one of them counts 0 in the other."""
        this, best = self[program], self.best

        def by_fp(est):
            out: dict[str, list] = {}
            for k in est.kernels:
                entry = out.setdefault(k.fingerprint, [k.name, k.opcode, 0.0])
                entry[2] += k.total_ns
            return out

        a, b = by_fp(best), by_fp(this)
        diffs = []
        for fp in a.keys() | b.keys():
            name, opcode, _ = b.get(fp) or a[fp]
            fast = a[fp][2] if fp in a else 0.0
            here = b[fp][2] if fp in b else 0.0
            if fast != here:
                diffs.append(KernelDiff(name, opcode, fast, here, here - fast))
        diffs.sort(key=lambda d: (-abs(d.delta_ns), d.name))
        return diffs[:top]

    def to_pandas(self) -> "pandas.DataFrame":
        """The ranking: program, pred_ns, vs_fastest, kernels, model."""
        pd = _pandas()
        best = self.best.total_ns
        return pd.DataFrame([{"program": e.program, "pred_ns": e.total_ns,
                              "vs_fastest": e.total_ns / best if best else float("nan"),
                              "kernels": len(e.kernels), "count_known": e.count_known,
                              "model": e.model} for e in self.estimates])

    def to_dict(self, top: int = 5) -> dict[str, Any]:
        return {"programs": [
            {"program": e.program, "pred_ns": e.total_ns, "vs_fastest": r,
             "kernels": len(e.kernels), "count_known": e.count_known, "model": e.model,
             "differences": [asdict(d) for d in self.differences(e.program, top)]
             if e is not self.best else []}
            for e, (_, _, r) in zip(self.estimates, self.ranking)]}

    def table(self, top: int = 5) -> str:
        """The ranking, then per program the kernels that differ most from
        the fastest."""
        from tpuperf_cli.score import _time

        width = max(len("program"), *(len(e.program) for e in self.estimates))
        lines = [f"{'rank':>4}  {'program':<{width}}  {'predicted':>10}  {'vs fastest':>10}  kernels"]
        for n, (e, (_, _, r)) in enumerate(zip(self.estimates, self.ranking), 1):
            lines.append(f"{n:>4}  {e.program:<{width}}  {_time(e.total_ns) + ('' if e.count_known else '+'):>10}"
                         f"  {r:>9.2f}x  {len(e.kernels):>7}")
        if top:
            for e in self.estimates[1:]:
                diffs = self.differences(e.program, top)
                if not diffs:
                    continue
                lines.append("")
                lines.append(f"{e.program} against {self.best.program}: "
                             f"{_signed(e.total_ns - self.best.total_ns)}; kernels that differ most:")
                for d in diffs:
                    lines.append(f"  {_signed(d.delta_ns):>11}  {_time(d.fastest_ns) if d.fastest_ns else '-':>9}"
                                 f" -> {_time(d.this_ns) if d.this_ns else '-':<9}  {d.opcode:<12} {d.name}")
        if any(not e.count_known for e in self.estimates):
            lines.append("+ some kernels run an unknown number of times (counted once)")
        return "\n".join(lines) + "\n"

    def __str__(self) -> str:
        return self.table()

    def _repr_pretty_(self, p, cycle):      # IPython
        p.text(self.table())


# ---------------------------------------------------------------- entry points

def estimate(fn: Any, *args: Any, model: ModelLike = None, name: str | None = None,
             **kwargs: Any) -> Estimate:
    """Predict the runtime of a JAX function on these arguments.

    fn: a jax.jit-wrapped function (lowered with *args and **kwargs, then
    compiled), a Lowered (from .lower(...)), a Compiled (from
    .lower(...).compile(), e.g. with compiler_options) or a plain function
    (wrapped in jax.jit). Arguments may be arrays or jax.ShapeDtypeStruct.
    Compiling uses the backend jax picks for them; nothing of jax's
    configuration is changed. model: a model file, a bundled model's name
    (as predict --model takes it), a loaded model, or None for the default
    one (load_model). name: the program's name (default: the
    function's).
    """
    compiled, default_name = _compiled(fn, args, kwargs)
    text = compiled.as_text()
    if not text:
        raise TpuperfError("this jax backend gives no HLO text for the compiled program")
    return _estimate_text(text, name or default_name, model, "<compiled>",
                          platform=_platform(compiled))


def estimate_hlo(hlo: HloLike, model: ModelLike = None, name: str | None = None,
                 compile: str | None = None, module: str | None = None) -> Estimate:
    """Predict the runtime of an optimized HLO module.

    hlo: HLO text, a serialized HLO proto (bytes), or a path to a file
    (text, zstd or proto) or to an XLA dump directory (give module=REGEX
    when it holds several modules). Input before optimization (StableHLO,
    before_optimizations dumps) raises TpuperfError, or is compiled by
    XLA for `compile` ("cpu", "gpu", "tpu").
    """
    from tpuperf_cli.hlo.dump import decode_hlo, optimized_text, read_hlo

    if isinstance(hlo, bytes):
        source = decode_hlo(hlo, name or "<bytes>")
        default_name = None
    elif isinstance(hlo, str) and ("\n" in hlo or "{" in hlo and not os.path.exists(hlo)):
        source = decode_hlo(hlo.encode(), name or "<text>")
        default_name = None
    else:
        path = os.fspath(hlo)
        if os.path.isdir(path):
            path, default_name = _one_module(path, module, compile is not None)
        else:
            if module is not None:
                raise TpuperfError("module= picks a module of a dump directory; "
                                   f"{path} is not a directory")
            default_name = None
        source = read_hlo(path)
        if default_name is None:
            default_name = _file_program(path, source.text)
    notes: list[str] = []
    text = optimized_text(source, compile, notes.append,
                          compile_hint='pass compile="cpu" (or "gpu", "tpu") to compile it here')
    est = _estimate_text(text, name or default_name, model, source.name, platform=compile)
    est.warnings[:0] = notes
    return est


def compare(programs: Mapping[str, Any] | Iterable[Any], *args: Any, model: ModelLike = None,
            compile: str | None = None, **kwargs: Any) -> Comparison:
    """Rank programs by predicted runtime: the same computation under other
    XLA flags, shapes, dtypes or shardings.

    programs: {name: program} (or a list: named as hlo-split names them), each
    an Estimate, a Compiled or Lowered, a jitted function (called with
    *args, **kwargs), or HLO for estimate_hlo (text, bytes, a path; compile=
    for input before optimization). Returns a Comparison, fastest first;
    print it for the ranking and the kernels that differ most.
    """
    loaded = load_model(model) if not _is_model(model) else model
    named = isinstance(programs, Mapping)
    items = list(programs.items()) if named else [(None, p) for p in programs]
    if not items:
        raise TpuperfError("compare: no programs given")
    estimates = []
    for label, p in items:
        # unnamed: the program's own name (hlo-split's), made unique
        label = str(label) if named else None
        if isinstance(p, Estimate):
            est = Estimate(**{**p.__dict__, "program": label or p.program})
        elif _is_jax_program(p):
            staged = hasattr(p, "as_text")         # Lowered, Compiled: arguments are in
            est = (estimate(p, model=loaded, name=label) if staged else
                   estimate(p, *args, model=loaded, name=label, **kwargs))
        else:
            est = estimate_hlo(p, model=loaded, name=label, compile=compile)
        if not named:
            taken = {e.program for e in estimates}
            if est.program in taken:
                k = 2
                while f"{est.program} ({k})" in taken:
                    k += 1
                est.program = f"{est.program} ({k})"
        estimates.append(est)
    estimates.sort(key=lambda e: e.total_ns)
    return Comparison(estimates)


_MODELS: dict[str, Any] = {}


def load_model(model: ModelLike = None, platform: str | None = None) -> "Model":
    """A loaded model (cached by path): None is the default model (the
    model `tpuperf calibrate` wrote for this machine, else the one bundled
    for this machine's CPU, else the bundled one;
    for a program compiled for an accelerator `platform`, "gpu" or "tpu",
    the newest model calibrated for that platform, else the bundled one of
    that platform, when there is one); a path, or a bundled model's name as
    predict --model takes it (`bundled`, `default-seeds`...)."""
    if _is_model(model):
        return model
    from tpuperf_cli.measure.target import target_platform
    from tpuperf_cli.model.calibrated import default_for_platform, resolve_model
    from tpuperf_cli.model.predict import load_model as _load

    key, why = (os.fspath(model) if model is not None else ""), None
    if key == "default" and not os.path.exists(key):
        key = ""                        # as predict --model default: the default model
    if key:
        key = resolve_model(key)        # a bundled model's name, as the tools take it
    else:
        chosen = default_for_platform(target_platform(platform))
        if chosen:
            key, why = chosen
    if key not in _MODELS:
        _MODELS[key] = _load(key or None)
        if why:
            _MODELS[key].chosen = why
    return _MODELS[key]


# ---------------------------------------------------------------- the pipeline

def estimate_records(records: list[dict], program: str, model: ModelLike = None,
                     warnings: list[str] | None = None, hlo: str = "",
                     platform: str | None = None) -> Estimate:
    """An Estimate from kernel records of one program (hlo-split's):
    featurized and predicted here."""
    from tpuperf_cli.features import featurize_kernel
    from tpuperf_cli.model.predict import predict_records

    notes = warnings if warnings is not None else []
    m = load_model(model, platform)
    for r in records:
        r.update(featurize_kernel(r))
        r["type"] = "graph"
    predicted = list(predict_records(records, m, name=program, warn=notes.append))
    total = sum(r["pred_ns"] * r["count"] for r in predicted)
    rows = [KernelRow(r["kernel"], r["opcode"], r.get("fusion_kind"), int(r["count"]),
                      bool(r["count_known"]), float(r["pred_ns"]),
                      float(r["pred_ns"] * r["count"]),
                      (r["pred_ns"] * r["count"] / total) if total else 0.0, r["fingerprint"],
                      r.get("pred_spread"))
            for r in predicted]
    rows.sort(key=lambda k: (-k.total_ns, k.name))
    est = Estimate(program, float(total), rows, m.name,
                   all(k.count_known for k in rows), platform, hlo, notes)
    _check_target(est, m)
    return est


def _estimate_text(text, program, model, source, platform=None):
    from tpuperf_cli.hlo.parser import parse_module
    from tpuperf_cli.hlo.split import kernel_records

    notes: list[str] = []
    module = parse_module(text, source)
    records = list(kernel_records(module, program=program or module.name, warn=notes.append))
    return estimate_records(records, program or module.name, model, notes, text, platform)


def _check_target(est, model):
    from tpuperf_cli.measure.target import target_platform

    target = model.target or {}
    want = target.get("platform")
    if est.platform and want and target_platform(est.platform) != want:
        est.warnings.append(f"the program was compiled for {est.platform} but model {model.name} "
                            f"was trained on {want} measurements: its figures are for {want}")


# ---------------------------------------------------------------- helpers

def _is_model(model):
    return model is not None and hasattr(model, "predict_examples")


def _is_jax_program(p):
    return not isinstance(p, (str, bytes, os.PathLike)) and (
        hasattr(p, "as_text") or hasattr(p, "lower") or callable(p))


def _compiled(fn, args, kwargs):
    """(jax Compiled, default name) for a jitted function, Lowered, Compiled
    or plain function."""
    if hasattr(fn, "as_text") and hasattr(fn, "runtime_executable"):   # Compiled
        if args or kwargs:
            raise TpuperfError("estimate: a compiled program takes no arguments")
        return fn, None
    if hasattr(fn, "compile") and hasattr(fn, "as_text"):              # Lowered
        if args or kwargs:
            raise TpuperfError("estimate: a lowered program takes no arguments")
        return fn.compile(), None
    if not callable(fn):
        raise TpuperfError(f"estimate: expected a jitted function, a Lowered or a Compiled, "
                           f"got {type(fn).__name__}")
    name = getattr(fn, "__name__", None)
    if not hasattr(fn, "lower"):
        import jax

        fn = jax.jit(fn)
    return fn.lower(*args, **kwargs).compile(), name


def _platform(compiled):
    try:
        return compiled.runtime_executable().client.platform
    except Exception:       # other backends or jax versions: unknown
        return None


def _one_module(directory, pattern, unoptimized):
    import re

    from tpuperf_cli.hlo.dump import scan_dump

    regex = re.compile(pattern) if pattern is not None else None
    modules, _ = scan_dump(directory, regex, unoptimized=unoptimized)
    if len(modules) != 1:
        names = ", ".join(m.program for m in modules[:8]) + (", ..." if len(modules) > 8 else "")
        what = f"{len(modules)} modules" + (f" match {pattern!r}" if pattern else "")
        raise TpuperfError(f"{directory}: {what}; pick one with module=REGEX"
                           + (f" ({names})" if modules else ""))
    return modules[0].path, modules[0].program


def _file_program(path, text):
    """The program name hlo-split gives a file: module_NNNN.NAME for XLA's
    dump files, else the file name without its extension."""
    from tpuperf_cli.hlo.dump import file_program, module_name, program_name

    base = os.path.basename(path)
    if base.startswith("module_") and "_optimizations." in base:
        return program_name(base, module_name(text)) or base
    return file_program(base) or None


def _opname(k):
    return f"fusion/{k.fusion_kind[1:]}" if k.opcode == "fusion" and k.fusion_kind else k.opcode


def _signed(ns):
    from tpuperf_cli.score import _time

    return ("+" if ns >= 0 else "-") + _time(abs(ns))


def _pandas():
    try:
        import pandas
    except ImportError:     # pragma: no cover - pandas is a dependency
        raise TpuperfError("to_pandas() needs pandas (pip install pandas)") from None
    return pandas
