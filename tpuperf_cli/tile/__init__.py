"""The tile-size task: data in (real TPU tuning data, TpuGraphs) and the
autotuner's short list out.

A kernel is compiled with several tile configurations; each configuration is
one record (kernel or graph type) carrying the same kernel fields plus:

    config        {"kernel_bounds": [...], "output_bounds": [...],
                   "input_bounds": [...]}   (absent bounds are empty lists)
    config_index  int, the configuration's position among its kernel's
    is_default    bool, the configuration XLA's analytical model chose
                  (when the data says so)
    runtime_ns    float, measured runtime of the kernel with that tiling

Records of one kernel share (program, kernel); the model ranks them
(`tpuperf train --task tile`), `tpuperf select` keeps the K it ranks fastest
and `tpuperf eval` scores the ranking (Tile-Size APE, Kendall's tau, top-K
slowdown).

Modules:
    tuning_json  the JSON tuning-data format (HLO text + configs + runtimes)
    tpugraphs    the TpuGraphs tile collection's .npz files
    select       the K fastest-predicted configurations per kernel

Only numpy is imported here (lazily); no torch, DGL or jax.
"""

from tpuperf_cli.records import KERNEL, PROGRAM, hashable


def group_key(record: dict) -> tuple:
    """The kernel a configuration record belongs to."""
    return (hashable(record.get(PROGRAM)), hashable(record.get(KERNEL)))
