"""Writing files a user keeps: never half-written, never over an input (reading text files:
`text_files.py`).

Every output of the package (translations, checkpoints, plots, exported models, caches) goes
through `atomic_path`: it is written under a temporary name in its own folder and renamed into
place only when the writer finished without an exception. A crash, a full disk or bad input on
line 2 therefore leaves an existing file as it was, and readers see the old file or the new one.
"""

from __future__ import annotations

import errno
import logging
import os
import re
import stat
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO, TypeVar

from transformer_mt.errors import MachineError, TmtError, one_line
from transformer_mt.run_layout import run_artifact
from transformer_mt.stream_names import is_stream, own_descriptor
from transformer_mt.temporaries import remove_path, remove_stale_temporaries, temporary_name
from transformer_mt.text_files import path_kind

log = logging.getLogger(__name__)

P = TypeVar("P", str, Path)  # a file's name as a caller holds it

# Errors of a write that the machine, not the user, caused: the CLI exits 1 for them.
MACHINE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO})

# How Rust's std::io::Error ends its message, which libraries written in Rust (safetensors,
# which `save_pretrained` writes weights with) quote in an exception of their own that
# carries no errno: "Error while serializing: I/O error: No space left on device (os error 28)".
RUST_OS_ERROR = re.compile(r"\(os error (\d+)\)")


@contextmanager
def atomic_path(path: str | Path, durable: bool = False) -> Iterator[Path]:
    """Yield a temporary path beside `path`; on success rename it to `path`.

    What `path` names decides how, as careful tools (GNU install, rsync) decide:
    - a regular file or a new name: written under a temporary name in the same folder, then
      renamed over it with the old file's permissions; a read-only file is refused (its mode
      says the user wants it kept, and root could otherwise replace it);
    - a symbolic link: the same, at the file it points to, so the link stays a link;
    - a device, a FIFO or `/proc/self/fd/N`: yielded itself and written through, since it is a
      stream (`--output /dev/null` must never replace the system's `/dev/null`).

    The parent folder is created when missing. The temporary name starts with a dot and ends
    with the PID, so concurrent writers never share one, and temporaries left by killed
    writers of the same name are deleted first (`remove_stale_temporaries`). The temporary may
    be a file or a folder (an exported model directory): a folder replaces an existing `path`
    folder as a whole.

    Args:
        path: the final name.
        durable: fsync the file and the folder, so that the rename survives a power loss
            (checkpoints); cheap outputs skip the cost.

    Raises:
        TmtError: the target is read-only, or cannot be written (a read-only folder, a name
            the file system refuses); `MachineError` when the disk is full.
    """
    path = Path(path)
    if is_stream(path):
        with write_errors(path, path):
            yield path
        return
    target = Path(os.path.realpath(path)) if path.is_symlink() else path
    refuse_read_only(target)
    with write_errors(path, target):
        target.parent.mkdir(parents=True, exist_ok=True)
        remove_stale_temporaries(target.parent, target.name)
        mode = stat.S_IMODE(target.stat().st_mode) if target.is_file() else None
        tmp = target.with_name(temporary_name(target.name, os.getpid()))
        remove_path(tmp)
        try:
            yield tmp
            if mode is not None and tmp.is_file():
                os.chmod(tmp, mode)
            if durable and tmp.is_file():
                _fsync(tmp, os.O_RDONLY)
            if tmp.is_dir() and target.is_dir():
                remove_path(target)
            os.replace(tmp, target)
        finally:
            remove_path(tmp)
        if durable:
            fsync_directory(target.parent)


@contextmanager
def atomic_open(path: str | Path, mode: str = "w", durable: bool = False) -> Iterator[IO]:
    """`open(path, mode)` through `atomic_path`: text is UTF-8; the file appears on success.

    A name of one of this process's descriptors (`/dev/stdout`, `/dev/fd/N`,
    `/proc/self/fd/N`) is written to that descriptor, as `-` writes to stdout: opened again by
    its name it would start the file it is open on anew (`>> log` truncated, and the shell's
    writes after ours landing over them)."""
    encoding = None if "b" in mode else "utf-8"
    fd = own_descriptor(path)
    if fd is not None:
        with (
            write_errors(Path(path), Path(path)),
            open(fd, mode, encoding=encoding, closefd=False) as f,
        ):
            yield f
        return
    with atomic_path(path, durable) as tmp, open(tmp, mode, encoding=encoding) as f:
        yield f


