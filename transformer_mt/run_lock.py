"""One process per run directory: an exclusive lock on `RUN/train.lock` while `tmt train`
runs (`RUN/distill.lock` while `tmt distill` does).

The lock is `fcntl.flock` on an open file, not a PID file: the kernel drops it when the
holder's process ends for any reason, SIGKILL and out-of-memory kills included, so a lock left
by a dead run is taken over without guessing whether a recorded PID is still alive (PIDs are
reused, and a PID from another host cannot be checked at all). The file holds the holder's PID
and host only so that a refused run can say who holds it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from transformer_mt.errors import TmtError
from transformer_mt.run_layout import LOCK_NAME, LOG_NAME
from transformer_mt.text_files import path_kind

try:
    import fcntl
except ImportError:  # Windows: no flock
    fcntl = None

log = logging.getLogger(__name__)


@contextmanager
def lock_run_dir(
    run_dir: Path, lock_name: str = LOCK_NAME, run: str = "training run"
) -> Iterator[None]:
    """Hold the run directory's lock (the file `lock_name`; `run`: what holds it, in
    messages) for the duration of the block; create the directory, and remove it again if the
    block leaves nothing in it but its log (a run refused before writing anything, say for its
    tokenizer model, leaves no trace).

    Raises:
        TmtError: the path is a file or cannot be created, or another process holds the lock.
    """
    created = not run_dir.exists()
    _make_run_dir(run_dir)
    try:
        with _held(run_dir / lock_name, run):
            yield
    finally:
        if created:
            with contextlib.suppress(OSError):  # not empty: the run's files stay
                if [path.name for path in run_dir.iterdir()] == [LOG_NAME]:
                    (run_dir / LOG_NAME).unlink()
                run_dir.rmdir()


@contextmanager
def _held(path: Path, run: str) -> Iterator[None]:
    """The lock on `path` for the duration of the block."""
    if fcntl is None:
        log.warning("no file locking on this system: nothing stops a second run in %s", path.parent)
        yield
        return
    try:
        file = locked_open(path, "ab")
    except OSError as err:
        raise TmtError(f"{path}: cannot open the run lock ({err.strerror})") from None
    if file is None:
        raise TmtError(
            f"{path.parent}: another {run} is using it ({_holder(path)}, lock {path}); "
            "wait for it to finish or choose another run directory"
        )
    try:
        os.ftruncate(file.fileno(), 0)
        os.write(file.fileno(), f"pid {os.getpid()} on {socket.gethostname()}\n".encode())
        yield
    finally:
        path.unlink(missing_ok=True)  # while still held: see locked_open
        file.close()


def _holder(path: Path) -> str:
    """Who holds the lock of `path`, as the holder wrote it."""
    try:
        with open(path, "rb") as file:
            return file.read(200).decode(errors="replace").strip() or "holder not yet recorded"
    except OSError:  # released and removed meanwhile
        return "holder not yet recorded"


def _make_run_dir(run_dir: Path) -> None:
    if run_dir.exists() and not run_dir.is_dir():
        kind = path_kind(run_dir)
        raise TmtError(f"{run_dir}: is {kind}, not a run directory; choose a directory path")
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise TmtError(f"{run_dir}: cannot create the run directory ({err.strerror})") from None


def locked_open(path: Path, mode: str, encoding: str | None = None) -> IO | None:
    """`open(path, mode, encoding)` (a mode that creates a missing file) holding an exclusive
    `flock` on it, which the kernel drops when this process ends; None where another process
    holds it. Without `fcntl` (Windows) the file is opened unlocked.

    A holder removes or renames the file before it lets go (the run lock, a finished partial
    output); a process that opened the old file just before then locks a file no one else can
    see, so the lock counts only if `path` still names the locked file, else the attempt
    starts again on the new one.

    Raises:
        OSError: `path` cannot be opened.
    """
    while True:
        file = open(path, mode, encoding=encoding)  # noqa: SIM115 (the caller's to close)
        if fcntl is None:
            return file
        try:
            fcntl.flock(file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            file.close()
            return None
        if _names_open_file(path, file.fileno()):
            return file
        file.close()


def _names_open_file(path: Path, fd: int) -> bool:
    try:
        return os.path.samestat(os.stat(path), os.fstat(fd))
    except FileNotFoundError:
        return False
