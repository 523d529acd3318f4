"""Real TPU tile-tuning data as JSON -> kernel records, one per configuration.

The format (as in tpu_graphs' test data):

    [ {"kernel_fingerprint": int,
       "hlo": "HloModule ...\\n ... ENTRY ... ROOT %fusion = ... fusion(...)",
       "configs": [ {"tile": {"kernel_bounds": [...], "output_bounds": [...],
                              "input_bounds": [...]},     # absent = empty
                     "runtime_ns": int, "is_default": bool}, ... ]},
      ... ]

Each kernel's "hlo" is a whole HloModule whose ENTRY computation runs the one
tuned kernel (its ROOT: a fusion, a copy, a convolution, ...). That is what
the brief calls a kernel's standalone module, so it goes into the record as
given; the ENTRY root gives opcode, fusion_kind and computation.
"""

import json
import os
import re

from tpuperf_cli.errors import ParseError, TpuperfError
from tpuperf_cli.stream import new_record
from tpuperf_cli.tile import BOUND_KEYS

SOURCE = "tuning-json"


class TuningDataError(TpuperfError):
    """Tuning data that does not have the documented shape."""


def load(path):
    """The parsed JSON of a tuning-data file (a list of kernels)."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise TpuperfError(f"{path}: {e.strerror}") from None
    try:
        data = json.loads(raw)
    except UnicodeDecodeError as e:
        raise ParseError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    except json.JSONDecodeError as e:
        raise ParseError(f"{path}:{e.lineno}:{e.colno}: not valid JSON: {e.msg}") from None
    if isinstance(data, dict) and isinstance(data.get("kernels"), list):
        data = data["kernels"]
    if not isinstance(data, list):
        raise TuningDataError(f"{path}: expected a JSON list of kernels at the top level, "
                              f"got {type(data).__name__}")
    return data


# ---------------------------------------------------------------- checks

def _where(path, k, kernel=None):
    fp = f" (kernel_fingerprint {kernel['kernel_fingerprint']})" \
        if isinstance(kernel, dict) and "kernel_fingerprint" in kernel else ""
    return f"{path}: kernel {k}{fp}"


def _bounds(value, where, key):
    if value is None:
        return []
    if not isinstance(value, list) or not all(
            isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in value):
        raise TuningDataError(f"{where}: key {key!r} must be a list of non-negative "
                              f"integers, got {value!r}")
    return list(value)


def check_config(config, where):
    """(config dict, runtime_ns float, is_default bool) of one config entry."""
    if not isinstance(config, dict):
        raise TuningDataError(f"{where}: expected an object, got {type(config).__name__}")
    if "runtime_ns" not in config:
        raise TuningDataError(f"{where}: missing key 'runtime_ns'")
    runtime = config["runtime_ns"]
    if isinstance(runtime, bool) or not isinstance(runtime, (int, float)) or not runtime > 0:
        raise TuningDataError(f"{where}: key 'runtime_ns' must be a positive number, "
                              f"got {runtime!r}")
    tile = config.get("tile", {})
    if not isinstance(tile, dict):
        raise TuningDataError(f"{where}: key 'tile' must be an object, got {type(tile).__name__}")
    unknown = sorted(set(tile) - set(BOUND_KEYS))
    if unknown:
        raise TuningDataError(f"{where}: key 'tile' has unknown bounds {', '.join(unknown)} "
                              f"(known: {', '.join(BOUND_KEYS)})")
    bounds = {key: _bounds(tile.get(key), where, f"tile.{key}") for key in BOUND_KEYS}
    is_default = config.get("is_default", False)
    if not isinstance(is_default, bool):
        raise TuningDataError(f"{where}: key 'is_default' must be true or false, "
                              f"got {is_default!r}")
    return bounds, float(runtime), is_default


_MODULE = re.compile(r"^\s*HloModule\s+([^\s,]+)", re.M)
_ENTRY = re.compile(r"^\s*ENTRY\s+%?([^\s(]+)", re.M)
_ROOT = re.compile(r"^\s*ROOT\s+%?([^\s=]+)\s*=\s*(.*)$", re.M)
_OPCODE = re.compile(r"(?:^|\s)([a-z][a-z0-9\-]*)\(")
_KIND = re.compile(r"\bkind=(k[A-Za-z]+)")


def describe_module(text, where):
    """What the record says about the kernel, from its module text:
    {"computation", "opcode", "fusion_kind", "root"}.

    Uses the HLO parser when present (it also validates the text), else a
    scan of the ENTRY computation's ROOT line."""
    if not isinstance(text, str) or not text.strip():
        raise TuningDataError(f"{where}: key 'hlo' must be non-empty HLO text")
    if not _MODULE.search(text):
        raise TuningDataError(f"{where}: key 'hlo' is not a whole HloModule "
                              f"(no 'HloModule' header)")
    entry = _ENTRY.search(text)
    if not entry:
        raise TuningDataError(f"{where}: key 'hlo' has no ENTRY computation; "
                              f"a whole module with the kernel as its ENTRY root is needed")
    root = _ROOT.search(text, entry.end())
    if not root:
        raise TuningDataError(f"{where}: key 'hlo': the ENTRY computation has no ROOT instruction")
    rhs = root.group(2)
    op = _OPCODE.search(rhs)
    if not op:
        raise TuningDataError(f"{where}: key 'hlo': cannot read the ROOT instruction's opcode")
    opcode = op.group(1)
    kind = _KIND.search(rhs) if opcode == "fusion" else None
    return {"computation": entry.group(1), "opcode": opcode,
            "fusion_kind": kind.group(1) if kind else None, "root": root.group(1)}


