"""Record streams: msgpack maps one after another, plain or zstd-compressed.

Every tool reads and writes these. Arrays travel as plain maps
(`{"dtype": "<f4", "shape": [...], "data": <bin>}`, little-endian, C order)
so any msgpack library in any language can read a stream. Fields a tool does
not know are passed through untouched: tools update records, never rebuild
them.

Bounds: a record may be at most TPUPERF_MAX_RECORD_MB MiB (default 256)
once unpacked from msgpack; a reader refuses a larger one with a one-line
error naming the file and record number, before it holds the record in
memory (a record whose header declares a field past the bound is refused
as soon as that header is read). zstd input is decompressed a little at a
time, so a small file that expands to gigabytes costs no more memory than
the bound.
"""

from __future__ import annotations

import io
import os
import sys
from collections.abc import Iterable, Iterator
from typing import IO, TYPE_CHECKING, Any, BinaryIO, Union

import msgpack

from tpuperf_cli.errors import StreamError, TpuperfError, open_file
from tpuperf_cli.records import Record, locate

if TYPE_CHECKING:
    import numpy as np

# where a stream comes from or goes to: a path, "-" or None (stdin/stdout), or an open file
Source = Union[str, os.PathLike, IO[bytes], None]

ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_CHUNK = 1 << 16
# zstd expands at most ~32768x (a 4-byte RLE block of 128 KiB), so feeding
# the decompressor this much input at a time yields at most 32 MiB at once
_ZSTD_PIECE = 1 << 10
MAX_RECORD_ENV = "TPUPERF_MAX_RECORD_MB"
DEFAULT_MAX_RECORD_MB = 256
# a pending record this large gets its headers checked against the bound
_CHECK_AFTER = 1 << 20
_HEAD_KEEP = 1 << 16


def max_record_bytes() -> int:
    """The largest record a reader accepts, in bytes: $TPUPERF_MAX_RECORD_MB
    MiB, 256 MiB when unset."""
    value = os.environ.get(MAX_RECORD_ENV)
    if value is None or value.strip() == "":
        return DEFAULT_MAX_RECORD_MB << 20
    try:
        mb = float(value)
    except ValueError:
        mb = -1.0
    if not (0 < mb < 1 << 24):
        raise TpuperfError(f"{MAX_RECORD_ENV}={value!r}: expected a size in MiB "
                           f"(a number > 0, default {DEFAULT_MAX_RECORD_MB})", exit_code=2)
    return max(1024, int(mb * (1 << 20)))


def _too_big(where: str, limit: int, what: str = "record") -> StreamError:
    return StreamError(f"{where}: {what} is larger than the maximum record size "
                       f"({_size(limit)}; set {MAX_RECORD_ENV} to raise it)")


def _size(n: int) -> str:
    return f"{n / (1 << 20):g} MiB" if n >= 1 << 20 else f"{n} bytes"


# ---------------------------------------------------------------- arrays

_DTYPE_STR = {}      # little-endian or native dtype -> its str ('<f4'): dtype.str is slow


def encode_array(array: np.ndarray) -> dict:
    """A numpy array as a plain msgpack map."""
    import numpy as np

    a = np.ascontiguousarray(array)
    name = _DTYPE_STR.get(a.dtype)
    if name is None:
        if a.dtype.byteorder == ">":
            a = a.astype(a.dtype.newbyteorder("<"))
        else:
            _DTYPE_STR[a.dtype] = a.dtype.str
        name = a.dtype.str
    return {"dtype": name, "shape": list(a.shape), "data": a.tobytes()}


def is_array(value: Any) -> bool:
    return isinstance(value, dict) and value.keys() >= {"dtype", "shape", "data"}


