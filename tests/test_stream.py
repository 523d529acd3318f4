"""Record streams: round trips, zstd, truncation and corruption."""

import io
import subprocess
import sys

import msgpack
import numpy as np
import pytest
import zstandard

from tpuperf_cli.errors import StreamError
from tpuperf_cli.stream import (RecordWriter, decode_array, encode_array, new_record,
                                read_records, require)


def _stream(records, compress=False):
    buf = io.BytesIO()
    w = RecordWriter(buf, compress=compress)
    for r in records:
        w.write(r)
    w.close()
    return buf.getvalue()


def test_array_round_trip_is_plain_msgpack():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    m = encode_array(a)
    assert m["dtype"] == "<f4" and m["shape"] == [3, 4]
    # any msgpack reader sees a plain map
    plain = msgpack.unpackb(msgpack.packb(m, use_bin_type=True), raw=False)
    np.testing.assert_array_equal(decode_array(plain), a)


def test_big_endian_arrays_are_written_little_endian():
    a = np.arange(4, dtype=">i4")
    m = encode_array(a)
    assert m["dtype"] == "<i4"
    np.testing.assert_array_equal(decode_array(m), [0, 1, 2, 3])


@pytest.mark.parametrize("compress", [False, True])
def test_round_trip_keeps_unknown_fields(compress):
    recs = [new_record("kernel", kernel=f"k{i}", extra={"x": [1, 2]},
                       feat=np.ones((2, 3), np.float32)) for i in range(5)]
    data = _stream(recs, compress)
    assert data[:4] == b"\x28\xb5\x2f\xfd" if compress else data[:1] != b"\x28"
    back = list(read_records(io.BytesIO(data)))
    assert [r["kernel"] for r in back] == [f"k{i}" for i in range(5)]
    assert back[0]["extra"] == {"x": [1, 2]} and back[0]["v"] == 1
    np.testing.assert_array_equal(decode_array(back[0]["feat"]), np.ones((2, 3)))


def test_many_zstd_frames_read_as_one_stream():
    data = _stream([{"a": 1}], True) + _stream([{"a": 2}], True)
    assert [r["a"] for r in read_records(io.BytesIO(data))] == [1, 2]


def test_truncated_stream_names_record_and_keeps_earlier_ones():
    data = _stream([{"i": i, "pad": "x" * 100} for i in range(3)])
    got = []
    with pytest.raises(StreamError, match=r"record 3: stream is truncated"):
        for r in read_records(io.BytesIO(data[:-10]), name="s.msgpack"):
            got.append(r["i"])
    assert got == [0, 1]


def test_corrupt_stream_names_record():
    data = _stream([{"i": 0}]) + b"\xc1garbage"
    with pytest.raises(StreamError, match=r"record 2: corrupt"):
        list(read_records(io.BytesIO(data)))


def test_non_map_record_is_an_error():
    with pytest.raises(StreamError, match="record 2: expected a msgpack map"):
        list(read_records(io.BytesIO(msgpack.packb({"a": 1}) + msgpack.packb([1, 2]))))


def test_corrupt_zstd_is_an_error():
    data = _stream([{"i": i} for i in range(100)], True)
    bad = data[:20] + bytes(b ^ 0xFF for b in data[20:40]) + data[40:]
    with pytest.raises(StreamError):
        list(read_records(io.BytesIO(bad)))


def test_require_names_missing_fields():
    with pytest.raises(StreamError, match=r"x: record 4: missing field\(s\) hlo"):
        require({"type": "kernel"}, ["hlo"], number=4, name="x")


def test_missing_file_is_a_clear_error(tmp_path):
    from tpuperf_cli.errors import TpuperfError

    with pytest.raises(TpuperfError, match="No such file"):
        list(read_records(str(tmp_path / "nope.zst")))


def test_writer_to_zst_path_compresses(tmp_path):
    path = tmp_path / "s.zst"
    with RecordWriter(str(path)) as w:
        w.write({"a": 1})
    raw = path.read_bytes()
    assert raw[:4] == b"\x28\xb5\x2f\xfd"
    assert zstandard.ZstdDecompressor().decompressobj().decompress(raw)
    assert list(read_records(str(path))) == [{"a": 1}]
