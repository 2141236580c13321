"""API keys: the file of `tmt serve --api-keys`, the limits it gives each key, its reloading,
and the lookup of a presented key in constant time.

The file holds one key per line, then the requests and the characters it may send per
minute; `-` for no limit; `#` starts a comment; blank lines are skipped:

    # key                                   requests/min  characters/min
    team-a-Qm7vX9pRkW8nBzY6tL2s             60            20000
    ops-dashboard-3Jq8vR2xLw0pZ5nK          600           -

A key is at least `MIN_KEY_CHARS` printable ASCII characters without spaces (a UUID, as
LibreTranslate's `ltmanage keys add` makes, or `python -c "import secrets;
print(secrets.token_urlsafe(24))"`), so that a key cannot be guessed within any rate limit.
What a request costs and how the limits are kept: quotas.py.

The file is read again when it changes (its modification time, size or inode, looked at on
every lookup: one `stat`) or after SIGHUP (`reload_soon`). A file that no longer reads (a
bad line, gone while being replaced) is logged, naming its line and never a key, and the
keys loaded before stay in force; at start it is a `SettingError`, and the server does not
start.

Keys are never kept in memory as given: each is held as its SHA-256 digest, and a presented
key is hashed and compared with every digest by `hmac.compare_digest`, without stopping at a
match, so that neither the time of a lookup nor the lengths compared tell an attacker how
much of a key was right or which key it was. Log lines and metrics never name a key; the
limits know a key by its digest (`KeyEntry.id`).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
from dataclasses import dataclass

from transformer_mt.errors import SettingError, TmtError
from transformer_mt.text_files import read_document

logger = logging.getLogger("transformer_mt.serve")

MIN_KEY_CHARS = 16
# The word of the file for "no limit".
NO_LIMIT = "-"
# The largest limit a keys file may give: a trillion a minute is no limit, and a longer
# number would be read by `int` in time that grows with its square (Python refuses over 4,300
# digits).
MAX_LIMIT = 10**12


class KeysFileError(TmtError):
    """A keys file that does not read: the message names the file and line, never a key."""


@dataclass(frozen=True)
class KeyEntry:
    """One key of the file: its digest, and its limits per minute (None: none)."""

    digest: bytes  # SHA-256 of the key's UTF-8 bytes
    requests_per_minute: int | None
    characters_per_minute: int | None

    @property
    def id(self) -> str:
        """How the rate limits know the key: its digest in hex (not the key)."""
        return self.digest.hex()


def parse_keys(text: str, path: str) -> tuple[KeyEntry, ...]:
    """The keys of a keys file's `text` (see the module for the format).

    Raises:
        KeysFileError: a line that is not `KEY REQUESTS CHARACTERS`, a short key, a limit that
            is not a positive integer or `-`, a key given twice, naming `path` and the line;
            a file without a key.
    """
    entries: dict[bytes, KeyEntry] = {}
    # Lines end at "\n" only: `str.splitlines` also ends one at U+2028, U+0085 or a form
    # feed, which a comment may hold, and would number the lines after it wrongly.
    for number, line in enumerate(text.split("\n"), start=1):
        fields = line.split("#", 1)[0].split()
        if not fields:
            continue
        where = f"{path} line {number}"
        if len(fields) != 3:
            raise KeysFileError(
                f"{where}: {len(fields)} fields; expected KEY REQUESTS_PER_MINUTE "
                "CHARACTERS_PER_MINUTE"
            )
        key, requests, characters = fields
        if len(key) < MIN_KEY_CHARS or not key.isascii() or not key.isprintable():
            raise KeysFileError(
                f"{where}: a key must be at least {MIN_KEY_CHARS} printable ASCII characters"
            )
        digest = _digest(key)
        if digest in entries:
            raise KeysFileError(f"{where}: the key of an earlier line again")
        entries[digest] = KeyEntry(
            digest, _limit(requests, where, "requests"), _limit(characters, where, "characters")
        )
    if not entries:  # the server would answer every request 403
        raise KeysFileError(
            f"{path}: holds no key, so every request would be refused; add a line "
            "KEY REQUESTS_PER_MINUTE CHARACTERS_PER_MINUTE, or serve without API keys"
        )
    return tuple(entries.values())


class ApiKeys:
    """The keys of one keys file, read again when it changes. Not thread-safe: the server's
    event loop is its one user (a signal handler only sets a flag).

    Raises:
        SettingError: naming api_keys, when the file cannot be read or does not parse.
    """

    def __init__(self, path: str):
        self.path = path
        self._stale = False
        try:
            self._stamp, self._entries = self._read()
        except (OSError, TmtError) as err:
            raise SettingError("api_keys", path, _reason(err)) from None
        logger.info("api keys: %d keys from %s", len(self._entries), path)

    def __len__(self) -> int:
        return len(self._entries)

    def lookup(self, key: str) -> KeyEntry | None:
        """The entry of `key`, None when the file has no such key; compares its digest with
        every key's by `hmac.compare_digest` (see the module)."""
        self._refresh()
        digest = _digest(key)
        found = None
        for entry in self._entries:
            if hmac.compare_digest(digest, entry.digest):
                found = entry
        return found

    def reload_soon(self) -> None:
        """Read the file again at the next lookup, changed or not (SIGHUP)."""
        self._stale = True

    def _refresh(self) -> None:
        """Read the file again if it changed since it was last read (or tried), or SIGHUP
        asked; a file that does not read is logged once per change."""
        try:
            stamp = _stamp(os.stat(self.path))
        except OSError:
            stamp = None  # gone (perhaps being replaced): logged once, then awaited
        if stamp == self._stamp and not self._stale:
            return
        self._stale = False
        self._stamp = stamp
        try:
            self._stamp, self._entries = self._read()
        except (OSError, TmtError) as err:
            logger.error(
                "api keys: %s; keeping the %d keys read before", _reason(err), len(self._entries)
            )
            return
        logger.info("api keys: %d keys from %s (reloaded)", len(self._entries), self.path)

    def _read(self) -> tuple[tuple, tuple[KeyEntry, ...]]:
        with open(self.path, "rb") as file:
            stamp = _stamp(os.fstat(file.fileno()))
            text = read_document(file, self.path)  # UTF-8, an editor's byte order mark removed
        return stamp, parse_keys(text, self.path)


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).digest()


def _limit(value: str, where: str, what: str) -> int | None:
    if value == NO_LIMIT:
        return None
    number = value.lstrip("0")
    if not (value.isascii() and value.isdigit()) or not number:
        raise KeysFileError(f"{where}: {what} per minute must be a positive integer or {NO_LIMIT}")
    if len(number) > len(str(MAX_LIMIT)) or int(number) > MAX_LIMIT:
        raise KeysFileError(f"{where}: {what} per minute at most {MAX_LIMIT:,}, or {NO_LIMIT}")
    return int(number)


def _stamp(stat: os.stat_result) -> tuple:
    return (stat.st_mtime_ns, stat.st_size, stat.st_ino)


def _reason(err: BaseException) -> str:
    if isinstance(err, OSError):
        return f"cannot read {err.filename} ({err.strerror})"
    return str(err)
