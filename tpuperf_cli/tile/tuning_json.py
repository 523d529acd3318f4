"""Real TPU tile-tuning data as JSON -> kernel records, one per configuration.

The format (as in tpu_graphs' test data):

    [ {"kernel_fingerprint": int,
       "hlo": "HloModule ...\\n ... ENTRY ... ROOT %fusion = ... fusion(...)",
       "configs": [ {"tile": {"kernel_bounds": [...], "output_bounds": [...],
                              "input_bounds": [...]},     # absent = empty
                     "runtime_ns": int, "is_default": bool}, ... ]},
      ... ]

A configuration whose run failed (runtime_ns null or absent) or whose tile
is absent (no "tile", or "tile": null) is a failed configuration: it is
skipped and counted, never given a runtime; a file where every
configuration failed is an error.

Each kernel's "hlo" is a whole HloModule whose ENTRY computation runs the one
tuned kernel (its ROOT: a fusion, a copy, a convolution, ...). That is a
kernel's standalone module, as hlo-split writes them, so it goes into the record as
given; the ENTRY root gives opcode, fusion_kind and computation.
"""

import json
import os
from collections import Counter
from collections.abc import Iterator
from typing import Any

from tpuperf_cli.errors import ParseError, TpuperfError, read_file
from tpuperf_cli.records import BOUND_KEYS, KERNEL_RECORD, Record, error_text, new_record

SOURCE = "tuning-json"


class TuningDataError(TpuperfError):
    """Tuning data that does not have the documented shape."""


def load(path: str) -> list:
    """The parsed JSON of a tuning-data file (a list of kernels)."""
    raw = read_file(path)
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

def _kernel_location(path, k, kernel=None):
    fp = f" (kernel_fingerprint {kernel['kernel_fingerprint']})" \
        if isinstance(kernel, dict) and "kernel_fingerprint" in kernel else ""
    return f"{path}: kernel {k}{fp}"


# the integers a record stream holds (msgpack's): a bound past 64 bits is a
# damaged file, not a tile
MAX_BOUND = 2 ** 63 - 1


def _bounds(value, where, key):
    if value is None:
        return []
    if not isinstance(value, list) or not all(
            isinstance(x, int) and not isinstance(x, bool) and 0 <= x <= MAX_BOUND for x in value):
        raise TuningDataError(f"{where}: key {key!r} must be a list of non-negative "
                              f"integers below 2**63, got {error_text(value)}")
    return list(value)


FAILED_NO_RUNTIME = "runtime_ns null"
FAILED_NO_TILE = "tile absent"


def check_config(config: Any, where: str) -> tuple[dict | None, float | None, bool, str | None]:
    """(config dict, runtime_ns float, is_default bool, failure) of one
    config entry; for a failed configuration (runtime_ns null or absent, or
    tile absent) failure says which, and the runtime (or bounds) is None.
    Values of the wrong type are a TuningDataError all the same."""
    if not isinstance(config, dict):
        raise TuningDataError(f"{where}: expected an object, got {type(config).__name__}")
    runtime = config.get("runtime_ns")
    if runtime is not None and (isinstance(runtime, bool) or not isinstance(runtime, (int, float))
                                or not 0 < runtime < float("inf")):
        raise TuningDataError(f"{where}: key 'runtime_ns' must be a positive number "
                              f"(or null for a failed run), got {runtime!r}")
    is_default = config.get("is_default", False)
    if not isinstance(is_default, bool):
        raise TuningDataError(f"{where}: key 'is_default' must be true or false, "
                              f"got {is_default!r}")
    tile = config.get("tile")
    if tile is None:
        return None, None if runtime is None else float(runtime), is_default, FAILED_NO_TILE
    if not isinstance(tile, dict):
        raise TuningDataError(f"{where}: key 'tile' must be an object, got {type(tile).__name__}")
    unknown = sorted(set(tile) - set(BOUND_KEYS))
    if unknown:
        raise TuningDataError(f"{where}: key 'tile' has unknown bounds {', '.join(map(repr, unknown))} "
                              f"(known: {', '.join(BOUND_KEYS)})")
    bounds = {key: _bounds(tile.get(key), where, f"tile.{key}") for key in BOUND_KEYS}
    if runtime is None:
        return bounds, None, is_default, FAILED_NO_RUNTIME
    return bounds, float(runtime), is_default, None