def decode_array(value: Any, field: str = "array") -> np.ndarray:
    """A plain array map back to a numpy array (read-only view of the bytes).

    The map is checked before numpy sees it: a numeric dtype string, a shape
    of non-negative ints and exactly the bytes that shape needs; a map that
    lies about any of them is a StreamError, never an allocation.
    """
    import numpy as np

    if not is_array(value):
        raise StreamError(f"field {field!r} is not an array map (dtype, shape, data)")
    dtype, shape, data = value["dtype"], value["shape"], value["data"]
    try:
        if not isinstance(dtype, str) or len(dtype) > 8:
            raise TypeError
        dt = np.dtype(dtype)
    except (TypeError, ValueError, SyntaxError):
        raise StreamError(f"field {field!r}: bad array map: dtype {dtype!r} is not a numpy "
                          f"dtype string such as '<f4'") from None
    if dt.kind not in "biufc" or dt.fields is not None or dt.subdtype is not None:
        raise StreamError(f"field {field!r}: bad array map: dtype {dtype!r} is not numeric")
    if not isinstance(shape, (list, tuple)) or len(shape) > 32 or not all(
            type(d) is int and d >= 0 for d in shape):
        raise StreamError(f"field {field!r}: bad array map: shape {_short(shape)} is not a "
                          f"list of non-negative ints")
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise StreamError(f"field {field!r}: bad array map: data is {type(data).__name__}, "
                          f"not bytes")
    count = 1
    for d in shape:
        count *= d
    if count * dt.itemsize != len(data):
        raise StreamError(f"field {field!r}: bad array map: shape {list(shape)} of {dtype} "
                          f"needs {count * dt.itemsize} bytes, data has {len(data)}")
    return np.frombuffer(data, dtype=dt).reshape(shape)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _default(obj):
    # numpy arrays and scalars are the only non-msgpack values tools write
    # (without numpy loaded there are none; an import per call is slow)
    np = sys.modules.get("numpy")
    if np is not None:
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
        self._in = b""            # compressed input not yet given to the decompressor
        self._at = 0
        self._out = bytearray()
        self._eof = False

    def _feed_piece(self):
        # a small piece at a time bounds what one call can expand to
        piece = self._in[self._at:self._at + _ZSTD_PIECE]
        self._at += len(piece)
        while piece:
            if self._obj is None:
                self._obj = self._dctx.decompressobj()
            self._out += self._obj.decompress(piece)
            if not self._obj.eof:
                return
            piece = self._obj.unused_data      # the next frame starts here
            self._obj = None

    def read(self, n: int | None = -1) -> bytes:
        if n is None or n < 0:
            n = _CHUNK      # callers read in chunks; never everything at once
        while len(self._out) < n:
            if self._at >= len(self._in):
                if self._eof:
                    break
                self._in, self._at = self._raw.read(_CHUNK), 0
                if not self._in:
                    self._eof = True
                    break
            self._feed_piece()
        if self._eof and not self._out and self._obj is not None:
            self._obj = None
            raise TruncatedZstd("truncated zstd stream (the input ends inside a compressed frame)")
        if n >= len(self._out):
            out, self._out = bytes(self._out), bytearray()
        else:
            out = bytes(self._out[:n])
            del self._out[:n]
        return out

    def close(self) -> None:
        self._raw.close()


def zstd_decompress(data: bytes, name: str, limit: int | None = None) -> bytes:
    """The whole content of zstd data (bytes) of one or more frames; a
    truncated last frame, or content larger than `limit` bytes (default: the
    maximum record size), raises StreamError naming `name`."""
    limit = max_record_bytes() if limit is None else limit
    reader = ZstdReader(io.BytesIO(data))
    out = []
    size = 0
    try:
        while True:
            chunk = reader.read(_CHUNK * 16)
            if not chunk:
                return b"".join(out)
            size += len(chunk)
            if size > limit:
                raise _too_big(name, limit, "decompressed content")
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


# msgpack type bytes -> (header length, length-field size) for str/bin/ext
_SIZED = {0xc4: 1, 0xc5: 2, 0xc6: 4, 0xd9: 1, 0xda: 2, 0xdb: 4}
_EXT = {0xc7: 1, 0xc8: 2, 0xc9: 4}
_FIXED = {0xc0: 0, 0xc2: 0, 0xc3: 0, 0xca: 4, 0xcb: 8, 0xcc: 1, 0xcd: 2, 0xce: 4, 0xcf: 8,
          0xd0: 1, 0xd1: 2, 0xd2: 4, 0xd3: 8, 0xd4: 2, 0xd5: 3, 0xd6: 5, 0xd7: 9, 0xd8: 17}


def declared_size_exceeds(head: bytes, limit: int) -> bool:
    """Whether the first bytes of a msgpack value declare more than `limit`
    bytes: a string, binary or extension, or an array or map with more
    items than `limit` bytes could hold, that would end past `limit`.
    Looks only at the headers in `head`, so a bomb's record is refused
    from its first bytes, before its body is read."""
    pos = 0
    end = len(head)
    while pos < end:
        b = head[pos]
        if b <= 0x7f or b >= 0xe0:
            pos += 1
            continue
        count = None
        if 0xa0 <= b <= 0xbf:
            n, pos = b & 0x1f, pos + 1
        elif 0x80 <= b <= 0x9f:
            count, pos = (b & 0x0f) * (2 if b < 0x90 else 1), pos + 1
        elif b in _SIZED or b in _EXT:
            width = _SIZED.get(b) or _EXT[b]
            if pos + 1 + width > end:
                return False
            n = int.from_bytes(head[pos + 1:pos + 1 + width], "big") + (1 if b in _EXT else 0)
            pos += 1 + width
        elif b in (0xdc, 0xdd, 0xde, 0xdf):
            width = 2 if b in (0xdc, 0xde) else 4
            if pos + 1 + width > end:
                return False
            count = int.from_bytes(head[pos + 1:pos + 1 + width], "big") * (2 if b >= 0xde else 1)
            pos += 1 + width
        elif b in _FIXED:
            pos += 1 + _FIXED[b]
            continue
        else:
            return False        # 0xc1 (never used): the unpacker reports it
        if count is not None:
            if pos + count > limit:     # every item takes at least a byte
                return True
            continue
        if pos + n > limit:
            return True
        pos += n
    return False


