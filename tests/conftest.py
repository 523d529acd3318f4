"""Helpers the test modules share (import them: `from conftest import ...`)."""

import io

from tpuperf_cli.stream import RecordWriter


def stream_bytes(records, compress=False):
    """Records as the bytes of one stream (zstd-compressed with compress=True)."""
    buf = io.BytesIO()
    writer = RecordWriter(buf, compress=compress)
    for record in records:
        writer.write(record)
    writer.close()
    return buf.getvalue()


def write_stream(path, records):
    """Records written to a file (zstd if its name ends in .zst); returns path."""
    with RecordWriter(str(path)) as writer:
        for record in records:
            writer.write(record)
    return path
