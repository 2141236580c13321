"""The one exception family the CLI turns into a one-line `error: ...` message."""


class TmtError(Exception):
    """A user-facing error: bad input, bad config, missing file. The message is one line."""