def read_records(source: Source = None, name: str | None = None,
                 with_bytes: bool = False) -> Iterator[Record]:
    """Yield the records (dicts) of one stream; with_bytes: (record, its
    msgpack bytes) pairs, for a tool that adds fields to the bytes rather
    than packing the record again (predict).

    A truncated or corrupt stream raises StreamError naming the record number
    (1-based) after every good record before it has been yielded; so does a
    record larger than max_record_bytes(), before it is held in memory.
    """
    name = name or _display_name(source)
    limit = max_record_bytes()
    f = open_input(source)
    # an array or map header allocates its items at once, so cap their counts
    unpacker = msgpack.Unpacker(raw=False, strict_map_key=False,
                                max_buffer_size=limit + 2 * _CHUNK, max_str_len=limit,
                                max_bin_len=limit, max_ext_len=limit,
                                max_array_len=max(16, limit // 16),
                                max_map_len=max(16, limit // 64))
    fed = 0
    number = 0
    start = 0       # where the pending record starts in the stream
    pending_head = bytearray()   # its first bytes, to check what its headers declare
    checked = False
    head = None     # the first bytes, to say what input that is not records looks like
    held = bytearray()  # with_bytes: the stream from offset held_at on, fed but not yet yielded
    held_at = 0
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
            try:
                unpacker.feed(chunk)
            except msgpack.BufferFull:
                raise _too_big(locate(number + 1, name), limit) from None
            fed += len(chunk)
            if with_bytes:
                held += chunk
            if len(pending_head) < _HEAD_KEEP:
                pending_head += chunk[:_HEAD_KEEP - len(pending_head)]
            while True:
                try:
                    record = unpacker.unpack()
                except msgpack.OutOfData:
                    break
                except ValueError as e:
                    if "exceeds max_" in str(e):
                        raise _too_big(locate(number + 1, name), limit) from None
                    message = f"{locate(number + 1, name)}: corrupt msgpack data ({e})"
                    raise StreamError(_not_records(name, message, head) if number == 0 else message) from None
                except Exception as e:
                    message = f"{locate(number + 1, name)}: corrupt msgpack data ({e})"
                    raise StreamError(_not_records(name, message, head) if number == 0 else message) from None
                number += 1
                end = unpacker.tell()
                if end - start > limit:
                    raise _too_big(locate(number, name), limit)
                # the next record starts inside this chunk
                record_start, start, checked = start, end, False
                pending_head = bytearray(chunk[start - (fed - len(chunk)):][:_HEAD_KEEP])
                if not isinstance(record, dict):
                    message = f"{locate(number, name)}: expected a msgpack map, got {type(record).__name__}"
                    raise StreamError(_not_records(name, message, head) if number == 1 else message)
                if with_bytes:
                    yield record, bytes(memoryview(held)[record_start - held_at:end - held_at])
                else:
                    yield record
            if with_bytes:
                del held[:start - held_at]
                held_at = start
            # msgpack keeps the parts of a pending record it has parsed
            # outside its buffer, so count the pending bytes here
            if fed - start > limit:
                raise _too_big(locate(number + 1, name), limit)
            if not checked and fed - start > _CHECK_AFTER:
                checked = True
                if declared_size_exceeds(pending_head, limit):
                    raise _too_big(locate(number + 1, name), limit)
        if unpacker.tell() != fed:
            message = (f"{locate(number + 1, name)}: stream is truncated "
                       f"({fed - unpacker.tell()} bytes of an incomplete record at the end)")
            raise StreamError(_not_records(name, message, head) if number == 0 else message)
    finally:
        if f is not sys.stdin.buffer and isinstance(source, (str, os.PathLike)):
            f.close()


def read_many(sources: Iterable[Source], with_bytes: bool = False) -> Iterator[Record]:
    """Records of several streams in order; no sources means stdin."""
    for source in sources or ["-"]:
        yield from read_records(source, with_bytes=with_bytes)


# ---------------------------------------------------------------- output

class RecordWriter:
    """Writes records to stdout, a path (zstd if it ends in .zst) or a file.

    Each record is packed whole before it is written, so an interrupted
    writer leaves a stream that is valid up to the last whole record.
    `level` is zstd's (10: fast enough for a pipe; 19 for files kept in a
    repository, about a quarter smaller for kernel records).
    """

    def __init__(self, target: Source = None, compress: bool | None = None, level: int = 10):
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

            self._zstd = zstandard.ZstdCompressor(level=level).stream_writer(raw, closefd=False)
        self._out = self._zstd or raw
        self._packer = msgpack.Packer(use_bin_type=True, default=_default)
        self.count = 0

    def write(self, record: Record) -> None:
        self._out.write(self._packer.pack(record))
        self.count += 1

    def write_packed(self, data: bytes, count: int = 1) -> None:
        """Write `count` records already packed (whole records only)."""
        self._out.write(data)
        self.count += count

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