@contextmanager
def output_folder(
    out_dir: str | Path, inputs: Iterable[tuple[str | Path | None, str]] = ()
) -> Iterator[Path]:
    """Yield an empty temporary folder; when the block succeeds it becomes `out_dir`.

    An existing `out_dir` is replaced as a whole, so it may hold only files the new contents
    hold too (an earlier export of the same format, say); anything else in it is the user's
    and is refused, not deleted. So is an `out_dir` that is or holds one of the `inputs`
    ((path or None, what it is) pairs, as `check_output` takes), before any work
    (`check_output_folder`).

    Raises:
        TmtError: `out_dir` is a file, holds an input, or holds files the block did not write.
    """
    check_output_folder(out_dir, inputs)
    out = Path(out_dir)
    with atomic_path(out) as tmp:
        tmp.mkdir()
        yield tmp
        existing = out.iterdir() if out.is_dir() else []
        _refuse_foreign(out, sorted(p.name for p in existing if not (tmp / p.name).exists()))
        _usual_modes(tmp)


def _usual_modes(folder: Path) -> None:
    """Give the files of `folder` the mode a new file gets here (0666 less the umask): a
    library that writes through a private temporary (safetensors' model.safetensors) left its
    file readable by its owner alone, beside files others could read, so another user could
    not serve the export."""
    probe = folder / ".mode"
    probe.touch()
    usual = stat.S_IMODE(probe.stat().st_mode)
    probe.unlink()
    for path in folder.rglob("*"):
        if path.is_file() and not path.is_symlink():
            os.chmod(path, usual)


def check_folder(folder: Path, keeps: str) -> None:
    """Refuse a folder a command keeps its files in (`keeps`: who keeps what there) that is
    something else, a file in its place, or that this process may not write (it, or where it
    would be made), before any work: writing into it would fail later, the work lost.

    Raises:
        TmtError: naming it and what is wrong.
    """
    kind = path_kind(folder)
    if os.path.lexists(folder) and kind != "a directory":
        raise TmtError(f"{folder}: is {kind}; {keeps} in this folder: move it away")
    existing = folder
    while not os.path.lexists(existing) and existing != existing.parent:
        existing = existing.parent
    if os.path.isdir(existing) and not os.access(existing, os.W_OK | os.X_OK):
        where = "" if existing == folder else f" (in {existing}, where it would be made)"
        raise TmtError(
            f"{folder}: this process may not write there{where}; {keeps} in this folder: "
            "give it permission or choose another"
        )


def check_output_folder(
    out_dir: str | Path,
    inputs: Iterable[tuple[str | Path | None, str]] = (),
    marker: str | None = None,
) -> None:
    """What `output_folder` refuses before any work, for a caller to ask before its own work
    (a conversion of minutes): an `out_dir` that names no folder of its own, is no folder, or
    holds an input; with `marker`, a file every earlier output of its kind holds (an export's
    config.json), also a folder that holds files but not it: none of them can be an earlier
    output's, so they would all be lost.

    Raises:
        TmtError: naming `out_dir` and what is wrong.
    """
    out = Path(out_dir)
    if out.name in ("", ".", ".."):
        raise TmtError(f"{out_dir}: names no directory of its own; give a new directory to write")
    if out.exists() and not out.is_dir():
        kind = path_kind(out)
        raise TmtError(f"{out}: {kind}, not a directory; give a directory to export into")
    real = _real_output(out)
    for source, what in inputs:
        if source is not None and _inside(Path(source), real):
            raise TmtError(f"{out_dir}: holds the {what} ({source}); write into a new directory")
    if marker is not None and out.is_dir() and not (out / marker).exists():
        _refuse_foreign(out, sorted(p.name for p in out.iterdir()))


def _refuse_foreign(out: Path, names: list[str]) -> None:
    """Refuse writing over the folder `out` while it holds the files `names` (the user's)."""
    if names:
        raise TmtError(
            f"{out}: holds {', '.join(names[:3])}{', ...' if len(names) > 3 else ''}, "
            "which would be lost; write into a new or empty directory"
        )


def _inside(path: Path, folder: Path) -> bool:
    """Whether `path` is `folder` (resolved) or lies in it, through links too (a symlink loop
    lies nowhere)."""
    real = resolved(path)
    return real is not None and (real == folder or folder in real.parents)


def refuse_same_file(input_path: str | Path, output_path: str | Path, what: str) -> None:
    """Raise when `output_path` names the same file as `input_path` (through links too).

    Raises:
        TmtError: both names resolve to one file, which writing would destroy.
    """
    src, out = Path(input_path), Path(output_path)
    same = src.exists() and out.exists() and os.path.samefile(src, out)
    real = resolved(src)
    if same or (real is not None and real == resolved(out)):
        raise TmtError(f"{output_path}: is the {what} itself; write the output elsewhere")


def repeated_file(paths: Sequence[P]) -> tuple[P, P] | None:
    """The first of `paths` that names a file named before it (by the same name, a link or a
    hard link), and that earlier name; None when each names a file of its own. Inputs that
    would count twice (an average, an ensemble) are refused with it."""
    seen: dict[object, P] = {}
    for path in paths:
        identity = _identity(Path(path))
        if identity in seen:
            return path, seen[identity]
        seen[identity] = path
    return None


