"""Record streams: msgpack maps one after another, plain or zstd-compressed.

Every tool reads and writes these. Arrays travel as plain maps
(`{"dtype": "<f4", "shape": [...], "data": <bin>}`, little-endian, C order)
so any msgpack library in any language can read a stream. Fields a tool does
not know are passed through untouched: tools update records, never rebuild
them.
"""

from __future__ import annotations

import io
import os
import sys
from collections.abc import Iterable, Iterator
from typing import IO, TYPE_CHECKING, Any, BinaryIO, Union

import msgpack

from tpuperf_cli.errors import StreamError, open_file
from tpuperf_cli.records import Record, locate

if TYPE_CHECKING:
    import numpy as np

# where a stream comes from or goes to: a path, "-" or None (stdin/stdout), or an open file
Source = Union[str, os.PathLike, IO[bytes], None]

ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_CHUNK = 1 << 16
_MAX_RECORD = 1 << 30


# ---------------------------------------------------------------- arrays

def encode_array(array: np.ndarray) -> dict:
    """A numpy array as a plain msgpack map."""
    import numpy as np

    a = np.ascontiguousarray(array)
    dtype = a.dtype.newbyteorder("<") if a.dtype.byteorder == ">" else a.dtype
    a = a.astype(dtype, copy=False)
    return {"dtype": dtype.str, "shape": list(a.shape), "data": a.tobytes()}


def is_array(value: Any) -> bool:
    return isinstance(value, dict) and value.keys() >= {"dtype", "shape", "data"}


def decode_array(value: Any, field: str = "array") -> np.ndarray:
    """A plain array map back to a numpy array (read-only view of the bytes)."""
    import numpy as np

    if not is_array(value):
        raise StreamError(f"field {field!r} is not an array map (dtype, shape, data)")
    try:
        a = np.frombuffer(value["data"], dtype=np.dtype(value["dtype"]))
        return a.reshape(value["shape"])
    except (TypeError, ValueError) as e:
        raise StreamError(f"field {field!r}: bad array map: {e}") from None


def _default(obj):
    # numpy arrays and scalars are the only non-msgpack values tools write
    import numpy as np

    if isinstance(obj, np.ndarray):
        return encode_array(obj)
    if isinstance(obj, np.generic):
        return obj.item()
    raise TypeError(f"cannot write {type(obj).__name__} to a record stream")


# ---------------------------------------------------------------- input

def _display_name(source):
    if source is None or source == "-":
        return "<stdin>"
    return getattr(source, "name", None) or str(source)


def open_input(source: Source = None) -> BinaryIO:
    """A binary file for a path, `-`/None (stdin) or an open file; zstd is
    detected by its magic number and decompressed on the fly."""
    if source is None or source == "-":
        if sys.stdin.isatty():
            print("reading records from stdin (pipe a stream in, or name a file; --help for help)",
                  file=sys.stderr)
        raw = sys.stdin.buffer
    elif isinstance(source, (str, os.PathLike)):
        raw = open_file(source)
    else:
        raw = source
    buffered = raw if hasattr(raw, "peek") else io.BufferedReader(raw)
    if buffered.peek(4)[:4] == ZSTD_MAGIC:
        return ZstdReader(buffered)
    return buffered


class TruncatedZstd(StreamError):
    """A zstd stream that ends inside a frame."""


class ZstdReader:
    """Decompresses a zstd stream of one or more frames, read(n) at a time.

    zstandard's stream_reader returns b"" at the end of the input even when
    the last frame is incomplete, so a cut file would read as a shorter one.
    This reader raises TruncatedZstd instead, once everything decoded before
    the cut has been returned.
    """

    def __init__(self, raw):
        import zstandard

        self._raw = raw
        self._dctx = zstandard.ZstdDecompressor()
        self._obj = None          # decompressor of the frame being read, if any
        self._out = bytearray()
        self._eof = False

    def _feed(self, data):
        while data:
            if self._obj is None:
                self._obj = self._dctx.decompressobj()
            self._out += self._obj.decompress(data)
            if not self._obj.eof:
                return
            data = self._obj.unused_data      # the next frame starts here
            self._obj = None

    def read(self, n: int | None = -1) -> bytes:
        while not self._eof and (n is None or n < 0 or len(self._out) < n):
            chunk = self._raw.read(_CHUNK)
            if not chunk:
                self._eof = True
                break
            self._feed(chunk)
        if self._eof and not self._out and self._obj is not None:
            self._obj = None
            raise TruncatedZstd("truncated zstd stream (the input ends inside a compressed frame)")
        if n is None or n < 0 or n >= len(self._out):
            out, self._out = bytes(self._out), bytearray()
        else:
            out = bytes(self._out[:n])
            del self._out[:n]
        return out

    def close(self) -> None:
        self._raw.close()


def zstd_decompress(data: bytes, name: str) -> bytes:
    """The whole content of zstd data (bytes) of one or more frames; a
    truncated last frame raises StreamError naming `name`."""
    reader = ZstdReader(io.BytesIO(data))
    out = []
    try:
        while True:
            chunk = reader.read(_CHUNK * 16)
            if not chunk:
                return b"".join(out)
            out.append(chunk)
    except TruncatedZstd as e:
        raise StreamError(f"{name}: {e}") from None
    except StreamError:
        raise
    except Exception as e:  # zstd frame errors
        raise StreamError(f"{name}: cannot decompress zstd data: {e}") from None


