"""Progress of long work on stderr: a tqdm bar on a terminal, plain lines in a log file.

tqdm redraws its bar after a carriage return, which a log file keeps as one ever longer line,
so without a terminal a `ProgressReport` writes a line of its own every few seconds instead:
`tmt translate` (inference.stream) and the hub corpus export (data.hub_export) count their work
with it. Training's lines say more (loss, learning rate, time left of two budgets) and come by
step as well as by time: `training.progress` writes them, with `duration` and
`PROGRESS_SECONDS` from here.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TextIO

from tqdm import tqdm

# Seconds between plain progress lines when the output is a log file, not a terminal.
PROGRESS_SECONDS = 30.0


def duration(seconds: float) -> str:
    """`1h02m`, `12m03s`, `45s` (whole seconds, rounded down), `0.6s` under ten seconds (a
    short job does not take "0s"); `?` for an unknown (infinite) time."""
    if seconds == float("inf"):
        return "?"
    if seconds < 10:
        return f"{seconds:.1f}s"
    seconds = int(seconds)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


@dataclass(frozen=True)
class Counted:
    """What a progress report counts, in the words of its plain lines:
    `[label: ]verb done/total noun (percent%), rate rate_unit/s, ETA eta`, e.g.
    `translated 1200/5000 lines (24%), 41.3 sentences/s, ETA 1m32s`."""

    verb: str  # "translated"
    noun: str  # "lines"
    rate_unit: str  # "sentences"; also the bar's unit
    label: str | None = None  # which work: the bar's description and each line's prefix


class ProgressReport:
    """Work done so far, on stderr: a tqdm bar, or plain lines for a log file.

    A plain line is written when at least `every_s` seconds have passed since the last one (the
    first `every_s` after the start), so short work prints nothing and the caller says when it
    is done.

    Args:
        total: how many there are to do; None: unknown (no percentage, no ETA).
        counted: what is counted, in the words of the lines.
        bar: draw a tqdm bar (a terminal); plain lines are then off.
        every_s: without a bar, the least seconds between plain lines; None: no lines.
        stream: where the bar and lines go; stderr when None.
        clock: the time in seconds (a fake one in tests).
    """

    def __init__(
        self,
        total: int | None,
        counted: Counted,
        bar: bool,
        every_s: float | None,
        stream: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.total = total
        self.counted = counted
        self.stream = stream if stream is not None else sys.stderr
        self.every_s = None if bar else every_s
        self.clock = clock
        self.bar = tqdm(
            total=total,
            desc=counted.label,
            unit=f" {counted.rate_unit}",
            disable=not bar,
            file=self.stream,
        )
        self.done = 0
        self.start = self.last = clock()

    @classmethod
    def on_stderr(cls, total: int | None, counted: Counted) -> ProgressReport:
        """A bar when stderr is a terminal, else a line every PROGRESS_SECONDS."""
        terminal = sys.stderr.isatty()
        return cls(total, counted, bar=terminal, every_s=None if terminal else PROGRESS_SECONDS)

    def update(self, n: int) -> None:
        """Count `n` more done; write a plain line if one is due."""
        self.bar.update(n)
        self.done += n
        now = self.clock()
        if self.every_s is not None and n and now - self.last >= self.every_s:
            self.last = now
            print(self.line(now - self.start), file=self.stream, flush=True)

    def line(self, elapsed: float) -> str:
        """The plain line after `elapsed` seconds (see `Counted`)."""
        what = self.counted
        prefix = f"{what.label}: " if what.label else ""
        rate = self.done / elapsed if elapsed > 0 else 0.0
        if self.total is None:
            return f"{prefix}{what.verb} {self.done} {what.noun}, {rate:.1f} {what.rate_unit}/s"
        percent = 100.0 * self.done / max(self.total, 1)
        eta = duration((self.total - self.done) / rate) if rate > 0 else "unknown"
        return (
            f"{prefix}{what.verb} {self.done}/{self.total} {what.noun} ({percent:.0f}%), "
            f"{rate:.1f} {what.rate_unit}/s, ETA {eta}"
        )

    def close(self) -> None:
        self.bar.close()


# What a library call that reports its passes is given: a report of `total` counted as
# `Counted` says (the CLI's `ProgressReport.on_stderr`), made for each pass.
Reports = Callable[[Counted, int], ProgressReport]


def silent(counted: Counted, total: int) -> ProgressReport:
    """A report that counts and shows nothing: `Reports` where none was given."""
    return ProgressReport(total, counted, bar=False, every_s=None)
