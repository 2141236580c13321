"""Reading text files: UTF-8 lines split at "\\n" only, a line that is not UTF-8 named by its
number, parallel files a chunk at a time, and what kind of thing a path names.

`str.splitlines` would also split at U+2028, U+0085 and friends, which can sit inside a sentence
and would misalign parallel files; a byte order mark is no part of the first line. Writing the
files a user keeps is `files.py`'s.
"""

from __future__ import annotations

import errno
import gzip
import io
import itertools
import logging
import os
import stat
import zlib
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import BinaryIO

from transformer_mt.errors import TmtError, one_line

log = logging.getLogger(__name__)

BOM = "\ufeff"  # Windows editors start UTF-8 files with it; it is no part of the first line
# The byte order marks of UTF-16 (little- and big-endian), which Windows tools write.
UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")
NOT_UTF8 = "not UTF-8 text (UTF-16? convert it: iconv -f UTF-16 -t UTF-8 FILE)"
# The longest line a text input may hold (the longest sentences of real corpora are a few KB).
MAX_LINE_BYTES = 64 << 20
# What reading a file may raise: the disk's errors, and a cut-off or damaged `.gz`'s.
READ_ERRORS = (OSError, EOFError, zlib.error)


def decode_lines(stream: BinaryIO, name: str | Path) -> Iterator[str]:
    """Each line of the binary file or stream `stream` as text, its line end removed.

    Lazy, so a terminal's lines are decoded as they arrive. A byte order mark before the first
    line is removed with a warning: kept, it would be part of the first sentence (a perfect
    hypothesis scored 97 BLEU). A line is read up to `MAX_LINE_BYTES`: `/dev/zero` or a binary
    file given as text would otherwise grow one line until the machine runs out of memory. A
    NUL byte is refused: UTF-16 text of ASCII letters is valid UTF-8 with a NUL after every
    letter, and the NUL after each "\n" starts a line of its own, so the output would have
    more lines than the input and none of them a translation of its line.

    Raises:
        TmtError: a line is not UTF-8, holds a NUL byte, or is longer than `MAX_LINE_BYTES`;
            the message names `name`, the line (and the byte and column).
    """
    number = 0
    while raw := _readline(stream, name, number + 1):
        number += 1
        if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
            raise TmtError(
                f"{name}:{number}: a line longer than {MAX_LINE_BYTES >> 20} MiB; "
                "is this a text file with a sentence a line?"
            )
        if (nul := raw.find(b"\0")) >= 0:
            raise TmtError(f"{name}:{number}: a NUL byte at column {_column(raw, nul)}: {NOT_UTF8}")
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as err:
            hint = f": {NOT_UTF8}" if number == 1 and raw.startswith(UTF16_BOMS) else ""
            raise TmtError(
                f"{name}:{number}: not valid UTF-8 "
                f"(byte 0x{raw[err.start]:02x} at column {_column(raw, err.start)}){hint}"
            ) from None
        if number == 1 and text.startswith(BOM):
            _note_bom(name)
            text = text[1:]
        yield text.removesuffix("\n").removesuffix("\r")


def _column(raw: bytes, at: int) -> int:
    """The column of byte `at` of a line as an editor counts it, in characters (the bytes
    before it that are not UTF-8 count one each)."""
    return len(raw[:at].decode("utf-8", "replace")) + 1


def _readline(stream: BinaryIO, name: str | Path, number: int) -> bytes:
    """Line `number` of `stream`, at most `MAX_LINE_BYTES` and one byte.

    Raises:
        TmtError: the stream cannot be read there (a disk error, a cut-off or damaged `.gz`).
    """
    try:
        return stream.readline(MAX_LINE_BYTES + 1)
    except READ_ERRORS as err:
        raise TmtError(f"{name}:{number}: cannot read ({_why(err)})") from None


def _why(err: BaseException) -> str:
    """The reason of one of `READ_ERRORS`, in a few words."""
    return (err.strerror if isinstance(err, OSError) else None) or one_line(err)


def open_binary(path: str | Path) -> BinaryIO:
    """The file `path` in bytes, a `.gz` decompressed as it is read.

    Raises:
        OSError: as `open` (a missing file: FileNotFoundError).
    """
    path = Path(path)
    return gzip.open(path) if path.suffix == ".gz" else open(path, "rb")  # type: ignore[return-value]


def read_document(stream: BinaryIO, name: str | Path) -> str:
    """A whole document read from `stream` as text, its line ends kept as they are (documents
    are written back byte for byte); a byte order mark and bad UTF-8 as in `decode_lines`.

    Raises:
        TmtError: not UTF-8, naming `name`, the line, byte and column (`decode_lines`' words);
            unreadable (a damaged `.gz`).
    """
    try:
        raw = stream.read()
    except READ_ERRORS as err:
        raise TmtError(f"{name}: cannot read ({_why(err)})") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        for _ in decode_lines(io.BytesIO(raw), name):  # raises at the first bad line
            pass
        raise
    if text.startswith(BOM):
        _note_bom(name)
        text = text[1:]
    return text