def what_input_is(head: bytes) -> tuple[str, str] | None:
    """For input that is not a record stream, from its first bytes: what it
    looks like and which tool reads it (None when unsure)."""
    text = head.lstrip()
    if text.startswith(b"HloModule") or b"ENTRY" in head or b"ROOT " in head:
        return "HLO text", "hlo-split reads HLO text: hlo-split prog.hlo | featurize | ..."
    if head.startswith(b"PK\x03\x04"):
        return "a zip (.npz) file", "tpuperf import tpugraphs reads TpuGraphs .npz files"
    if head.startswith(b"\x1f\x8b"):
        return "gzip data", "tools read plain or zstd-compressed record streams"
    if text[:1] in (b"{", b"["):
        return "JSON", "tpuperf import tuning-json reads TPU tile-tuning JSON"
    if head and all(32 <= c < 127 or c in b"\t\r\n" for c in head):
        return "text", ("hlo-split reads HLO text; records come from hlo-split, featurize, "
                        "measure, predict and tpuperf import")
    return None


def _not_records(name, message, head):
    """The error for a first record that does not read: what the input
    looks like where that is clear, else the reader's message."""
    guess = what_input_is(head or b"")
    if guess is None:
        return message
    what, who = guess
    return f"{name}: this is {what}, not a msgpack record stream ({who})"


def read_records(source: Source = None, name: str | None = None) -> Iterator[Record]:
    """Yield the records (dicts) of one stream.

    A truncated or corrupt stream raises StreamError naming the record number
    (1-based) after every good record before it has been yielded.
    """
    name = name or _display_name(source)
    f = open_input(source)
    unpacker = msgpack.Unpacker(raw=False, strict_map_key=False, max_buffer_size=_MAX_RECORD)
    fed = 0
    number = 0
    head = None     # the first bytes, to say what input that is not records looks like
    try:
        while True:
            try:
                chunk = f.read(_CHUNK)
            except TruncatedZstd as e:
                raise StreamError(f"{locate(number + 1, name)}: {e}") from None
            except Exception as e:  # zstd frame errors and the like
                raise StreamError(f"{locate(number + 1, name)}: cannot read stream: {e}") from None
            if not chunk:
                break
            if head is None:
                head = chunk[:256]
            fed += len(chunk)
            unpacker.feed(chunk)
            while True:
                try:
                    record = unpacker.unpack()
                except msgpack.OutOfData:
                    break
                except Exception as e:
                    message = f"{locate(number + 1, name)}: corrupt msgpack data ({e})"
                    raise StreamError(_not_records(name, message, head) if number == 0 else message) from None
                number += 1
                if not isinstance(record, dict):
                    message = f"{locate(number, name)}: expected a msgpack map, got {type(record).__name__}"
                    raise StreamError(_not_records(name, message, head) if number == 1 else message)
                yield record
        if unpacker.tell() != fed:
            message = (f"{locate(number + 1, name)}: stream is truncated "
                       f"({fed - unpacker.tell()} bytes of an incomplete record at the end)")
            raise StreamError(_not_records(name, message, head) if number == 0 else message)
    finally:
        if f is not sys.stdin.buffer and isinstance(source, (str, os.PathLike)):
            f.close()


def read_many(sources: Iterable[Source]) -> Iterator[Record]:
    """Records of several streams in order; no sources means stdin."""
    for source in sources or ["-"]:
        yield from read_records(source)


# ---------------------------------------------------------------- output

class RecordWriter:
    """Writes records to stdout, a path (zstd if it ends in .zst) or a file.

    Each record is packed whole before it is written, so an interrupted
    writer leaves a stream that is valid up to the last whole record.
    """

    def __init__(self, target: Source = None, compress: bool | None = None):
        self._own = False
        if target is None or target == "-":
            raw = sys.stdout.buffer
        elif isinstance(target, (str, os.PathLike)):
            raw = open(target, "wb")
            self._own = True
            if compress is None:
                compress = str(target).endswith(".zst")
        else:
            raw = target
        self._raw = raw
        self._zstd = None
        if compress:
            import zstandard

            self._zstd = zstandard.ZstdCompressor(level=10).stream_writer(raw, closefd=False)
        self._out = self._zstd or raw
        self._packer = msgpack.Packer(use_bin_type=True, default=_default)
        self.count = 0

    def write(self, record: Record) -> None:
        self._out.write(self._packer.pack(record))
        self.count += 1

    def flush(self) -> None:
        if self._zstd is not None:
            import zstandard

            self._zstd.flush(zstandard.FLUSH_FRAME)
        self._raw.flush()

    def close(self) -> None:
        if self._zstd is not None:
            self._zstd.close()
            self._zstd = None
        self._raw.flush()
        if self._own:
            self._raw.close()

    def __enter__(self) -> RecordWriter:
        return self

    def __exit__(self, *exc):
        self.close()
