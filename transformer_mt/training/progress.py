"""Progress a person can follow when the output is a log file, not a terminal.

tqdm draws its bar only on a terminal; under `make quickstart > log`, nohup or a batch
scheduler it stays silent. So the trainer also writes a plain line every `log_every` updates or
every `PROGRESS_SECONDS`, whichever comes first, to the run's `train.log` always and to stderr
where no bar is drawn (`PROGRESS_LOGGER`): step, epoch, loss, learning rate, tokens/s,
elapsed time and the time left against `max_minutes` / `max_steps`. Not a
`transformer_mt.progress.ProgressReport` (translation, hub export): these lines come by step as
well as by time, through `logging` (timestamped, rank 0 only), and say more than a count.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from transformer_mt.progress import PROGRESS_SECONDS, duration

# The logger of the progress lines: on a terminal, stderr's handler leaves them to the bar.
PROGRESS_LOGGER = "transformer_mt.training.progress"


@dataclass
class LogClock:
    """Says when the next metrics row / progress line is due: every `every_steps` updates, the
    first update, or `every_seconds` after the previous line."""

    every_steps: int
    every_seconds: float = field(default_factory=lambda: PROGRESS_SECONDS)
    last: float = field(default_factory=time.monotonic)

    def due(self, step: int) -> bool:
        now = time.monotonic()
        if step == 1 or step % self.every_steps == 0 or now - self.last >= self.every_seconds:
            self.last = now
            return True
        return False


def remaining_seconds(
    step: int,
    elapsed: float,
    steps_per_second: float,
    max_steps: int,
    max_minutes: float | None,
) -> float:
    """Seconds until the first of `max_steps` (at the current rate) and `max_minutes` ends."""
    by_steps = (max_steps - step) / steps_per_second if steps_per_second > 0 else float("inf")
    by_time = 60 * max_minutes - elapsed if max_minutes is not None else float("inf")
    return max(min(by_steps, by_time), 0.0)


def progress_line(
    step: int,
    epoch: int,
    loss: float,
    lr: float,
    tokens_per_second: float,
    elapsed: float,
    remaining: float,
    data_wait: float = 0.0,
) -> str:
    """One plain log line, e.g.
    `step 1200 | epoch 3 | loss 3.412 | lr 8.20e-04 | 5210 tok/s | 12m03s elapsed, 47m57s left`.

    `data_wait` (the fraction of the time spent waiting for batches) is shown from 1% on,
    where it starts to say that the data pipeline, not the model, sets the pace."""
    waiting = f" | waiting for data {data_wait:.0%}" if data_wait >= 0.01 else ""
    return (
        f"step {step} | epoch {epoch} | loss {loss:.3f} | lr {lr:.2e} | "
        f"{tokens_per_second:.0f} tok/s{waiting} | "
        f"{duration(elapsed)} elapsed, {duration(remaining)} left"
    )
