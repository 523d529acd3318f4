"""A model file read without torch (for the numpy engine, model/infer.py).

torch.save's zip holds a pickle (data.pkl) and one raw little-endian file
per tensor. A restricted unpickler accepts only the tensor rebuild
function, storage types and OrderedDict, so a model file cannot run code
here either. Anything else raises Unsupported, and load_model falls back to
torch.
"""

from __future__ import annotations

import collections
import pickle
import zipfile

import numpy as np


class Unsupported(Exception):
    """This file or model needs the torch/DGL path."""



_STORAGES = {"FloatStorage": "<f4", "DoubleStorage": "<f8", "HalfStorage": "<f2",
             "LongStorage": "<i8", "IntStorage": "<i4", "ShortStorage": "<i2",
             "CharStorage": "i1", "ByteStorage": "u1", "BoolStorage": "?"}


class _Storage:
    def __init__(self, name):
        self.dtype = np.dtype(_STORAGES[name])


def _rebuild_tensor(storage, offset, size, stride, requires_grad=False, hooks=None, metadata=None):
    if not isinstance(storage, np.ndarray):
        raise Unsupported("tensor without storage")
    item = storage.itemsize
    if len(size) == 0:
        return storage[offset:offset + 1].reshape(()).copy()
    view = np.lib.stride_tricks.as_strided(storage[offset:], shape=tuple(size),
                                           strides=tuple(s * item for s in stride))
    return np.array(view)       # an owned, C-ordered copy


def read_model_dict(path: str) -> dict:
    """The dict of a torch.save'd model file, tensors as numpy arrays.
    Raises Unsupported for anything but the plain zip layout of weights and
    plain values (torch.load then decides what the file is)."""
    try:
        z = zipfile.ZipFile(path)
    except (OSError, zipfile.BadZipFile, ValueError) as e:
        raise Unsupported(str(e)) from None
    with z:
        pkl = [n for n in z.namelist() if n.endswith("/data.pkl")]
        if len(pkl) != 1:
            raise Unsupported("no single data.pkl")
        prefix = pkl[0][:-len("data.pkl")]
        try:
            order = z.read(prefix + "byteorder").decode().strip()
        except KeyError:
            order = "little"
        if order != "little":
            raise Unsupported(f"byte order {order}")
        storages = {}

        class Unpickler(pickle.Unpickler):
            def find_class(self, module, name):
                if module == "torch._utils" and name == "_rebuild_tensor_v2":
                    return _rebuild_tensor
                if module == "torch" and name in _STORAGES:
                    return _Storage(name)
                if module == "collections" and name == "OrderedDict":
                    return collections.OrderedDict
                raise Unsupported(f"pickled {module}.{name}")

            def persistent_load(self, pid):
                if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage"
                        and isinstance(pid[1], _Storage)):
                    raise Unsupported("unknown persistent id")
                key = str(pid[2])
                if key not in storages:
                    try:
                        raw = z.read(f"{prefix}data/{key}")
                    except KeyError:
                        raise Unsupported(f"storage {key} missing") from None
                    storages[key] = np.frombuffer(raw, pid[1].dtype)
                return storages[key]

        try:
            with z.open(pkl[0]) as f:
                return Unpickler(f).load()
        except Unsupported:
            raise
        except Exception as e:  # a corrupt pickle: torch.load says it better
            raise Unsupported(f"{type(e).__name__}: {e}") from None


