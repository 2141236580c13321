"""What a run reports, and where: metrics.jsonl (and TensorBoard) on rank 0, the tqdm bar and the
log; with no terminal to draw the bar on, a plain progress line as well (see `progress`)."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm import tqdm

from transformer_mt.config import TrainConfig
from transformer_mt.run_layout import METRICS_NAME
from transformer_mt.training.loss import perplexity
from transformer_mt.training.metrics import MetricsLog
from transformer_mt.training.progress import LogClock, progress_line, remaining_seconds
from transformer_mt.training.update import UpdateResult
from transformer_mt.training.validation import ValidResult

log = logging.getLogger(__name__)


@dataclass
class UpdateTotals:
    """Sums of the updates made since the last metrics row (skipped updates left out)."""

    loss: float = 0.0
    nll: float = 0.0
    tokens: float = 0.0
    updates: int = 0
    data_seconds: float = 0.0  # spent waiting for the next batches, skipped updates included
    start: float = field(default_factory=time.perf_counter)

    def add(self, result: UpdateResult) -> None:
        self.loss += result.loss
        self.nll += result.nll
        self.tokens += result.tokens
        self.updates += 1


@dataclass(frozen=True)
class RunCounters:
    """What a train row reports besides the updates themselves."""

    epoch: int
    skipped_updates: int
    elapsed: float  # seconds of the whole run, resumed-from processes included


class TrainingReport:
    """The metrics rows, bar and log lines of one training process (files on rank 0 only).

    Args:
        run_dir: holds metrics.jsonl; rows after `step` (left by an interrupted run) are dropped.
        cfg: log_every, and max_steps / max_minutes for the bar and the time left.
        step: the step the run starts from.
        is_main: rank 0, the one that writes files and logs.
    """

    def __init__(self, run_dir: Path, cfg: TrainConfig, step: int, is_main: bool) -> None:
        self.cfg = cfg
        self.is_main = is_main
        self.metrics = MetricsLog(run_dir / METRICS_NAME, resume_step=step) if is_main else None
        self.bar = tqdm(
            total=cfg.max_steps,
            initial=step,
            unit="step",
            dynamic_ncols=True,
            disable=None if is_main else True,
        )
        self.clock = LogClock(cfg.log_every)
        self.window = UpdateTotals()

    def __enter__(self) -> TrainingReport:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.bar.close()
        if self.metrics is not None:
            self.metrics.close()

    def updated(
        self, step: int, result: UpdateResult, counters: RunCounters, data_seconds: float
    ) -> bool:
        """Count update `step`, which waited `data_seconds` for its batches; write a train
        row when one is due. Returns whether it was due."""
        self.window.data_seconds += data_seconds
        if result.applied:
            self.window.add(result)
        self.bar.update(1)
        if not self.clock.due(step):
            return False
        if self.window.updates:
            self._train_row(step, result, counters)
        self.window = UpdateTotals()
        return True

    @contextmanager
    def paused(self) -> Iterator[None]:
        """Time spent in this block (validation) does not count in the next row's tokens/s."""
        started = time.perf_counter()
        try:
            yield
        finally:
            self.window.start += time.perf_counter() - started

    def validated(self, step: int, result: ValidResult, best_score: float, best: bool) -> None:
        """A valid row and a log line (`best`: this validation set a new best score)."""
        if self.metrics is not None:
            self.metrics.write("valid", step, {**result.as_dict(), "best_score": best_score})
        bleu = "off" if result.bleu is None else f"{result.bleu:.2f}"
        log.info(
            "step %d valid loss %.4f nll %.4f ppl %.2f bleu %s%s",
            *(step, result.loss, result.nll, result.ppl, bleu),
            " (best)" if best else "",
        )

    def _train_row(self, step: int, result: UpdateResult, counters: RunCounters) -> None:
        """A metrics row, the bar's numbers, and (when the bar is off: no terminal) a line."""
        window = self.window
        seconds = max(time.perf_counter() - window.start, 1e-9)
        loss = window.loss / window.tokens
        row = {
            "loss": loss,
            "nll": window.nll / window.tokens,
            "ppl": perplexity(window.nll / window.tokens),
            "lr": result.lr,
            "grad_norm": result.grad_norm,
            "tokens_per_s": window.tokens / seconds,
            "data_wait": window.data_seconds / seconds,
            "epoch": counters.epoch,
            "skipped_updates": counters.skipped_updates,
            "elapsed": round(counters.elapsed, 3),
        }
        self.bar.set_postfix(
            loss=f"{loss:.3f}", lr=f"{result.lr:.2e}", tok_s=f"{row['tokens_per_s']:.0f}"
        )
        if self.metrics is not None:
            self.metrics.write("train", step, row)
        if self.bar.disable and self.is_main:
            rate = window.updates / seconds
            left = remaining_seconds(
                step, counters.elapsed, rate, self.cfg.max_steps, self.cfg.max_minutes
            )
            line = progress_line(
                *(step, counters.epoch, loss, result.lr, row["tokens_per_s"], counters.elapsed),
                *(left, row["data_wait"]),
            )
            log.info("%s", line)
