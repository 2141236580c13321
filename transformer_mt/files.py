"""Reading text files, and writing files a user keeps: never half-written, never over an input.

Text is read as UTF-8 split at "\\n" only (`str.splitlines` would also split at U+2028, U+0085
and friends, which can sit inside a sentence and would misalign parallel files); a line that is
not UTF-8 stops the reader with its number.

Every output of the package (translations, checkpoints, plots, exported models, caches) goes
through `atomic_path`: it is written under a temporary name in its own folder and renamed into
place only when the writer finished without an exception. A crash, a full disk or bad input on
line 2 therefore leaves an existing file as it was, and readers see the old file or the new one.
"""

from __future__ import annotations

import gzip
import os
import shutil
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from transformer_mt.errors import TmtError, one_line


def decode_lines(lines: Iterable[bytes], name: str | Path) -> Iterator[str]:
    """Each byte line of `lines` (a binary file or stream) as text, its line end removed.

    Lazy, so a terminal's lines are decoded as they arrive.

    Raises:
        TmtError: a line is not UTF-8; the message names `name`, the line, byte and column.
    """
    for number, raw in enumerate(lines, start=1):
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as err:
            raise TmtError(
                f"{name}:{number}: not valid UTF-8 "
                f"(byte 0x{raw[err.start]:02x} at column {err.start + 1})"
            ) from None
        yield text.removesuffix("\n").removesuffix("\r")


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
        with gzip.open(path) if path.suffix == ".gz" else open(path, "rb") as f:
            yield from decode_lines(f, path)
    except FileNotFoundError:
        raise TmtError(f"{path}: file not found") from None
    except (OSError, EOFError) as err:
        raise TmtError(f"{path}: cannot read ({one_line(err)})") from None


@contextmanager
def atomic_path(path: str | Path, durable: bool = False) -> Iterator[Path]:
    """Yield a temporary path beside `path`; on success rename it to `path`.

    The parent folder is created when missing. The temporary name starts with a dot and ends
    with the PID, so concurrent writers never share one. It may be a file or a folder (an
    exported model directory): a folder replaces an existing `path` folder as a whole.

    Args:
        path: the final name.
        durable: fsync the file and the folder, so that the rename survives a power loss
            (checkpoints); cheap outputs skip the cost.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    _remove(tmp)
    try:
        yield tmp
        if durable and tmp.is_file():
            _fsync(tmp, os.O_RDONLY)
        if tmp.is_dir() and path.is_dir():
            _remove(path)
        os.replace(tmp, path)
    finally:
        _remove(tmp)
    if durable:
        fsync_directory(path.parent)


@contextmanager
def atomic_open(path: str | Path, mode: str = "w", durable: bool = False) -> Iterator[IO]:
    """`open(path, mode)` through `atomic_path`: text is UTF-8; the file appears on success."""
    with atomic_path(path, durable) as tmp:
        encoding = None if "b" in mode else "utf-8"
        with open(tmp, mode, encoding=encoding) as f:
            yield f


@contextmanager
def output_folder(out_dir: str | Path) -> Iterator[Path]:
    """Yield an empty temporary folder; when the block succeeds it becomes `out_dir`.

    An existing `out_dir` is replaced as a whole, so it may hold only files the new contents
    hold too (an earlier export of the same format, say); anything else in it is the user's
    and is refused, not deleted.

    Raises:
        TmtError: `out_dir` is a file, or a folder holding files the block did not write.
    """
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise TmtError(f"{out}: is a file, not a directory; give a directory to export into")
    with atomic_path(out) as tmp:
        tmp.mkdir()
        yield tmp
        existing = out.iterdir() if out.is_dir() else []
        foreign = sorted(p.name for p in existing if not (tmp / p.name).exists())
        if foreign:
            raise TmtError(
                f"{out}: holds {', '.join(foreign[:3])}{', ...' if len(foreign) > 3 else ''}, "
                "which would be lost; write into a new or empty directory"
            )


def refuse_same_file(input_path: str | Path, output_path: str | Path, what: str) -> None:
    """Raise when `output_path` names the same file as `input_path` (through links too).

    Raises:
        TmtError: both names resolve to one file, which writing would destroy.
    """
    src, out = Path(input_path), Path(output_path)
    same = src.exists() and out.exists() and os.path.samefile(src, out)
    if same or src.resolve() == out.resolve():
        raise TmtError(f"{output_path}: is the {what} itself; write the output elsewhere")


def fsync_directory(directory: Path) -> None:
    """Persist a rename inside `directory` (POSIX); directories cannot be opened on Windows."""
    if os.name == "posix":
        _fsync(directory, os.O_RDONLY)


def _fsync(path: Path, flags: int) -> None:
    fd = os.open(path, flags)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)
