"""tpuperf: a learned performance model for XLA programs, as Unix tools.

The Python API (tpuperf_cli.api), loaded on first use so that importing
tpuperf_cli stays cheap (no torch, DGL or jax):

    import tpuperf_cli as tp
    est = tp.estimate(jax.jit(f), *args)      # or tp.estimate_hlo("prog.hlo")
    tp.compare({"a": compiled_a, "b": "b.hlo"})
"""

from typing import TYPE_CHECKING

__version__ = "0.1.0"
SCHEMA_VERSION = 1

_API = ("estimate", "estimate_hlo", "compare", "load_model", "Estimate", "KernelRow",
        "Comparison", "KernelDiff")
__all__ = ["__version__", "SCHEMA_VERSION", "estimate", "estimate_hlo", "compare", "load_model",
           "Estimate", "KernelRow", "Comparison", "KernelDiff"]

if TYPE_CHECKING:           # pragma: no cover - for type checkers and IDEs
    from tpuperf_cli.api import Comparison, Estimate, KernelDiff, KernelRow, compare, estimate, estimate_hlo, load_model


def __getattr__(name):
    if name in _API:
        from tpuperf_cli import api

        return getattr(api, name)
    raise AttributeError(f"module 'tpuperf_cli' has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + list(_API))
