"""Record streams: round trips, zstd, truncation and corruption."""

import io
import subprocess
import sys

import msgpack
import numpy as np
import pytest
import zstandard

from tpuperf_cli.errors import StreamError
from tpuperf_cli.records import new_record, require
from tpuperf_cli.stream import RecordWriter, decode_array, encode_array, read_records, zstd_decompress

from conftest import stream_bytes


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
    data = stream_bytes(recs, compress)
    assert data[:4] == b"\x28\xb5\x2f\xfd" if compress else data[:1] != b"\x28"
    back = list(read_records(io.BytesIO(data)))
    assert [r["kernel"] for r in back] == [f"k{i}" for i in range(5)]
    assert back[0]["extra"] == {"x": [1, 2]} and back[0]["v"] == 1
    np.testing.assert_array_equal(decode_array(back[0]["feat"]), np.ones((2, 3)))


def test_many_zstd_frames_read_as_one_stream():
    data = stream_bytes([{"a": 1}], True) + stream_bytes([{"a": 2}], True)
    assert [r["a"] for r in read_records(io.BytesIO(data))] == [1, 2]


def test_truncated_stream_names_record_and_keeps_earlier_ones():
    data = stream_bytes([{"i": i, "pad": "x" * 100} for i in range(3)])
    got = []
    with pytest.raises(StreamError, match=r"record 3: stream is truncated"):
        for r in read_records(io.BytesIO(data[:-10]), name="s.msgpack"):
            got.append(r["i"])
    assert got == [0, 1]


def test_corrupt_stream_names_record():
    data = stream_bytes([{"i": 0}]) + b"\xc1garbage"
    with pytest.raises(StreamError, match=r"record 2: corrupt"):
        list(read_records(io.BytesIO(data)))


def test_non_map_record_is_an_error():
    with pytest.raises(StreamError, match="record 2: expected a msgpack map"):
        list(read_records(io.BytesIO(msgpack.packb({"a": 1}) + msgpack.packb([1, 2]))))


def test_corrupt_zstd_is_an_error():
    data = stream_bytes([{"i": i} for i in range(100)], True)
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


