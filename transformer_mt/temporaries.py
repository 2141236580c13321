"""The temporaries of atomic writes (`files.atomic_path`): their names, which say whose output
they are and which process writes them, and the removal of those whose writer died.

A SIGKILL or a power loss in the middle of a write leaves its temporary behind, as large as
what was being written (a checkpoint); the next writer of the same output, or of the same
folder, deletes those whose process no longer runs.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
from pathlib import Path

NAME_MAX = 255  # bytes in one file name (ext4, XFS, APFS, NTFS)
PID_DIGITS = 7  # Linux's largest PID, 4,194,304, has seven digits


def temporary_name(name: str, pid: int) -> str:
    """The name `atomic_path` writes `name` under: ".NAME.tmpPID", within NAME_MAX bytes.

    A name too long for that keeps its first bytes and a digest of the whole, so that a legal
    255-byte output name still has a legal temporary and two long names never share one.
    """
    return f".{_temporary_stem(name)}.tmp{pid}"


def remove_stale_temporaries(directory: str | Path, name: str | None = None) -> list[Path]:
    """Delete temporaries in `directory` (of the output `name`, else of any) whose writing
    process no longer runs.

    A temporary is named `temporary_name(name, pid)`, optionally followed by `-` and a random
    part where several threads of one process write the same output (the encoded-corpus
    cache); those of this process's own PID are another thread's work and are kept. A SIGKILL
    or power loss during a write leaves one behind (as large as a checkpoint). The check
    needs POSIX process ids; elsewhere nothing is deleted. A PID on another host that shares
    the folder cannot be checked: such a writer's temporary would look stale only if a
    process here had ended with the same PID. Returns the deleted paths.
    """
    stem = re.escape(_temporary_stem(name)) if name is not None else ".+"
    pattern = _temporary_pattern(stem)
    removed = []
    for path in Path(directory).glob(".*.tmp*"):
        match = pattern.fullmatch(path.name)
        if match is None or path.is_symlink():
            continue
        pid, threaded = int(match.group(2)), match.group(3) is not None
        if not (threaded and pid == os.getpid()) and not another_process_runs(pid):
            remove_path(path)
            removed.append(path)
    return removed


def temporary_stem_of(name: str) -> str | None:
    """The name of the output a file `name` is the temporary of (`temporary_name`; a name too
    long for one, its stem), or None where `name` is no temporary."""
    match = _temporary_pattern(".+").fullmatch(name)
    return None if match is None else match.group(1)


def _temporary_pattern(stem: str) -> re.Pattern[str]:
    """A temporary's name: its output's `stem` (a regular expression), the writer's PID, and
    where several threads of one process write one output, `-` and a random part."""
    return re.compile(rf"\.({stem})\.tmp(\d+)(-\w+)?")


def remove_path(path: Path) -> None:
    """Remove the file, link or folder `path`, if there is one."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def _temporary_stem(name: str) -> str:
    room = NAME_MAX - len(".") - len(".tmp") - PID_DIGITS
    raw = os.fsencode(name)  # a name's bytes as the system has them, UTF-8 or not
    if len(raw) <= room:
        return name
    digest = hashlib.sha256(raw).hexdigest()[:12]
    kept = raw[: room - len(digest) - 1].decode(errors="ignore")
    return f"{kept}-{digest}"


def another_process_runs(pid: int) -> bool:
    """Whether a process `pid` other than this one runs: True when unknown (no POSIX process
    ids, or another user's process), so that a caller deletes or takes over nothing; this
    process's own id is one an earlier process had, whose work it is not doing."""
    if os.name != "posix":
        return True
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # exists, owned by another user
    return True
