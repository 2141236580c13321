"""The one exception family the CLI turns into a one-line `error: ...` message."""


class TmtError(Exception):
    """A user-facing error: bad input, bad config, missing file. The message is one line."""


def one_line(err: BaseException) -> str:
    """The message of another library's exception on one line, to quote inside a TmtError."""
    return " ".join(str(err).split())
