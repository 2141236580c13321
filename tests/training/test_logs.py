"""The run's `train.log`: what a run said stays with it, and a log that cannot be written
neither floods stderr nor hides the error that stopped the run."""

import errno
import logging

import pytest

from transformer_mt.errors import MachineError
from transformer_mt.run_layout import LOG_NAME
from transformer_mt.training.logs import log_file

log = logging.getLogger("transformer_mt.training.test")


class _FullDisk:
    """A stream whose every write and flush fails as on a full disk."""

    def write(self, text: str = "") -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    flush = close = write


def test_the_runs_lines_and_the_error_that_stopped_it_are_kept(tmp_path, caplog):
    with pytest.raises(ValueError), caplog.at_level("INFO"), log_file(tmp_path, is_main=True):
        log.info("step 1")
        raise ValueError("bad\nvalue")
    lines = (tmp_path / LOG_NAME).read_text(encoding="utf-8").splitlines()
    assert lines[0].endswith("INFO transformer_mt.training.test: step 1")
    assert lines[1].endswith("ERROR transformer_mt.training: stopped: bad value")


def test_a_full_disk_is_one_warning_and_the_runs_own_error_stays(tmp_path, capsys, caplog):
    """Logging had printed a traceback for every line, and the log's close had replaced the
    error naming the checkpoint that could not be written with one naming no file."""
    stopped = MachineError(f"{tmp_path}/best.pt: cannot write (No space left on device)")
    logging_to = log_file(tmp_path, is_main=True)
    with pytest.raises(MachineError) as caught, caplog.at_level("INFO"), logging_to:
        (handler,) = [h for h in logging.getLogger().handlers if hasattr(h, "broken")]
        handler.stream = _FullDisk()
        for step in range(3):
            log.info("step %d", step)
        raise stopped
    assert caught.value is stopped
    err = capsys.readouterr().err
    assert err.splitlines() == [
        f"warning: {tmp_path / LOG_NAME}: cannot write (No space left on device); the run's "
        "lines go to stderr only"
    ]


def test_a_record_that_cannot_be_formatted_does_not_stop_the_log(tmp_path, capsys):
    """Only a failed write (an OSError) stops train.log: a bad record had been taken for a
    full disk, and the lines after it were lost."""
    with log_file(tmp_path, is_main=True):
        (handler,) = [h for h in logging.getLogger().handlers if hasattr(h, "broken")]
        for message, args in (("bad format %d", ("x",)), ("the next line", None)):
            handler.handle(logging.LogRecord("t", logging.WARNING, "", 0, message, args, None))
    assert "the next line" in (tmp_path / LOG_NAME).read_text(encoding="utf-8")
    assert "cannot write" not in capsys.readouterr().err
