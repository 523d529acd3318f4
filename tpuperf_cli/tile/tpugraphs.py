"""TpuGraphs tile-collection .npz files -> graph records, one per configuration.

A tile file (npz/tile/xla/{train,valid,test}/<tile id>.npz) holds one kernel
(a fused subgraph) and the tile configurations measured for it:

    node_feat                  float32 (n, 140)  node features
    node_opcode                uint8/int (n,)    opcode ids (hlo_opcode.h)
    edge_index                 int (m, 2)        row [u, v]: u consumes v's output
    config_feat                float32 (c, 24)   tile config features
    config_runtime             int (c,)          measured runtime per config
    config_runtime_normalizers int (c,)          runtime of the default config,
                                                 measured beside config j

TpuGraphs prescribes comparing configurations by
config_runtime / config_runtime_normalizers (it cancels the differences
between the machines that measured them). Our node-feature layout, opcode
numbering and edge convention are TpuGraphs' own, so the arrays go into the
records unchanged (cast to the record dtypes).

The layout collection (node_config_feat, node_config_ids, ...) describes a
whole program with per-node layout choices; it is recognised and refused.
"""

from __future__ import annotations

import hashlib
import os
import re
import zipfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING

from tpuperf_cli.errors import TpuperfError
from tpuperf_cli.records import (
    BOUND_KEYS,
    BOUND_SLOTS,
    CONFIG_FEAT,
    CONFIG_FEATURES,
    EDGE_INDEX,
    GRAPH_RECORD,
    NODE_FEAT,
    NODE_FEATURES,
    NODE_OPCODE,
    Record,
    new_record,
)

if TYPE_CHECKING:
    import numpy as np

SOURCE = "tpugraphs"
# the arrays of a TpuGraphs tile file (its graph arrays carry our records' names)
TILE_KEYS = (NODE_FEAT, NODE_OPCODE, EDGE_INDEX, CONFIG_FEAT, "config_runtime",
             "config_runtime_normalizers")
LAYOUT_KEYS = ("node_config_feat", "node_config_ids", "node_splits")

# How runtime_ns is filled (runtime_norm always holds the prescribed ratio):
#   scaled: ratio x mean normalizer of the file: the same order and the same
#           per-kernel relative differences as the ratio, in nanoseconds
#   ratio:  the ratio itself (1.0 = as fast as the default tiling)
#   raw:    config_runtime as measured, not normalised
RUNTIME_MODES = ("scaled", "ratio", "raw")


class TpuGraphsError(TpuperfError):
    """An .npz file that is not a TpuGraphs tile file."""


def find_files(paths: Iterable[str]) -> list[str]:
    """The .npz files named, directories searched recursively (sorted)."""
    out = []
    for p in paths:
        if os.path.isdir(p):
            found = []
            for root, dirs, files in os.walk(p):
                dirs.sort()
                found += [os.path.join(root, f) for f in sorted(files) if f.endswith(".npz")]
            if not found:
                raise TpuperfError(f"{p}: no .npz files in this directory")
            out += found
        elif os.path.exists(p):
            out.append(p)
        else:
            raise TpuperfError(f"{p}: no such file or directory")
    return out


_TILE_ID = re.compile(r"^(?P<program>.+?)_(?P<hash>-?[0-9a-fA-F]{6,})$")


def split_tile_id(tile_id: str) -> tuple[str, str]:
    """(program, kernel) from a TpuGraphs tile id such as
    `alexnet_train_batch_32_-1bae27a41d70f4dc`: the program is the part
    before the trailing hash, the kernel `kernel_<hash>`. Ids without a hash
    are their own program, kernel `kernel`."""
    m = _TILE_ID.match(tile_id)
    if not m:
        return tile_id, "kernel"
    return m.group("program"), f"kernel_{m.group('hash').lower()}"