_BOMS_NOTED: set[str] = set()  # the files whose byte order mark was noted


def _note_bom(name: str | Path) -> None:
    """Warn that `name` starts with a byte order mark, once a process: a file read twice
    (checked to its end, then used, as `tmt score --nbest` reads its list) is noted once."""
    if str(name) not in _BOMS_NOTED:
        _BOMS_NOTED.add(str(name))
        log.warning("%s: starts with a UTF-8 byte order mark; it was removed", name)


# stat's file types other than a regular file, as a message names them.
FILE_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a named pipe (FIFO)"),
    (stat.S_ISSOCK, "a socket"),
)


REGULAR = "a file"  # what `path_kind` calls a regular file
SPECIAL = "a special file"  # a file type FILE_KINDS does not name


def path_kind(path: Path) -> str:
    """What `path` is, in words: `REGULAR`, one of `FILE_KINDS`' names or `SPECIAL` (a link
    followed to its target), or why it is none ("missing", "a symlink loop", ...)."""
    try:
        mode = os.stat(path).st_mode  # follows symlinks: the file a reader would open
    except FileNotFoundError:
        return "a symlink to a missing file" if path.is_symlink() else "missing"
    except OSError as err:
        if err.errno == errno.ELOOP:
            return "a symlink loop"
        return f"cannot be examined ({err.strerror})"
    if stat.S_ISREG(mode):
        return REGULAR
    return next((name for test, name in FILE_KINDS if test(mode)), SPECIAL)


def file_problem(path: Path) -> str | None:
    """What keeps `path` from being read as a file ("missing", "a named pipe (FIFO), not a
    regular file", ...); None for a regular file this process may read. A reader that opened
    a FIFO would wait for a writer that never comes."""
    kind = path_kind(path)
    if kind == SPECIAL or kind in (name for _, name in FILE_KINDS):
        return f"{kind}, not a regular file"
    if kind != REGULAR:
        return kind
    try:
        # O_NONBLOCK: were a FIFO swapped in after the stat, opening it returns at once.
        os.close(os.open(path, os.O_RDONLY | os.O_NONBLOCK))
    except PermissionError:
        return "unreadable (permission denied)"
    except OSError as err:
        return f"unreadable ({err.strerror})"
    return None


def read_lines(path: str | Path) -> list[str]:
    """All lines of a UTF-8 text file (`.gz` decompressed), without line ends.

    Raises:
        TmtError: the file is missing, unreadable or not UTF-8 (see `decode_lines`).
    """
    return list(iter_lines(path))


def iter_lines(path: str | Path) -> Iterator[str]:
    """`read_lines`, one line at a time: for files larger than memory.

    Raises:
        TmtError: as `read_lines`, when the bad part is reached.
    """
    path = Path(path)
    try:
        f = open_binary(path)
    except FileNotFoundError:
        raise TmtError(f"{path}: file not found") from None
    except OSError as err:
        raise TmtError(f"{path}: cannot read ({_why(err)})") from None
    with f:
        yield from decode_lines(f, path)


def count_lines(path: str | Path) -> int:
    """The lines of the regular file `path` (a `.gz` decompressed) as `decode_lines` splits
    them, counted in its bytes (a last line without a line end counts): nothing is decoded or
    held. A total for progress, and line counts compared before any work; a pipe cannot be
    counted before it is read, and is not given here."""
    count, last = 0, b"\n"
    try:
        with open_binary(path) as f:
            while block := f.read(1 << 20):
                count += block.count(b"\n")
                last = block[-1:]
    except READ_ERRORS as err:
        raise TmtError(f"{path}: cannot read ({_why(err)})") from None
    return count + (last != b"\n")


def parallel_chunks(
    first: Iterable[str], second: Iterable[str], size: int, check: Callable[[int, int], None]
) -> Iterator[tuple[list[str], list[str]]]:
    """The lines of two parallel files, `size` pairs at a time, holding one chunk only.

    `check(n_first, n_second)` is called with both line counts once both ended, before the
    last chunk is yielded, and raises for counts the caller refuses (a shorter file, no lines):
    a caller that writes as it goes discards its output then. The longer file's extra lines
    are counted, not held, so the message can say both counts.
    """
    missing = object()
    chunk: tuple[list[str], list[str]] = ([], [])
    counts = [0, 0]
    for pair in itertools.zip_longest(first, second, fillvalue=missing):
        counts[0] += pair[0] is not missing
        counts[1] += pair[1] is not missing
        if missing in pair:
            continue
        chunk[0].append(pair[0])
        chunk[1].append(pair[1])
        if len(chunk[0]) == size:
            yield chunk
            chunk = ([], [])
    check(*counts)
    if chunk[0]:
        yield chunk
