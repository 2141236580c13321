"""Metrics log of a run: one JSON object per line in `metrics.jsonl`, plus TensorBoard if present.

Rows look like `{"kind": "train", "step": 100, "loss": 5.1, "lr": 0.0004, ...}` or
`{"kind": "valid", "step": 1000, "bleu": 21.3, ...}`; `tmt plot` reads them back. When a run
resumes from step k, rows the interrupted run wrote after step k are dropped, so the log
describes the run that actually continues.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from transformer_mt.errors import TmtError
from transformer_mt.files import atomic_open
from transformer_mt.text_files import read_lines

log = logging.getLogger(__name__)


class MetricsLog:
    """Append-only JSONL writer (flushed per row, so a crash loses at most the last line).

    A failed write (a full disk) raises its OSError with `filename` set to the log, which the
    CLI names in its one-line message.
    """

    def __init__(self, path: str | Path, resume_step: int | None = None, tensorboard: bool = True):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if resume_step is not None and self.path.exists():
            rows = read_metrics(self.path)
            kept = [r for r in rows if r.get("step", 0) <= resume_step]
            with atomic_open(self.path) as f:  # the old rows stay whole if this fails
                f.write("".join(json.dumps(r) + "\n" for r in kept))
        self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 (closed in close())
        self._writer = (
            _tensorboard_writer(self.path.parent / "tensorboard") if tensorboard else None
        )

    def write(self, kind: str, step: int, values: dict[str, Any]) -> None:
        row = {"kind": kind, "step": step, "time": round(time.time(), 3), **values}
        with self._naming_errors():
            self._file.write(json.dumps(row) + "\n")
            self._file.flush()
        if self._writer is not None:
            for name, value in values.items():
                if isinstance(value, (int, float)):
                    self._writer.add_scalar(f"{kind}/{name}", value, step)

    def close(self) -> None:
        with self._naming_errors():
            self._file.close()
        if self._writer is not None:
            self._writer.close()

    @contextmanager
    def _naming_errors(self) -> Iterator[None]:
        """A write's OSError names no file; this one names the log."""
        try:
            yield
        except OSError as err:
            if err.filename is not None:
                raise
            raise OSError(err.errno, err.strerror or str(err), str(self.path)) from err


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """The rows of a metrics.jsonl file; a torn last line (crash mid-write: not JSON) is
    skipped.

    Raises:
        TmtError: the file is unreadable or not UTF-8, or a line is not a row (a JSON object
            with a string `kind` and a whole `step` from 0), naming the line; only the last
            may be cut short.
    """
    lines = read_lines(path)
    rows = []
    for number, line in enumerate(lines, start=1):
        try:
            row = json.loads(line)
        except (json.JSONDecodeError, RecursionError):
            if number == len(lines):  # torn
                continue
            row = None
        if isinstance(row, dict) and isinstance(row.get("kind"), str) and _is_step(row):
            rows.append(row)
        elif line.strip():
            raise TmtError(f"{path}:{number}: not a metrics row (a JSON object with kind and step)")
    return rows


def _is_step(row: dict[str, Any]) -> bool:
    """An update count: a whole number from 0 to 2**53 (beyond, a float cannot hold it)."""
    step = row.get("step")
    return isinstance(step, int) and not isinstance(step, bool) and 0 <= step <= 2**53


def _tensorboard_writer(directory: Path) -> Any:
    """A SummaryWriter when the optional `tensorboard` package is installed, else None."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        return None
    log.info("TensorBoard logs in %s", directory)
    return SummaryWriter(str(directory))