def describe_module(text: Any, where: str) -> dict:
    """What the records say about the kernel, from its module text:
    {"computation", "opcode", "fusion_kind", "fingerprint"}.

    The text is parsed (HLO that does not parse is a ParseError naming the
    file, kernel and line); the kernel is the ENTRY computation's ROOT, and
    opcode, fusion_kind and fingerprint are what hlo-split gives it, so the
    same kernel split from a whole program has the same fingerprint."""
    from tpuperf_cli.hlo import split
    from tpuperf_cli.hlo.parser import parse_module

    if not isinstance(text, str) or not text.strip():
        raise TuningDataError(f"{where}: key 'hlo' must be non-empty HLO text")
    if not text.lstrip().startswith("HloModule"):
        raise TuningDataError(f"{where}: key 'hlo' is not a whole HloModule (no 'HloModule' "
                              f"header); a module with the kernel as its ENTRY root is needed")
    module = parse_module(text, f"{where}: hlo")
    if module.entry is None:
        raise TuningDataError(f"{where}: key 'hlo' has no ENTRY computation; a whole module "
                              f"with the kernel as its ENTRY root is needed")
    root = module.entry.root
    kernel = next((k for k in split.find_kernels(module)
                   if k.instruction is root and k.computation is module.entry), None)
    if kernel is None:
        raise TuningDataError(f"{where}: key 'hlo': the ENTRY root '{root.name}' "
                              f"({root.opcode}) is not a kernel (an op that does work)")
    return {"computation": module.entry.name, "opcode": kernel.opcode,
            "fusion_kind": kernel.fusion_kind, "fingerprint": split.fingerprint(module, kernel)}


# ---------------------------------------------------------------- records

def kernel_name(fingerprint_value: int | str) -> str:
    """kernel_<16 hex digits> for the file's integer fingerprint."""
    if isinstance(fingerprint_value, int) and not isinstance(fingerprint_value, bool):
        return f"kernel_{fingerprint_value & (2**64 - 1):016x}"
    return f"kernel_{fingerprint_value}"


def records(path: str, program: str | None = None, device_kind: str | None = None,
            seen: dict[str, int] | None = None,
            failed: Counter | None = None) -> Iterator[Record]:
    """Yield one kernel record per (kernel, good configuration) of a tuning
    file.

    Every kernel is checked whole before any of its records is yielded, so a
    malformed kernel stops the import after the good kernels before it.
    Failed configurations are left out and counted in `failed` by why
    ("runtime_ns null", "tile absent"); a file with no good configuration
    at all is a TuningDataError.
    seen: {kernel name: times seen} shared by files imported into one
    program, so a kernel repeated there stays apart (name#2, ...).
    """
    failed = Counter() if failed is None else failed
    good = 0
    data = load(path)
    program = program or os.path.splitext(os.path.basename(path))[0]
    target = {"platform": "tpu", "device_kind": device_kind, "source": SOURCE,
              "file": os.path.basename(path)}
    seen = {} if seen is None else seen
    for k, kernel in enumerate(data):
        where = _kernel_location(path, k, kernel)
        if not isinstance(kernel, dict):
            raise TuningDataError(f"{where}: expected an object, got {type(kernel).__name__}")
        for key in ("kernel_fingerprint", "hlo", "configs"):
            if key not in kernel:
                raise TuningDataError(f"{where}: missing key {key!r}")
        fp_value = kernel["kernel_fingerprint"]
        if isinstance(fp_value, bool) or not isinstance(fp_value, (int, str)) \
                or (isinstance(fp_value, int) and not -2 ** 63 <= fp_value < 2 ** 64):
            raise TuningDataError(f"{where}: key 'kernel_fingerprint' must be a 64-bit integer "
                                  f"(or a string), got {error_text(fp_value)}")
        info = describe_module(kernel["hlo"], where)
        configs = kernel["configs"]
        if not isinstance(configs, list) or not configs:
            raise TuningDataError(f"{where}: key 'configs' must be a non-empty list")
        checked = [check_config(c, f"{where}: configs[{j}]") for j, c in enumerate(configs)]
        defaults = sum(d for _, _, d, _ in checked)
        if defaults > 1:
            raise TuningDataError(f"{where}: key 'configs': {defaults} configurations "
                                  f"are marked is_default (at most one may be)")
        name = kernel_name(fp_value)
        if name in seen:  # the same kernel twice in a file: keep both, apart
            seen[name] += 1
            name = f"{name}#{seen[name]}"
        else:
            seen[name] = 1
        for j, (bounds, runtime, is_default, failure) in enumerate(checked):
            if failure is not None:
                failed[failure] += 1
                continue
            good += 1
            yield new_record(
                KERNEL_RECORD,
                program=program,
                kernel=name,
                index=k,
                count=1,
                count_known=False,
                hlo=kernel["hlo"],
                opcode=info["opcode"],
                fusion_kind=info["fusion_kind"],
                fingerprint=info["fingerprint"],
                computation=info["computation"],
                config=bounds,
                config_index=j,
                is_default=is_default,
                runtime_ns=runtime,
                target=dict(target),
                kernel_fingerprint=fp_value,
            )
    if not good and data:
        reasons = ", ".join(f"{n} {why}" for why, n in sorted(failed.items()))
        raise TuningDataError(f"{path}: no configuration has a runtime and a tile "
                              f"({reasons}): nothing to import")