def load(path: str) -> dict[str, np.ndarray]:
    """The tile file's arrays, checked: {key: numpy array}."""
    import numpy as np

    try:
        npz = np.load(path, allow_pickle=False)
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as e:
        # numpy takes anything that is neither zip nor .npy for a pickle
        why = "neither a zip archive nor a .npy array" if "pickle" in str(e) else str(e)
        raise TpuGraphsError(f"{path}: not a readable .npz file ({why})") from None
    if not hasattr(npz, "files"):
        raise TpuGraphsError(f"{path}: a single .npy array, not an .npz archive of named arrays")
    with npz:
        keys = set(npz.files)
        layout = sorted(keys & set(LAYOUT_KEYS))
        if layout:
            raise TpuGraphsError(
                f"{path}: a TpuGraphs layout-collection file (keys {', '.join(layout)}): "
                f"not supported yet, only the tile collection can be imported")
        missing = [k for k in TILE_KEYS if k not in keys]
        if missing:
            raise TpuGraphsError(
                f"{path}: missing key {missing[0]!r}" + (f" (and {', '.join(missing[1:])})"
                                                         if missing[1:] else "")
                + f"; a TpuGraphs tile file has {', '.join(TILE_KEYS)}")
        arrays = {}
        for k in TILE_KEYS:
            try:
                _check_declared(npz, k, path)
                arrays[k] = npz[k]
            except (ValueError, OSError, zipfile.BadZipFile, EOFError) as e:
                raise TpuGraphsError(f"{path}: key {k!r}: cannot read the array ({e})") from None
    check(arrays, path)
    return arrays


def _check_declared(npz, key: str, path: str) -> None:
    """Refuse an array whose .npy header declares more than the maximum
    record size, or other than the bytes the archive holds for it, before
    numpy allocates what the header declares."""
    import numpy as np

    from tpuperf_cli.stream import MAX_RECORD_ENV, max_record_bytes

    name = key + ".npy"
    try:
        info = npz.zip.getinfo(name)
    except KeyError:
        return      # numpy's own error names it
    with npz.zip.open(name) as f:
        version = np.lib.format.read_magic(f)
        read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                       else np.lib.format.read_array_header_2_0)
        shape, _, dtype = read_header(f)
        header = f.tell()
    if dtype.hasobject:
        _fail(path, key, "holds Python objects (a pickle), not numbers")
    nbytes = dtype.itemsize
    for d in shape:
        nbytes *= d
    limit = max_record_bytes()
    if nbytes > limit:
        _fail(path, key, f"declares {nbytes} bytes ({list(shape)} of {dtype}), more than the maximum "
                         f"record size ({limit >> 20} MiB; set {MAX_RECORD_ENV} to raise it)")
    if nbytes != info.file_size - header:
        _fail(path, key, f"declares {nbytes} bytes ({list(shape)} of {dtype}) but holds "
                         f"{info.file_size - header}")


def _fail(path, key, what):
    raise TpuGraphsError(f"{path}: key {key!r}: {what}")


def check(a: dict[str, np.ndarray], path: str) -> None:
    """Shapes, dtypes and values as TpuGraphs documents them."""
    import numpy as np

    def numeric(key, kinds="iuf"):
        if a[key].dtype.kind not in kinds:
            what = "integers" if kinds == "iu" else "numbers"
            _fail(path, key, f"expected {what}, got dtype {a[key].dtype}")

    for key in TILE_KEYS:
        numeric(key, "iuf" if key in ("node_feat", "config_feat", "config_runtime",
                                      "config_runtime_normalizers") else "iu")
    nf = a["node_feat"]
    if nf.ndim != 2 or nf.shape[1] != NODE_FEATURES:
        _fail(path, "node_feat", f"expected shape (n, {NODE_FEATURES}), got {nf.shape}")
    n = nf.shape[0]
    if n == 0:
        _fail(path, "node_feat", "the graph has no nodes")
    if a["node_opcode"].shape != (n,):
        _fail(path, "node_opcode", f"expected shape ({n},) to match node_feat, "
                                   f"got {a['node_opcode'].shape}")
    if a["node_opcode"].size and (a["node_opcode"].min() < 0 or a["node_opcode"].max() > 255):
        _fail(path, "node_opcode", "opcode ids must lie in 0..255")
    e = a["edge_index"]
    if e.size == 0:
        a["edge_index"] = e = e.reshape(0, 2)
    if e.ndim != 2 or e.shape[1] != 2:
        _fail(path, "edge_index", f"expected shape (m, 2), got {e.shape}")
    if e.size and (e.min() < 0 or e.max() >= n):
        _fail(path, "edge_index", f"node ids must lie in 0..{n - 1}, "
                                  f"found {int(e.min())}..{int(e.max())}")
    cf = a["config_feat"]
    if cf.ndim != 2 or cf.shape[1] != CONFIG_FEATURES:
        _fail(path, "config_feat", f"expected shape (c, {CONFIG_FEATURES}), got {cf.shape}")
    c = cf.shape[0]
    if c == 0:
        _fail(path, "config_feat", "no configurations")
    for key in ("config_runtime", "config_runtime_normalizers"):
        if a[key].shape != (c,):
            _fail(path, key, f"expected shape ({c},) to match config_feat, got {a[key].shape}")
        if not np.all(np.isfinite(a[key])) or np.any(a[key] <= 0):
            _fail(path, key, "runtimes must be positive and finite")
    if not np.all(np.isfinite(nf)):
        _fail(path, "node_feat", "contains NaN or infinity")
    if not np.all(np.isfinite(cf)):
        _fail(path, "config_feat", "contains NaN or infinity")


