"""Writing files a user keeps: never half-written, never over an input.

Every output of the package (translations, checkpoints, plots, exported models, caches) goes
through `atomic_path`: it is written under a temporary name in its own folder and renamed into
place only when the writer finished without an exception. A crash, a full disk or bad input on
line 2 therefore leaves an existing file as it was, and readers see the old file or the new one.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from transformer_mt.errors import TmtError


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
