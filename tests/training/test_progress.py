"""Progress lines for logs: when they are due, what they say, how long is left."""

import math

import pytest

from transformer_mt.training import progress
from transformer_mt.training.progress import LogClock, progress_line, remaining_seconds


def test_clock_is_due_on_the_first_step_every_n_steps_and_after_the_interval(monkeypatch):
    now = [1000.0]
    monkeypatch.setattr(progress.time, "monotonic", lambda: now[0])
    clock = LogClock(every_steps=100, every_seconds=30.0)
    assert clock.due(1)
    assert not clock.due(2)
    now[0] += 29.0
    assert not clock.due(3)
    now[0] += 1.5
    assert clock.due(4)  # 30.5 s since the last line
    assert not clock.due(5)
    assert clock.due(100)


def test_remaining_is_the_earlier_of_steps_and_minutes():
    # 10 steps/s, 1,000 steps left: 100 s; 60 minutes budget with 30 s used: 3,570 s.
    assert remaining_seconds(9_000, 30.0, 10.0, 10_000, 60) == 100.0
    assert remaining_seconds(0, 30.0, 10.0, 100_000, 1) == 30.0
    assert remaining_seconds(0, 30.0, 10.0, 100_000, None) == 10_000.0
    assert remaining_seconds(5, 90.0, 0.0, 10, 1) == 0.0  # past the budget: nothing left
    assert math.isinf(remaining_seconds(0, 1.0, 0.0, 10, None))


def test_progress_line_reads_as_documented():
    line = progress_line(1200, 3, 3.4123, 8.2e-4, 5210.4, 723.0, 2877.0)
    assert line == (
        "step 1200 | epoch 3 | loss 3.412 | lr 8.20e-04 | 5210 tok/s | 12m03s elapsed, 47m57s left"
    )
    waiting = progress_line(1200, 3, 3.4123, 8.2e-4, 5210.4, 723.0, 2877.0, data_wait=0.073)
    assert "5210 tok/s | waiting for data 7% | 12m03s" in waiting
    assert progress_line(1200, 3, 3.4123, 8.2e-4, 5210.4, 723.0, 2877.0, data_wait=0.004) == line


def test_training_without_a_terminal_logs_by_time_as_well_as_by_steps(
    tiny_experiment, tmp_path, monkeypatch, caplog
):
    """With log_every far away, the time rule alone still yields lines (interval shortened)."""
    import logging

    from transformer_mt.training.run import run_training

    monkeypatch.setattr(progress, "PROGRESS_SECONDS", 0.0)
    overrides = ["train.max_steps=6", "train.log_every=1000", "train.valid_every=1000"]
    with caplog.at_level(logging.INFO):
        assert run_training(str(tiny_experiment), str(tmp_path / "run"), overrides) == 0
    lines = [r.getMessage() for r in caplog.records if " | epoch " in r.getMessage()]
    assert [int(line.split()[1]) for line in lines] == [1, 2, 3, 4, 5, 6]
    assert all("tok/s" in line and "left" in line for line in lines)


@pytest.mark.slow
def test_redirected_training_writes_a_line_at_least_every_30_seconds(tiny_experiment, tmp_path):
    """The real thing: `tmt train > log 2>&1` for 75 s with log_every out of reach."""
    import re
    import subprocess
    import sys
    from datetime import datetime

    log_path = tmp_path / "train.log"
    overrides = ["train.max_steps=1000000", "train.warmup_steps=10", "train.log_every=1000000",
                 "train.valid_every=1000000", "train.max_minutes=1.25"]  # fmt: skip
    command = [sys.executable, "-m", "transformer_mt", "train", "--config", str(tiny_experiment),
               "--run-dir", str(tmp_path / "run"), "--set", *overrides]  # fmt: skip
    with open(log_path, "w") as log_file:
        subprocess.run(command, stdout=log_file, stderr=subprocess.STDOUT, check=True)
    stamps = [
        datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f")
        for m in re.finditer(r"^(\S+ \S+) INFO \S+: (step \d+ \| epoch|training stopped)",
                             log_path.read_text(), re.MULTILINE)
    ]  # fmt: skip
    assert len(stamps) >= 3
    gaps = [(b - a).total_seconds() for a, b in zip(stamps, stamps[1:], strict=False)]
    assert max(gaps) <= 31.0, gaps
