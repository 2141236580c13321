"""The one exception family the CLI turns into a one-line `error: ...` message.

Library messages describe the value and the reason; only the CLI (`transformer_mt/cli/`) knows
flag names. A bad argument of a library call is a `SettingError`, which names the argument, so
that the CLI can name the flag that set it instead.
"""

from __future__ import annotations

from collections.abc import Mapping

VALUE_CHARS = 200  # of a user's value quoted in a message; the rest is cut


class TmtError(Exception):
    """A user-facing error: bad input, bad config, missing file. The message is one line."""


class SettingError(TmtError):
    """A value of one named setting (an argument of a library call) that cannot be used.

    The message reads `setting=value: reason` (`setting: reason` when there is no value to
    show); the CLI shows `--flag value: reason` for the settings its flags set.
    """

    def __init__(self, setting: str, value: object, reason: str):
        self.setting, self.value, self.reason = setting, value, reason
        shown = setting if value is None else f"{setting}={shown_value(value)}"
        super().__init__(f"{shown}: {reason}")


def printable(text: str, limit: int = 500) -> str:
    """`text` for a message or a log line: control and other unprintable characters escaped
    as in Python literals (so that a value cannot write a line of its own into a log or
    forge an `error:` line), cut at `limit` characters."""
    escaped = "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text[:limit])
    return escaped + ("..." if len(text) > limit else "")


def shown_value(value: object) -> str:
    """A user's value (a flag's, a setting's) as a message quotes it: `printable`, cut at
    `VALUE_CHARS` (a 5,000-character language code is a mistake, not something to read)."""
    return printable(str(value), VALUE_CHARS)


def string_items(value: object, setting: str, allow_empty: bool = True) -> tuple[str, ...]:
    """The strings of `value`, where a sequence of strings is wanted, read once (so that a
    generator given is not used up by the check); refused: a lone string or bytes (which would
    be read one character at a time, each a text of its own), an item that is not a string,
    or (unless `allow_empty`) no item at all.

    Raises:
        SettingError: naming `setting`.
    """
    if isinstance(value, str | bytes):
        reason = "a sequence of strings is wanted, not one string: put it in a list"
        raise SettingError(setting, value, reason)
    try:
        items = tuple(value)  # type: ignore[call-overload]
    except TypeError:
        raise SettingError(setting, value, "a sequence of strings is wanted") from None
    if not allow_empty and not items:
        raise SettingError(setting, None, "none given; name at least one")
    for i, item in enumerate(items):
        if not isinstance(item, str):
            kind = type(item).__name__
            raise SettingError(f"{setting}[{i}]", None, f"{kind}, not a string")
    return items


def pair_items(value: object, setting: str) -> tuple[tuple[str, str], ...]:
    """The (str, str) pairs of `value` (a sequence of pairs, or a mapping read as its items),
    read once as `string_items` reads; refused: a lone string, and an item that is not two
    strings (a "de-en" where ("de", "en") is wanted, say).

    Raises:
        SettingError: naming `setting`, or the item as `setting[i]`.
    """
    if isinstance(value, str | bytes):
        raise SettingError(setting, value, "a sequence of pairs is wanted, not one string")
    if isinstance(value, Mapping):
        value = value.items()
    try:
        items = tuple(value)  # type: ignore[call-overload]
    except TypeError:
        raise SettingError(setting, value, "a sequence of (str, str) pairs is wanted") from None
    pairs = []
    for i, item in enumerate(items):
        pair = () if isinstance(item, str | bytes) else tuple(item) if _iterable(item) else ()
        if len(pair) != 2 or not all(isinstance(x, str) for x in pair):
            raise SettingError(f"{setting}[{i}]", item, "expected a pair of two strings")
        pairs.append(pair)
    return tuple(pairs)


def _iterable(value: object) -> bool:
    try:
        iter(value)  # type: ignore[call-overload]
    except TypeError:
        return False
    return True


def one_line(err: BaseException) -> str:
    """The message of another library's exception on one line, to quote inside a TmtError."""
    return " ".join(str(err).split())


class MachineError(TmtError):
    """The machine failed the work, not the user's input: a full disk, too little memory.

    The CLI exits with status 1 for these (2 for the user's own mistakes), so that a
    supervisor or a batch system can tell a job to retry elsewhere from a job to fix.
    """
