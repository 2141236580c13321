"""Output names that are streams, not files: a device, a FIFO, a socket, or a name of a
process's descriptor (`/dev/stdout`, `/proc/self/fd/N`). Such a name is written through,
never replaced by a renamed temporary file (files.py), and an output written through it is not
resumable (cli/translate_lines.py)."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

from transformer_mt.errors import TmtError


def is_stream(path: str | Path) -> bool:
    """Whether `path` (through links) is a device, FIFO or socket rather than a file or folder,
    or a name of a process's descriptor (`/dev/stdout`, `/proc/self/fd/1`, a link to one),
    which stays the descriptor it names only when written through: replacing the file a
    redirected stdout writes to would drop what the shell writes there before and after."""
    path = Path(path)
    try:
        mode = path.stat().st_mode
    except OSError:
        return False  # missing (a new file) or a dangling link
    return _names_a_descriptor(path) or not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


def _names_a_descriptor(path: Path) -> bool:
    """Whether `path` or a link it leads through is in /proc or /dev: the name as given, as
    its file (`realpath`) is the file a descriptor was opened on, not the descriptor."""
    seen: set[Path] = set()
    current = Path(os.path.abspath(path))
    while current not in seen:
        if current.parts[1:2] in (("proc",), ("dev",)):
            return True
        if not current.is_symlink():
            return False
        seen.add(current)
        current = Path(os.path.abspath(current.parent / os.readlink(current)))
    return False  # a loop of links


_DESCRIPTOR_NAMES = {"/dev/stdin": 0, "/dev/stdout": 1, "/dev/stderr": 2}
_STANDARD = ("stdin", "stdout", "stderr")  # by descriptor: Python's None when started closed


def own_descriptor(path: str | Path) -> int | None:
    """The open descriptor of this process that `path` names as given (`/dev/stdout`: 1,
    `/proc/self/fd/5`: 5), or None: another name, or a descriptor that is not open.

    Raises:
        TmtError: a standard stream (0, 1, 2) the process started without (`>&-`): the
            number may hold a file the process opened since, which the name must not reach.
    """
    name = os.path.abspath(path)
    fd = _DESCRIPTOR_NAMES.get(name)
    folder, _, number = name.rpartition("/")
    folders = ("/dev/fd", "/proc/self/fd", f"/proc/{os.getpid()}/fd")
    if fd is None and folder in folders and number.isdigit():
        fd = int(number)
    if fd is None:
        return None
    if fd < len(_STANDARD) and getattr(sys, _STANDARD[fd]) is None:
        raise TmtError(f"{path}: {_STANDARD[fd]} is closed; redirect it, or name a file")
    try:
        os.fstat(fd)
    except OSError:
        return None
    return fd
