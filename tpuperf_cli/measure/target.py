"""What machine a measurement was taken on: the record's `target`.

A cost model describes one machine, so the target must tell machines apart:
two generations of a CPU that /proc/cpuinfo calls by the same bare name
("AMD EPYC" on many cloud VMs) differ in vendor family, model, stepping and
cache sizes, and so must differ in their target (and cache key). On an
accelerator the device kind and the platform version (driver, runtime)
play that part.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
from typing import Any

# Bumped when the way of timing changes, so that values timed the old way
# are neither reused from the cache nor mixed into one corpus with new ones.
# 3: the kernel runs in a loop inside one executable (hlo/compilable.py),
#    samples interleaved across kernels, preempted samples dropped.
# 4: as 3, with up to 16 kernels compiled into one executable (a loop each).
# 5: as 4, the runtime the fastest sample rather than the lower quartile,
#    less the fastest of calls with no trips, sampled beside every sample
#    (device.py). The events clock (an accelerator's own) is still 4.
METHOD = 5
EVENTS_METHOD = 4


def method_of(clock: str) -> int:
    """The method number of measurements taken with `clock`."""
    return EVENTS_METHOD if clock == "events" else METHOD


def cpu_identity() -> dict[str, str]:
    """Vendor, family, model, stepping and name of this machine's CPU, from
    /proc/cpuinfo (Linux; elsewhere what `platform` knows)."""
    fields = {"vendor_id": "vendor", "cpu family": "family", "model": "model",
              "stepping": "stepping", "model name": "name"}
    found = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if not line.strip():
                    break  # the first processor is enough
                key, _, value = line.partition(":")
                key = key.strip()
                if key in fields:
                    found[fields[key]] = value.strip()
    except OSError:
        pass
    if "name" not in found:
        found["name"] = platform.processor() or platform.machine() or "unknown cpu"
    return found


def cpu_caches() -> dict[str, str]:
    """Cache sizes of CPU 0 by level, e.g. {"L1d": "32K", "L2": "1024K",
    "L3": "32768K"} (Linux sysfs; {} elsewhere)."""
    base = "/sys/devices/system/cpu/cpu0/cache"
    out = {}
    try:
        entries = sorted(os.listdir(base))
    except OSError:
        return out
    for entry in entries:
        if not entry.startswith("index"):
            continue
        try:
            level = _read(f"{base}/{entry}/level")
            kind = _read(f"{base}/{entry}/type")
            size = _read(f"{base}/{entry}/size")
        except OSError:
            continue
        suffix = {"Data": "d", "Instruction": "i"}.get(kind, "")
        out[f"L{level}{suffix}"] = size
    return out


def _read(path):
    with open(path) as f:
        return f.read().strip()


def usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count()


def online_cpus() -> int:
    return os.cpu_count()


def target_platform(platform: str | None) -> str | None:
    """A target's platform ("cpu", "gpu", "tpu") for jax's name of one
    ("cuda" and "rocm" are GPUs)."""
    return {"cuda": "gpu", "rocm": "gpu"}.get(platform, platform)


def describe(device: Any, clock: str) -> dict:
    """The target map for a jax device, timed with `clock`."""
    import jax
    import jaxlib

    kind = target_platform(device.platform)
    target = {
        "platform": kind,
        "device_kind": str(device.device_kind),
        "jax": jax.__version__,
        "jaxlib": jaxlib.__version__,
        "method": method_of(clock),
    }
    if kind == "cpu":
        cpu = cpu_identity()
        target["chip"] = cpu.pop("name")
        target["cpu"] = cpu
        target["caches"] = cpu_caches()
        target["cpu_count"] = usable_cpus()
        target["cores"] = online_cpus()
    else:
        target["chip"] = str(device.device_kind)
    target["clock"] = clock
    try:
        target["platform_version"] = str(device.client.platform_version)
    except Exception:  # pragma: no cover - depends on the plugin
        pass
    return target


def target_key(target: dict) -> str:
    """A short stable key for a target map (the cache's second key)."""
    blob = json.dumps(target, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def same_machine(a: dict, b: dict) -> list[str]:
    """The fields in which two targets differ as machines (not as ways of
    timing): [] when they describe the same kind of machine."""
    keys = ("platform", "device_kind", "chip", "cpu", "caches", "cpu_count", "cores",
            "platform_version", "jax", "jaxlib")
    return [k for k in keys if a.get(k) != b.get(k)]