_METADATA = re.compile(r",?\s*metadata=\{[^{}]*\}")
_DEFINED = re.compile(r"^\s*(?:ROOT\s+|ENTRY\s+)?%?([\w.\-]+)\s*(?:=|\()", re.M)
_PARAM = re.compile(r"[(,]\s*([\w.\-]+):\s")
_HEADER = re.compile(r"^\s*HloModule\s+[^\s,]+", re.M)


def fingerprint(text):
    """Hex digest of the module text with metadata dropped and every name
    (computations, instructions, parameters) renumbered in order of first
    definition, so identical kernels match whatever they are called."""
    import hashlib

    text = _HEADER.sub("HloModule m", _METADATA.sub("", text))
    names = {}
    for m in _DEFINED.finditer(text):
        names.setdefault(m.group(1), f"n{len(names)}")
    for m in _PARAM.finditer(text):
        names.setdefault(m.group(1), f"n{len(names)}")
    names.pop("HloModule", None)
    if names:
        pattern = re.compile(r"(?<![\w.\-])%?(" + "|".join(
            re.escape(n) for n in sorted(names, key=len, reverse=True)) + r")(?![\w.\-])")
        text = pattern.sub(lambda m: names[m.group(1)], text)
    text = "\n".join(line.strip() for line in text.splitlines() if line.strip())
    return hashlib.sha256(text.encode()).hexdigest()[:32]


# ---------------------------------------------------------------- records

def kernel_name(fingerprint_value):
    """kernel_<16 hex digits> for the file's integer fingerprint."""
    if isinstance(fingerprint_value, int) and not isinstance(fingerprint_value, bool):
        return f"kernel_{fingerprint_value & (2**64 - 1):016x}"
    return f"kernel_{fingerprint_value}"


def records(path, program=None, device_kind=None):
    """Yield one kernel record per (kernel, configuration) of a tuning file.

    Every kernel is checked whole before any of its records is yielded, so a
    malformed kernel stops the import after the good kernels before it.
    """
    data = load(path)
    program = program or os.path.splitext(os.path.basename(path))[0]
    target = {"platform": "tpu", "device_kind": device_kind, "source": SOURCE,
              "file": os.path.basename(path)}
    seen = {}
    for k, kernel in enumerate(data):
        where = _where(path, k, kernel)
        if not isinstance(kernel, dict):
            raise TuningDataError(f"{where}: expected an object, got {type(kernel).__name__}")
        for key in ("kernel_fingerprint", "hlo", "configs"):
            if key not in kernel:
                raise TuningDataError(f"{where}: missing key {key!r}")
        fp_value = kernel["kernel_fingerprint"]
        if isinstance(fp_value, bool) or not isinstance(fp_value, (int, str)):
            raise TuningDataError(f"{where}: key 'kernel_fingerprint' must be an integer, "
                                  f"got {fp_value!r}")
        info = describe_module(kernel["hlo"], where)
        configs = kernel["configs"]
        if not isinstance(configs, list) or not configs:
            raise TuningDataError(f"{where}: key 'configs' must be a non-empty list")
        checked = [check_config(c, f"{where}: configs[{j}]") for j, c in enumerate(configs)]
        defaults = sum(d for _, _, d in checked)
        if defaults > 1:
            raise TuningDataError(f"{where}: key 'configs': {defaults} configurations "
                                  f"are marked is_default (at most one may be)")
        name = kernel_name(fp_value)
        if name in seen:  # the same kernel twice in a file: keep both, apart
            seen[name] += 1
            name = f"{name}#{seen[name]}"
        else:
            seen[name] = 1
        digest = fingerprint(kernel["hlo"])
        for j, (bounds, runtime, is_default) in enumerate(checked):
            yield new_record(
                "kernel",
                program=program,
                kernel=name,
                index=k,
                count=1,
                count_known=False,
                hlo=kernel["hlo"],
                opcode=info["opcode"],
                fusion_kind=info["fusion_kind"],
                fingerprint=digest,
                computation=info["computation"],
                config=bounds,
                config_index=j,
                is_default=is_default,
                runtime_ns=runtime,
                target=dict(target),
                kernel_fingerprint=fp_value,
            )
