"""An output written chunk by chunk that an interrupted run continues: `tmt translate` of a file.

Beside the output `OUT` a run writes `.OUT.partial` (the translations of the chunks done so far)
and `.OUT.partial.json` (what the run is and how far it got: the `fingerprint` of its input,
checkpoint and flags, the input lines done, the partial's size then, and the writer's PID).
The writer holds an exclusive `fcntl.flock` on the partial while it runs, which a second run of
the same output is refused by; the kernel drops it when the writer ends for any reason, so a
rerun after a crash or a reboot continues (a recorded PID that is alive proves nothing: PIDs
are reused, and another program had been blamed).
After every chunk the partial is flushed and synced before the sidecar says it is done, so a
run stopped at any moment (Ctrl-C, SIGTERM, SIGKILL, a full disk) leaves a sidecar that tells
the truth; bytes written after it are cut off when the run is continued. A rerun with the same
fingerprint continues after the lines done; any other finds a note and starts afresh. The
output appears, renamed from the partial, only when the last chunk is written, and the sidecar
goes with it: the rule of `files.atomic_path`, but kept across runs.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

from transformer_mt.errors import TmtError, shown_value
from transformer_mt.files import atomic_open, refuse_read_only, write_errors
from transformer_mt.run_lock import locked_open

PARTIAL = ".partial"


def file_identity(path: str | Path) -> dict[str, object]:
    """What says a file is unchanged: its absolute path, size and modification time."""
    info = os.stat(path)
    return {"path": os.path.abspath(path), "size": info.st_size, "mtime_ns": info.st_mtime_ns}


def partial_paths(path: str | Path) -> tuple[Path, Path]:
    """The partial output of `path` and its sidecar: `.NAME.partial`, `.NAME.partial.json`."""
    target = Path(os.path.realpath(path))
    partial = target.with_name(f".{target.name}{PARTIAL}")
    return partial, partial.with_name(partial.name + ".json")


class PartialOutput:
    """The partial output of one run, opened by `resumable_output`.

    Attributes:
        file: where translations are written (text, UTF-8), after what earlier runs wrote.
        lines_done: input lines whose translations the partial holds.
        resumed: input lines an earlier run had translated (0: a fresh start).
        note: what became of an earlier run's partial (None: there was none).
    """

    def __init__(self, path: str | Path, fingerprint: dict[str, object], lines_per_input: int):
        self.path = Path(path)
        self.partial, self.sidecar = partial_paths(path)
        self.fingerprint = json.loads(json.dumps(fingerprint))  # as it reads back
        self.lines_per_input = lines_per_input
        self.note: str | None = None
        # Open, and locked, as long as the run writes; closed by `finish` or `abandon`.
        self.file: TextIO = self._locked_partial()
        try:
            self.resumed = self._earlier_lines()
        except BaseException:
            self.file.close()
            raise
        self.lines_done = self.resumed

    def commit(self, lines_done: int) -> None:
        """Record that the partial holds the translations of `lines_done` input lines."""
        self.file.flush()
        os.fsync(self.file.fileno())
        self.lines_done = lines_done
        self._write_sidecar()

    def finish(self) -> None:
        """Rename the partial to the output (with an existing output's permissions) and remove
        the sidecar, both while still locked and the sidecar first: a run starting meanwhile
        finds the partial locked, or no partial and no sidecar, never the output under the
        partial's name nor this run's sidecar beside a partial of its own (`_locked_partial`)."""
        self.file.flush()
        target = self.partial.with_name(self.partial.name[1 : -len(PARTIAL)])
        if target.is_file():
            os.chmod(self.partial, stat.S_IMODE(target.stat().st_mode))
        self.sidecar.unlink(missing_ok=True)
        os.replace(self.partial, target)
        self.file.close()

    def abandon(self) -> None:
        """Close the partial; remove it and the sidecar first (still locked, as `finish`
        renames) when they hold nothing to continue."""
        if self.lines_done == 0:
            self.sidecar.unlink(missing_ok=True)
            self.partial.unlink(missing_ok=True)
        self.file.close()

    def _locked_partial(self) -> TextIO:
        """The partial, opened for appending and locked (see the module; `run_lock.locked_open`:
        a run that finished renamed its partial, one with nothing to keep removed it, both
        while they held the lock).

        Raises:
            TmtError: another run holds the lock.
        """
        file = locked_open(self.partial, "a", encoding="utf-8")
        if file is None:
            pid = (self._read_sidecar() or {}).get("pid")
            who = f" (PID {pid})" if isinstance(pid, int) else ""
            raise TmtError(f"{self.path}: another run{who} is writing it; wait for it, or stop it")
        return file  # type: ignore[return-value]

    def _earlier_lines(self) -> int:
        """The lines an earlier run of the same fingerprint left, its partial cut to the size
        its sidecar records; 0 (and both emptied, with a note) for any other run's."""
        earlier = self._read_sidecar()
        if earlier is None:
            os.ftruncate(self.file.fileno(), 0)
            self._write_sidecar(lines_done=0)
            return 0
        lines, recorded = earlier.get("lines_done"), earlier.get("bytes")
        if earlier.get("fingerprint") != self.fingerprint:
            differ = _differences(earlier.get("fingerprint"), self.fingerprint)
            what = f"{', '.join(differ)} differ" if differ else "its record is not readable"
            self.note = f"{self.partial.name} was left by another run ({what}); starting afresh"
        elif self._holds(lines, recorded):
            os.truncate(self.partial, recorded)
            self._write_sidecar(lines_done=lines)
            return lines
        else:
            self.note = (
                f"{self.sidecar.name} does not match {self.partial.name} (lines done "
                f"{shown_value(json.dumps(lines))}, bytes {shown_value(json.dumps(recorded))}); "
                "starting afresh"
            )
        os.ftruncate(self.file.fileno(), 0)
        self._write_sidecar(lines_done=0)
        return 0

    def _holds(self, lines: object, size: object) -> bool:
        """Whether the partial's first `size` bytes are the translations of `lines` input lines:
        whole numbers, and as many line ends as those lines write (a sidecar edited or damaged
        by hand would otherwise have the run skip lines, or translate some twice)."""
        counts = (lines, size)
        if not all(type(v) is int and v >= 0 for v in counts):  # bool is an int, not a count
            return False
        if not self.partial.is_file() or self.partial.stat().st_size < size:
            return False
        ends, left = 0, size
        with open(self.partial, "rb") as f:
            while left:
                block = f.read(min(left, 1 << 20))
                if not block:
                    return False
                ends, left = ends + block.count(b"\n"), left - len(block)
        return ends == lines * self.lines_per_input

    def _read_sidecar(self) -> dict | None:
        try:
            data = json.loads(self.sidecar.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError, RecursionError):
            return {}  # unreadable: another run's, to be replaced
        return data if isinstance(data, dict) else {}

    def _write_sidecar(self, lines_done: int | None = None) -> None:
        done = self.lines_done if lines_done is None else lines_done
        size = self.partial.stat().st_size if self.partial.is_file() else 0
        record = {
            "fingerprint": self.fingerprint,
            "lines_done": done,
            "bytes": size,
            "pid": os.getpid(),
        }
        with atomic_open(self.sidecar) as f:
            json.dump(record, f, indent=1)


@contextlib.contextmanager
def resumable_output(
    path: str | Path, fingerprint: dict[str, object], lines_per_input: int = 1
) -> Iterator[PartialOutput]:
    """The partial output of `path` for a run described by `fingerprint` (JSON values: what
    decides the output, e.g. the identities of its input files and its flags), which writes
    `lines_per_input` lines for each input line; renamed to `path` when the block succeeds,
    kept for a rerun when it fails with lines done.

    Raises:
        TmtError: `path` is read-only or cannot be written, or another running process is
            writing it; `MachineError` when the disk is full.
    """
    target = Path(os.path.realpath(path))
    refuse_read_only(target)
    with write_errors(Path(path), target):
        target.parent.mkdir(parents=True, exist_ok=True)
        output = PartialOutput(path, fingerprint, lines_per_input)
        try:
            yield output
        except BaseException:
            output.abandon()
            raise
        output.finish()


def _differences(earlier: object, now: dict[str, object]) -> list[str]:
    """The keys of `now` whose values `earlier` (a fingerprint read back) does not share."""
    if not isinstance(earlier, dict):
        return []
    keys = sorted(set(earlier) | set(now))
    return [key for key in keys if earlier.get(key) != now.get(key)]