def config_from_features(row: Sequence[float]) -> dict[str, list]:
    """The bound lists back from a 24-entry config_feat row.

    Each block is 6 bound entries (0 where the list is shorter), their sum and
    product. Trailing zeros are padding (a tile bound is at least 1); lists
    longer than 6 come back truncated to their first 6."""
    config = {}
    width = BOUND_SLOTS + 2
    for b, key in enumerate(BOUND_KEYS):
        entries = [float(x) for x in row[b * width: b * width + BOUND_SLOTS]]
        while entries and entries[-1] == 0:
            entries.pop()
        config[key] = [int(x) if float(x).is_integer() else x for x in entries]
    return config


def graph_digest(a: dict[str, np.ndarray]) -> str:
    """Hex digest of the graph (nodes, opcodes, edges): equal for identical kernels."""
    import numpy as np

    h = hashlib.sha256()
    for key, dtype in ((NODE_OPCODE, "<i4"), (NODE_FEAT, "<f4"), (EDGE_INDEX, "<i4")):
        h.update(np.ascontiguousarray(a[key], dtype=dtype).tobytes())
    return h.hexdigest()[:32]


def records(path: str, runtime: str = "scaled", max_configs: int | None = None, seed: int = 0,
            index: int = 0) -> Iterator[Record]:
    """Yield one graph record per configuration of a TpuGraphs tile file.

    max_configs keeps a random subset of that many configurations (in file
    order; seeded per file, so reruns agree). index is the kernel's position
    in its program."""
    import numpy as np

    if runtime not in RUNTIME_MODES:
        raise ValueError(f"runtime must be one of {RUNTIME_MODES}")
    a = load(path)
    tile_id = os.path.splitext(os.path.basename(path))[0]
    program, kernel = split_tile_id(tile_id)
    node_feat = a["node_feat"].astype("<f4")
    node_opcode = a["node_opcode"].astype("<i4")
    edge_index = a["edge_index"].astype("<i4")
    config_feat = a["config_feat"].astype("<f4")
    raw = a["config_runtime"].astype(np.float64)
    norm = a["config_runtime_normalizers"].astype(np.float64)
    ratio = raw / norm
    scale = float(norm.mean())
    chosen = np.arange(len(raw))
    if max_configs is not None and max_configs < len(raw):
        digest = hashlib.sha256(f"{seed}:{tile_id}".encode()).digest()
        rng = np.random.default_rng(int.from_bytes(digest[:8], "little"))
        chosen = np.sort(rng.choice(len(raw), size=max_configs, replace=False))
    digest = graph_digest(a)
    target = {"platform": "tpu", "device_kind": None, "source": SOURCE,
              "file": os.path.basename(path)}
    for j in chosen:
        j = int(j)
        runtime_ns = {"scaled": ratio[j] * scale, "ratio": ratio[j], "raw": raw[j]}[runtime]
        yield new_record(
            GRAPH_RECORD,
            program=program,
            kernel=kernel,
            index=index,
            count=1,
            count_known=False,
            hlo=None,
            opcode=None,
            fusion_kind=None,
            fingerprint=digest,
            computation=None,
            config=config_from_features(config_feat[j]),
            config_index=j,
            node_opcode=node_opcode,
            node_feat=node_feat,
            edge_index=edge_index,
            config_feat=config_feat[j],
            runtime_ns=float(runtime_ns),
            runtime_norm=float(ratio[j]),
            runtime_raw=float(raw[j]),
            runtime_normalizer=float(norm[j]),
            target=dict(target),
            tile_id=tile_id,
        )


def import_files(paths: Iterable[str], runtime: str = "scaled", max_configs: int | None = None, seed: int = 0,
                 on_file: Callable[[int, str], None] | None = None) -> Iterator[Record]:
    """Records of many tile files; kernels of one program are numbered in
    the order their files come. on_file(number, path) is called as each
    file (1-based) starts."""
    next_index = {}
    for number, path in enumerate(paths, 1):
        if on_file:
            on_file(number, path)
        program, _ = split_tile_id(os.path.splitext(os.path.basename(path))[0])
        index = next_index.get(program, 0)
        next_index[program] = index + 1
        yield from records(path, runtime=runtime, max_configs=max_configs, seed=seed,
                           index=index)
