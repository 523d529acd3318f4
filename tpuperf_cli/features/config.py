"""Tile-configuration features in the TpuGraphs layout (24 float32).

    0-7    kernel_bounds 0..5, sum, product
    8-15   output_bounds 0..5, sum, product
    16-23  input_bounds 0..5, sum, product

As tpu_graphs' FeaturizeTileSizeConfig writes them: entries past a list's
length are 0, and an empty (or absent) list has sum 0 and product 0. A record
without a tile configuration gets 24 zeros.
"""

from tpuperf_cli.records import BOUND_KEYS, BOUND_SLOTS, CONFIG_FEATURES

CONFIG_FEATURE_NAMES = tuple(
    f"{key}_{s}" for key in BOUND_KEYS for s in (*range(BOUND_SLOTS), "sum", "product"))


def config_features(config: dict | None) -> list[float]:
    """24 floats for a record's "config" map (None or {} -> zeros).

    Raises ValueError when a bound list is not a list of integers.
    """
    out = [0.0] * CONFIG_FEATURES
    if not config:
        return out
    if not isinstance(config, dict):
        raise ValueError(f"field 'config' must be a map of bound lists, got {type(config).__name__}")
    for g, key in enumerate(BOUND_KEYS):
        values = config.get(key) or []
        if not isinstance(values, (list, tuple)) or not all(
                isinstance(v, int) and not isinstance(v, bool) for v in values):
            raise ValueError(f"config.{key} must be a list of integers, got {values!r}")
        base = (BOUND_SLOTS + 2) * g
        for i, v in enumerate(values[:BOUND_SLOTS]):
            out[base + i] = float(v)
        if values:
            p = 1
            for v in values:
                p *= v
            out[base + BOUND_SLOTS] = float(sum(values))
            out[base + BOUND_SLOTS + 1] = float(p)
    return out
