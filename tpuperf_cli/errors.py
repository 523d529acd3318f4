"""Errors a user can cause. The CLI prints them as one line, never a traceback."""

import os
from typing import IO, Any


class TpuperfError(Exception):
    """A user-facing error: bad input, bad option, missing file.

    exit_code follows the Unix habit: 1 for bad data or a failed run,
    2 for input that does not parse (as usage errors).
    """

    exit_code = 1

    def __init__(self, message: str, exit_code: int | None = None):
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


class StreamError(TpuperfError):
    """A record stream that is truncated, corrupt or not msgpack."""


class ParseError(TpuperfError):
    """Text that does not parse; the message is `file:line:col: what`."""

    exit_code = 2


def _file_error(path, e: OSError, what: str | None) -> TpuperfError:
    prefix = f"{what} " if what else ""
    return TpuperfError(f"{prefix}{path}: {e.strerror or e}")


def open_file(path: str | os.PathLike, mode: str = "rb", what: str | None = None, **kwargs: Any) -> IO:
    """open(path, mode, **kwargs), or TpuperfError "[WHAT ]PATH: reason" for a
    file that cannot be opened (missing, a directory, no permission)."""
    try:
        return open(path, mode, **kwargs)
    except OSError as e:
        raise _file_error(path, e, what) from None


def read_file(path: str | os.PathLike, mode: str = "rb", what: str | None = None,
              **kwargs: Any) -> bytes | str:
    """The whole content of a file (bytes, or text for mode "r"), or
    TpuperfError "[WHAT ]PATH: reason" when it cannot be read."""
    try:
        with open(path, mode, **kwargs) as f:
            return f.read()
    except OSError as e:
        raise _file_error(path, e, what) from None


def one_line(message: str, limit: int = 2000) -> str:
    """An error message as the one line the CLI prints: line breaks shown as
    \\n, and the middle of a message longer than `limit` cut out (a message
    that quotes hostile input stays one readable line)."""
    message = message.replace("\r", "\\r").replace("\n", "\\n")
    if len(message) > limit:
        half = limit // 2
        message = f"{message[:half]} ... {message[-half:]}"
    return message
