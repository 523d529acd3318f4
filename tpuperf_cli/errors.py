"""Errors a user can cause. The CLI prints them as one line, never a traceback."""


class TpuperfError(Exception):
    """A user-facing error: bad input, bad option, missing file.

    exit_code follows the Unix habit: 1 for bad data or a failed run,
    2 for input that does not parse (as usage errors).
    """

    exit_code = 1

    def __init__(self, message, exit_code=None):
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


class StreamError(TpuperfError):
    """A record stream that is truncated, corrupt or not msgpack."""


class ParseError(TpuperfError):
    """Text that does not parse; the message is `file:line:col: what`."""

    exit_code = 2
