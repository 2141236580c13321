"""Where training's log lines go: stderr (rank 0 below ERROR; on a terminal without the
progress lines, which the bar shows) and, while a run trains, the run directory's `train.log`,
so that what a run said stays with it after its terminal is gone."""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import datasets

from transformer_mt.run_layout import LOG_NAME
from transformer_mt.training.progress import PROGRESS_LOGGER

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def setup_logging(is_main: bool) -> None:
    """Logs on stderr; only rank 0 speaks below ERROR: the ranks read one config and one
    corpus, so each warning would come once per rank. On a terminal the progress lines are
    the bar's (they go to the run's log file only); off one the `datasets` progress bars are
    off: in a log file each redraw is a line of noise."""
    logging.basicConfig(
        level=logging.INFO if is_main else logging.ERROR, format=LOG_FORMAT, stream=sys.stderr
    )
    if sys.stderr.isatty():
        for handler in logging.getLogger().handlers:
            if not any(isinstance(f, _NotProgress) for f in handler.filters):
                handler.addFilter(_NotProgress())
    else:
        datasets.disable_progress_bars()


class _NotProgress(logging.Filter):
    """Every record but the progress lines (`training.progress.PROGRESS_LOGGER`)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.name != PROGRESS_LOGGER


@contextmanager
def log_file(run_dir: Path, is_main: bool) -> Iterator[None]:
    """Rank 0's log lines also appended to the run's `train.log` while training: what a run
    said (its progress, warnings, why it stopped, the error that ended it) stays with it after
    the terminal is gone.
    Opened under the run directory's lock, so that two runs never write into one."""
    if not is_main:
        yield
        return
    handler = _RunLog(run_dir / LOG_NAME, encoding="utf-8")
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    handler.setLevel(logging.INFO)
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        yield
    except Exception as err:  # the one line the command prints, kept with the run's lines
        name, message = "transformer_mt.training", f"stopped: {' '.join(str(err).split())}"
        handler.handle(logging.LogRecord(name, logging.ERROR, __file__, 0, message, None, None))
        raise
    finally:
        root.removeHandler(handler)
        with contextlib.suppress(OSError):  # a full disk: the error that ended the run stays
            handler.close()


class _RunLog(logging.FileHandler):
    """`train.log`, which stops on its first failed write (a full disk) with one warning on
    stderr: logging's own way printed a traceback for every line while the disk stayed full,
    and its close replaced the error that stopped the run (naming the checkpoint it could not
    write) with one naming no file."""

    broken = False

    def emit(self, record: logging.LogRecord) -> None:
        if not self.broken:
            super().emit(record)

    def handleError(self, record: logging.LogRecord) -> None:  # noqa: N802 (logging's name)
        err = sys.exc_info()[1]
        if not isinstance(err, OSError):  # a record that cannot be formatted: logging's way
            super().handleError(record)
            return
        if self.broken:
            return
        self.broken = True
        reason = getattr(err, "strerror", None) or err
        with contextlib.suppress(OSError, ValueError, AttributeError):  # stderr may be gone
            print(
                f"warning: {self.baseFilename}: cannot write ({reason}); the run's lines go to "
                "stderr only",
                file=sys.stderr,
            )
