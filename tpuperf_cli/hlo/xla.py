"""The few jaxlib entry points tpuperf uses to read HLO, across jaxlib versions.

The pinned stack is jax/jaxlib 0.6.2, where XLA's HLO module class and its
text parser live in jaxlib's `_xla` extension. Accelerator hosts often have
their own, newer jax (a GPU image with jax 0.11 and CUDA 13, say), where
they moved to `xla_client.hlo`. The measuring tools (hlo-split, featurize,
measure) run on either: each function here looks in the new place, then
the old.
"""

from __future__ import annotations

from typing import Any


def _client():
    from jax._src.lib import xla_client as xc

    return xc


def _hlo_namespace():
    xc = _client()
    new = getattr(xc, "hlo", None)     # jaxlib >= 0.8
    if new is not None and hasattr(new, "hlo_module_from_text"):
        return new
    return xc._xla                      # jaxlib 0.6


def module_from_text(text: str) -> Any:
    """XLA's HloModule of HLO text; raises XLA's error for text it rejects."""
    return _hlo_namespace().hlo_module_from_text(text)


def module_from_proto(data: bytes) -> Any:
    """XLA's HloModule of a serialized HloModuleProto."""
    return _hlo_namespace().HloModule.from_serialized_hlo_module_proto(data)


def computation_of_text(text: str) -> Any:
    """An XlaComputation of HLO text (program_shape() gives its parameters)."""
    xc = _client()
    return xc.XlaComputation(module_from_text(text).as_serialized_hlo_module_proto())


def mlir_of(computation: Any) -> Any:
    """The StableHLO module of an XlaComputation, as jaxlib compiles it."""
    return _client()._xla.mlir.xla_computation_to_mlir_module(computation)
