"""Calibrated models in the user's data directory, and which model is the default.

`tpuperf calibrate` writes a model for the machine it ran on to
$XDG_DATA_HOME/tpuperf/models/ (default ~/.local/share/tpuperf/models/),
named by its target, with a small JSON file beside it that holds the target,
so finding the model of a target reads no model file (and imports no torch).

The default model (predict without --model, `--model default`) is the
calibrated model whose target is that of the records (records.target_identity),
or, for records not measured, that of this machine as `measure` would
describe it with its default settings (--cpus 1, the process clock); else
a model bundled for that target (tpuperf_cli/data/NAME.pt with its
NAME.target.json: the model of an NVIDIA H200, and of an AMD EPYC family 26
model 2's CPU), or for another device
of their accelerator platform (another GPU's records: the H200's model);
else the bundled CPU model, default.pt. Describing this machine reads /proc and
sysfs only: no jax. On a GPU or TPU host the machine cannot be described
without its runtime, so there the default follows measured records only.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import re

from tpuperf_cli.records import target_identity

SIDECAR = ".target.json"


def models_dir() -> str:
    """$XDG_DATA_HOME/tpuperf/models, or ~/.local/share/tpuperf/models."""
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return os.path.join(base, "tpuperf", "models")


def machine_target() -> dict:
    """This machine's CPU target as `measure` writes it with its defaults
    (--cpus 1, so the process clock), in the fields that tell targets
    apart (records.TARGET_KEYS); no jax imported."""
    from tpuperf_cli.measure.target import cpu_caches, cpu_identity, method_of

    cpu = cpu_identity()
    return {"platform": "cpu", "device_kind": "cpu", "chip": cpu.pop("name"), "cpu": cpu,
            "caches": cpu_caches(), "cpu_count": 1, "clock": "process", "method": method_of("process")}


def target_slug(target: dict) -> str:
    """A file name for a target: platform, chip and a hash of its identity,
    e.g. cpu-amd-epyc-3f9a0c1d."""
    chip = re.sub(r"[^a-z0-9]+", "-", str(target.get("chip", "")).lower()).strip("-")[:40]
    digest = hashlib.sha256(repr(target_identity(target)).encode()).hexdigest()[:8]
    return "-".join(p for p in (str(target.get("platform", "")), chip, digest) if p)


def model_path_for(target: dict, directory: str | None = None) -> str:
    """Where calibrate writes the model of a target by default."""
    return os.path.join(directory or models_dir(), target_slug(target) + ".pt")


def write_sidecar(model_path: str, target: dict, name: str) -> str:
    """Write the JSON beside a model file that lets find_calibrated see its
    target without loading it; returns its path."""
    path = model_path[:-3] + SIDECAR if model_path.endswith(".pt") else model_path + SIDECAR
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"model": os.path.basename(model_path), "name": name, "target": target}, f,
                  indent=1, sort_keys=True, default=str)
    os.replace(tmp, path)
    return path


def _models(directory: str):
    """(target, model path) of each model in `directory` with a sidecar,
    in the sidecars' name order; a stray or half-written file is no model."""
    for side in sorted(glob.glob(os.path.join(directory, "*" + SIDECAR))):
        try:
            with open(side) as f:
                d = json.load(f)
            model = os.path.join(os.path.dirname(side), d["model"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if isinstance(d.get("target"), dict) and os.path.exists(model):
            yield d["target"], model


def _newest(models) -> str | None:
    """The most recently written of the model paths, None for none (a file
    gone since it was listed is left out)."""
    found = []
    for model in models:
        try:
            found.append((os.path.getmtime(model), model))
        except OSError:
            continue
    return max(found)[1] if found else None


def find_calibrated(target: dict | None, directory: str | None = None) -> str | None:
    """The newest calibrated model in the models directory whose target is
    `target` (by records.target_identity), or None."""
    return _newest_for(target, _models(directory or models_dir()))


def _newest_for(target: dict | None, models) -> str | None:
    """The newest of the (target, model path) pairs whose target is `target`
    (by records.target_identity), or None."""
    want = target_identity(target)
    if want is None:
        return None
    return _newest(model for their, model in models if target_identity(their) == want)


def bundled_dir() -> str:
    """Where the bundled models are (tpuperf_cli/data)."""
    from tpuperf_cli.model import default_model_path

    return os.path.dirname(default_model_path())


def bundled_model(name: str) -> str | None:
    """The bundled model file named `name` (gpu-nvidia-h200 or
    gpu-nvidia-h200.pt), or None."""
    stem = name[:-3] if name.endswith(".pt") else name
    if not stem or os.sep in stem or "/" in stem:
        return None
    path = os.path.join(bundled_dir(), stem + ".pt")
    return path if os.path.isfile(path) else None


def resolve_model(path: str) -> str:
    """A model named by the user as a path: `default` and `bundled` are the
    bundled model, and the name of another bundled model (default-seeds,
    gpu-nvidia-h200, cpu-amd-epyc-26-2) is that model (unless a file of that
    name is in the working directory)."""
    if os.path.exists(path):
        return path
    if path in ("default", "bundled"):
        from tpuperf_cli.model import default_model_path

        return default_model_path()
    return bundled_model(path) or path


def this_machine() -> dict | None:
    """machine_target(), or None where this machine cannot be described."""
    try:
        return machine_target()
    except Exception:       # pragma: no cover - an odd /proc; the bundled models still work
        return None


def bundled_for(target: dict | None) -> str | None:
    """The path of the model bundled for exactly this target (by
    records.target_identity; e.g. cpu-amd-epyc-26-2.pt), or None."""
    return find_calibrated(target, bundled_dir())


def _bundled_for_platform(platform) -> tuple[str, dict] | None:
    """(path, target) of the first bundled model of an accelerator platform."""
    if platform in (None, "cpu"):
        return None
    return next(((model, target) for target, model in _models(bundled_dir())
                 if target.get("platform") == platform), None)


def bundled_of_platform(platform) -> tuple[str, str] | None:
    """(path, why) of a bundled model of another device of the records'
    accelerator platform (an H100's records and the H200's model): nearer
    to them than the CPU model. None on CPU, or when there is none."""
    found = _bundled_for_platform(platform)
    if not found:
        return None
    return found[0], (f"bundled for another {platform} ({found[1].get('device_kind')}), "
                      f"the nearest bundled target; calibrate or train one for yours")


def default_for_platform(platform: str | None) -> tuple[str, str] | None:
    """(path, why) of the default model for a program compiled for an
    accelerator `platform` ("gpu", "tpu") with nothing measured: the newest
    model calibrated for that platform on this machine, else the bundled
    one of that platform; None on CPU or when there is neither."""
    if platform in (None, "cpu"):
        return None
    path = _newest(model for target, model in _models(models_dir()) if target.get("platform") == platform)
    if path:
        return path, f"calibrated for {platform} (the program was compiled for {platform})"
    found = _bundled_for_platform(platform)
    if found:
        return found[0], (f"bundled for {platform} ({found[1].get('device_kind')}; the program "
                          f"was compiled for {platform})")
    return None


def default_choice(records_target: dict | None = None) -> tuple[str, str]:
    """(path, why) of the default model: the calibrated model of the records'
    target (or of this machine, for records without one), else the model
    bundled for that target, else the bundled CPU model."""
    from tpuperf_cli.model import default_model_path

    if isinstance(records_target, dict):
        path = find_calibrated(records_target)
        if path:
            return path, "calibrated for the records' target"
        path = bundled_for(records_target)
        if path:
            return path, "bundled for the records' target"
        near = bundled_of_platform(records_target.get("platform"))
        if near:
            return near
        return default_model_path(), "the bundled model; no calibrated model for the records' target"
    calibrated = bool(glob.glob(os.path.join(models_dir(), "*" + SIDECAR)))
    bundled_cpus = [(t, model) for t, model in _models(bundled_dir()) if t.get("platform") == "cpu"]
    if not calibrated and not bundled_cpus:
        # no model of any CPU but default.pt: describing this machine (and
        # importing the measure package for it) would only cost start-up
        return default_model_path(), "the bundled model; no calibrated model for this machine"
    here = this_machine()
    path = find_calibrated(here) if calibrated else None
    if path:
        return path, "calibrated for this machine"
    path = _newest_for(here, bundled_cpus)
    if path:
        return path, "bundled for this machine"
    return default_model_path(), "the bundled model; no calibrated model for this machine"