def test_truncated_zstd_is_an_error_after_the_records_before_the_cut():
    # zstandard's stream_reader reads a cut frame as a shorter stream: a
    # `head -c` of a .zst file must not pass for a whole one
    rng = np.random.default_rng(0)
    recs = [{"i": i, "pad": rng.bytes(100)} for i in range(3000)]
    data = stream_bytes(recs, True)
    assert len(data) > 300000      # several zstd blocks
    for cut in (5000, len(data) // 2, len(data) - 1):
        got = []
        with pytest.raises(StreamError, match=r"s\.zst: record \d+: truncated zstd stream"):
            for r in read_records(io.BytesIO(data[:cut]), name="s.zst"):
                got.append(r["i"])
        assert got == list(range(len(got)))
    assert len(got) > 1000         # what was decoded before the cut is kept
    # a cut right after the magic number is no empty stream either
    with pytest.raises(StreamError, match="truncated zstd stream"):
        list(read_records(io.BytesIO(data[:4]), name="s.zst"))


def test_truncated_zstd_file_names_the_file(tmp_path):
    path = tmp_path / "t.zst"
    path.write_bytes(stream_bytes([{"i": i, "pad": "y" * 64} for i in range(50)], True)[:-3])
    with pytest.raises(StreamError, match=f"{path}: record .*truncated zstd stream"):
        list(read_records(str(path)))


def test_zstd_frames_cut_between_frames_read_whole():
    one = stream_bytes([{"a": 1}], True)
    assert list(read_records(io.BytesIO(one + one))) == [{"a": 1}, {"a": 1}]
    with pytest.raises(StreamError, match="truncated zstd stream"):
        list(read_records(io.BytesIO(one + one[:-2])))


def test_zstd_decompress_reads_every_frame_and_rejects_a_cut_one():
    from tpuperf_cli.stream import zstd_decompress

    c = zstandard.ZstdCompressor()
    data = c.compress(b"abc" * 1000) + c.compress(b"xyz")
    assert zstd_decompress(data, "f.zst") == b"abc" * 1000 + b"xyz"
    with pytest.raises(StreamError, match=r"^f\.zst: truncated zstd stream"):
        zstd_decompress(data[:-4], "f.zst")


def test_featurize_on_truncated_zstd_exits_nonzero(tmp_path):
    # the audit's reproduction: `head -c 5000 some.zst > t.zst; featurize t.zst`
    # wrote 0 records and exited 0
    import pathlib

    from tpuperf_cli.hlo.parser import parse_file
    from tpuperf_cli.hlo.split import kernel_records

    hlo = pathlib.Path(__file__).parent / "data" / "hlo" / "gpu_style.hlo"
    rng = np.random.default_rng(1)
    kernels = list(kernel_records(parse_file(str(hlo))))
    recs = [dict(r, nonce=rng.bytes(64)) for r in kernels * 10]
    data = stream_bytes(recs, True)
    assert len(data) > 5000
    path = tmp_path / "t.zst"
    path.write_bytes(data[:5000])
    p = subprocess.run([sys.executable, "-m", "tpuperf_cli", "featurize", str(path)],
                       capture_output=True)
    assert p.returncode != 0
    assert b"truncated zstd stream" in p.stderr and str(path).encode() in p.stderr
    assert b"Traceback" not in p.stderr


# ---------------------------------------------------------------- bounds (issue 13)

def _bomb(declared_mb, tmp_path):
    """A small zstd file whose second record declares one `declared_mb` MiB
    binary field and expands to all of it (concatenated frames of zeros)."""
    c = zstandard.ZstdCompressor()
    head = stream_bytes([{"v": 1, "kernel": "ok"}]) + b"\x81\xa3hlo\xc6" + (
        declared_mb << 20).to_bytes(4, "big")
    data = c.compress(head) + c.compress(b"\0" * (1 << 20)) * declared_mb
    path = tmp_path / "bomb.zst"
    path.write_bytes(data)
    return path


# the peak of this process's own memory (VmHWM: ru_maxrss would carry over
# the forking test process's peak across exec)
_PEAK = """
import sys
from tpuperf_cli.errors import StreamError
from tpuperf_cli.stream import read_records
n = 0
try:
    for r in read_records(sys.argv[1]):
        n += 1
except StreamError as e:
    print(e)
hwm = [line for line in open("/proc/self/status") if line.startswith("VmHWM:")][0]
print(n, int(hwm.split()[1]) // 1024)
"""


def _peak(path, env=None):
    import os

    p = subprocess.run([sys.executable, "-c", _PEAK, str(path)], capture_output=True, text=True,
                       env=dict(os.environ, **(env or {})), timeout=120)
    assert p.returncode == 0, p.stderr
    *message, last = p.stdout.strip().splitlines()
    message = "".join(message)
    records, peak_mib = map(int, last.split())
    return message, records, peak_mib


def test_zstd_bomb_is_refused_from_its_header_with_bounded_memory(tmp_path):
    # the reproduction: a small zstd file expanding to one huge record
    path = _bomb(400, tmp_path)
    assert path.stat().st_size < 100_000
    message, records, peak_mib = _peak(path)
    assert records == 1        # the good record before it was read
    assert message == (f"{path}: record 2: record is larger than the maximum record size "
                       f"(256 MiB; set TPUPERF_MAX_RECORD_MB to raise it)")
    assert peak_mib < 150      # the record is 400 MiB; the default bound 256 MiB


def test_record_of_many_fields_past_the_bound_is_refused_when_it_fills_it(tmp_path):
    # no single header declares too much: the buffer bound catches it
    c = zstandard.ZstdCompressor()
    fields = {f"f{i}": b"\1" * (1 << 20) for i in range(40)}
    path = tmp_path / "wide.zst"
    path.write_bytes(c.compress(stream_bytes([{"a": 1}, fields, {"a": 3}])))
    message, records, peak_mib = _peak(path, {"TPUPERF_MAX_RECORD_MB": "8"})
    assert records == 1 and "record 2: record is larger than the maximum record size (8 MiB" in message
    assert peak_mib < 120, peak_mib     # 40 MiB of record; 8 MiB bound
    # raising the bound reads it
    message, records, _ = _peak(path, {"TPUPERF_MAX_RECORD_MB": "64"})
    assert records == 3


def test_featurize_on_a_bomb_is_a_one_line_error(tmp_path):
    path = _bomb(300, tmp_path)
    p = subprocess.run([sys.executable, "-m", "tpuperf_cli", "featurize", "--skip-bad", str(path)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 1
    assert p.stderr.splitlines()[-1].endswith("record 2: record is larger than the maximum "
                                              "record size (256 MiB; set TPUPERF_MAX_RECORD_MB "
                                              "to raise it)")
    assert str(path) in p.stderr and "Traceback" not in p.stderr


def test_max_record_size_env_must_be_a_size(monkeypatch):
    from tpuperf_cli.errors import TpuperfError
    from tpuperf_cli.stream import max_record_bytes

    assert max_record_bytes() == 256 << 20
    monkeypatch.setenv("TPUPERF_MAX_RECORD_MB", "1.5")
    assert max_record_bytes() == 3 << 19
    monkeypatch.setenv("TPUPERF_MAX_RECORD_MB", "lots")
    with pytest.raises(TpuperfError, match="TPUPERF_MAX_RECORD_MB='lots'"):
        max_record_bytes()


@pytest.mark.parametrize("header", [b"\xdd\xff\xff\xff\xff", b"\xdf\x7f\xff\xff\xff",
                                    b"\xdb\xff\xff\xff\xf0", b"\xc9\xff\xff\xff\xf0\x01"])
def test_huge_declared_containers_are_refused_not_allocated(header):
    # an array/map header makes msgpack allocate its items at once
    data = stream_bytes([{"a": 1}]) + b"\x81\xa1x" + header + b"\0" * (2 << 20)
    with pytest.raises(StreamError, match="record 2: record is larger than the maximum"):
        list(read_records(io.BytesIO(data), name="s"))


def test_zstd_decompress_is_bounded():
    c = zstandard.ZstdCompressor()
    data = c.compress(b"\0" * (1 << 20)) * 20
    with pytest.raises(StreamError, match=r"^f\.zst: decompressed content is larger"):
        zstd_decompress(data, "f.zst", limit=8 << 20)
    assert len(zstd_decompress(data, "f.zst")) == 20 << 20


@pytest.mark.parametrize("value, message", [
    ({"dtype": "<f4", "shape": [1 << 40], "data": b"\0" * 8}, "needs 4398046511104 bytes, data has 8"),
    ({"dtype": "<f4", "shape": [-1], "data": b"\0" * 8}, "not a list of non-negative ints"),
    ({"dtype": "<f4", "shape": [3], "data": b"\0" * 8}, "needs 12 bytes, data has 8"),
    ({"dtype": "<f4", "shape": "3", "data": b"\0" * 12}, "not a list of non-negative ints"),
    ({"dtype": "<f4", "shape": [2.0], "data": b"\0" * 8}, "not a list of non-negative ints"),
    ({"dtype": "|O", "shape": [1], "data": b"\0" * 8}, "is not numeric"),
    ({"dtype": "V9999999", "shape": [1], "data": b""}, "is not numeric"),
    ({"dtype": [("a", "<f4")], "shape": [1], "data": b"\0" * 4}, "not a numpy dtype string"),
    ({"dtype": "<q9", "shape": [1], "data": b""}, "not a numpy dtype string"),
    ({"dtype": "<f4", "shape": [2], "data": "abcdefgh"}, "data is str, not bytes"),
])
def test_arrays_that_lie_are_refused(value, message):
    with pytest.raises(StreamError, match="bad array map") as e:
        decode_array(value, "feat")
    assert message in str(e.value) and "\n" not in str(e.value)


def test_read_records_with_bytes_gives_each_records_bytes():
    """Records smaller and larger than the reader's chunks, plain and zstd:
    each one's bytes are exactly what was written for it."""
    import msgpack

    recs = [{"i": i, "pad": bytes(i * 9001 % 150000)} for i in range(40)]
    packed = [msgpack.packb(r, use_bin_type=True) for r in recs]
    for compress in (False, True):
        buf = io.BytesIO()
        with RecordWriter(buf, compress=compress) as w:
            for r in recs:
                w.write(r)
        data = buf.getvalue()
        got = list(read_records(io.BytesIO(data), with_bytes=True))
        assert [r for r, _ in got] == recs
        assert [b for _, b in got] == packed
