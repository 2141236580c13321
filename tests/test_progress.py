"""Progress on stderr: when the plain lines for a log file come, what they say, and the choice
between them and a bar."""

import io
import sys

import pytest

from transformer_mt import progress
from transformer_mt.inference.stream import TRANSLATED
from transformer_mt.progress import Counted, ProgressReport, duration


def test_lines_come_after_the_interval_and_read_rate_and_eta():
    stream, now = io.StringIO(), [0.0]
    report = ProgressReport(1000, TRANSLATED, False, 30.0, stream=stream, clock=lambda: now[0])
    now[0] = 10.0
    report.update(100)  # before the interval: nothing
    now[0] = 40.0
    report.update(100)
    now[0] = 50.0
    report.update(300)  # 10 s after the last line: nothing
    assert stream.getvalue() == "translated 200/1000 lines (20%), 5.0 sentences/s, ETA 2m40s\n"
    unknown_total = ProgressReport(None, TRANSLATED, False, 1.0, io.StringIO())
    assert unknown_total.line(4.0) == "translated 0 lines, 0.0 sentences/s"


def test_a_label_names_the_work_on_each_line():
    counted = Counted(verb="read", noun="pairs", rate_unit="pairs", label="hub split train")
    report = ProgressReport(4, counted, False, None, io.StringIO(), clock=lambda: 0.0)
    report.update(3)
    assert report.line(2.0) == "hub split train: read 3/4 pairs (75%), 1.5 pairs/s, ETA 0.7s"
    assert report.line(0.0).endswith("0.0 pairs/s, ETA unknown")


class _Stderr(io.StringIO):
    def __init__(self, terminal: bool):
        super().__init__()
        self.terminal = terminal

    def isatty(self) -> bool:
        return self.terminal


@pytest.mark.parametrize("terminal", [True, False])
def test_on_stderr_draws_a_bar_on_a_terminal_and_writes_lines_in_a_log_file(terminal, monkeypatch):
    stderr = _Stderr(terminal)
    monkeypatch.setattr(sys, "stderr", stderr)
    monkeypatch.setattr(progress, "PROGRESS_SECONDS", 0.0)
    report = ProgressReport.on_stderr(2, TRANSLATED)
    report.update(1)
    report.update(1)
    report.close()
    written = stderr.getvalue()
    assert ("\r" in written) == terminal  # tqdm redraws its line; a log file gets whole lines
    plain = [line for line in written.splitlines() if line.startswith("translated ")]
    assert [line.split()[1] for line in plain] == ([] if terminal else ["1/2", "2/2"])


def test_durations_read_in_hours_minutes_and_seconds():
    assert duration(3725) == "1h02m"
    assert duration(723.9) == "12m03s"
    assert duration(45.9) == "45s"
    assert duration(0.25) == "0.2s" and duration(9.94) == "9.9s"
    assert duration(float("inf")) == "?"