def _identity(path: Path) -> object:
    """What tells one file from another whatever names it: its device and inode (a hard link
    is the same file under another name), else its resolved path where it cannot be read."""
    try:
        info = path.stat()
    except OSError:
        return resolved(path) or path
    return (info.st_dev, info.st_ino)


def resolved(path: Path) -> Path | None:
    """`path` absolute with its links followed; None inside a symlink loop, which names no
    file (reading it fails by name where it is read)."""
    try:
        return path.resolve()
    except (RuntimeError, OSError):  # Python 3.11 raises RuntimeError for a loop, 3.13 OSError
        return None


def _real_output(path: Path) -> Path:
    """`resolved(path)` of an output, which a symlink loop cannot be: writing would fail."""
    real = resolved(path)
    if real is None:
        raise TmtError(f"{path}: is a symlink loop; write elsewhere")
    return real


def check_output(path: str | Path, inputs: Iterable[tuple[str | Path | None, str]] = ()) -> None:
    """Refuse, before any work, a file output that would destroy something the user keeps.

    One rule for every command that writes a file: the output may not be one of its inputs
    (`inputs`: (path or None, what it is) pairs), nor a file a training run reads back
    (`run_layout.run_artifact`), nor a directory, nor read-only.

    Raises:
        TmtError: naming the output and what it would destroy.
    """
    out = Path(path)
    if out.name in ("", ".", "..") or str(path).endswith(("/", os.sep)):  # `dir/`: a folder
        raise TmtError(f"{path}: names a directory, not a file; give a file name to write")
    if out.is_dir():
        raise TmtError(f"{path}: is a directory; give a file name to write")
    for name in (out, _real_output(out)):
        artifact = run_artifact(name)
        if artifact is not None:
            raise TmtError(f"{path}: is {artifact}, which training reads back; write elsewhere")
    for source, what in inputs:
        if source is not None:
            refuse_same_file(source, out, what)
    refuse_read_only(out)


def refuse_read_only(path: Path) -> None:
    """Raise when `path` is an existing regular file without write permission bits.

    The mode bits are read rather than `os.access`, which says yes to root for every file.

    Raises:
        TmtError: `path` is read-only.
    """
    if path.is_file() and not path.stat().st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH):
        raise TmtError(
            f"{path}: is read-only; make it writable (chmod u+w) to replace it, or write elsewhere"
        )


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


@contextmanager
def write_errors(path: Path, target: Path) -> Iterator[None]:
    """Turn an `OSError` of writing `target` into one line naming `path`: `MachineError` for
    what the machine lacks (a full disk), `TmtError` for the rest (permissions, a read-only
    file system, a directory in the way). Some writers report the OSError as an error of
    their own (torch.save's RuntimeError "unexpected pos" after a full disk): the OSError it
    was raised while handling is the one meant. Errors about other files, and the package's
    own errors, pass unchanged."""
    try:
        yield
    except Exception as err:
        cause = None if isinstance(err, TmtError) else _os_error_behind(err)
        if cause is None or (
            cause.filename is not None and not _near(Path(cause.filename), target)
        ):
            raise
        reason = cause.strerror or one_line(cause)
        kind = MachineError if cause.errno in MACHINE_ERRNOS else TmtError
        raise kind(f"{path}: cannot write ({reason})") from None


def _os_error_behind(err: BaseException) -> OSError | None:
    """`err` if it is an OSError, else the OSError it was raised while handling, if any, or
    the machine's error (a full disk) that another library's exception quotes
    (`_quoted_machine_error`)."""
    cause: BaseException | None = err
    while cause is not None and not isinstance(cause, OSError):
        quoted = _quoted_machine_error(cause)
        if quoted is not None:
            return quoted
        cause = cause.__context__
    return cause


def _quoted_machine_error(err: BaseException) -> OSError | None:
    """The OSError of `MACHINE_ERRNOS` whose Rust form `err`'s message quotes, else None.

    Read from the message because such an exception (safetensors' `SafetensorError`) keeps
    no errno; only the machine's errors are taken, so that a library's complaint about a file
    it reads (not found, say) is never blamed on the output.
    """
    found = RUST_OS_ERROR.search(str(err))
    number = None if found is None else int(found.group(1))
    if number not in MACHINE_ERRNOS:
        return None
    return OSError(number, os.strerror(number))


def _near(name: Path, target: Path) -> bool:
    """Whether `name` lies in `target`'s folder (the temporary, a file inside a temporary
    folder) or is a folder on the way to it."""
    name, folder = name.absolute(), target.absolute().parent
    return name == folder or folder in name.parents or name in folder.parents
