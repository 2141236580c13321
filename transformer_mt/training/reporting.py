"""What a run reports, and where: metrics.jsonl (and TensorBoard) on rank 0, the tqdm bar and the
log; with no terminal to draw the bar on, a plain progress line as well (see `progress`).

The updates' figures are summed where they are, on the device, and read once per row: the
training loop never waits for a GPU to report an update."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from transformer_mt.config import TrainConfig
from transformer_mt.run_layout import METRICS_NAME
from transformer_mt.training.loss import perplexity
from transformer_mt.training.metrics import MetricsLog
from transformer_mt.training.progress import (
    PROGRESS_LOGGER,
    LogClock,
    progress_line,
    remaining_seconds,
)
from transformer_mt.training.update import LaunchedUpdate
from transformer_mt.training.validation import ValidResult

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class WindowFigures:
    """`UpdateTotals` read: the sums of the applied updates, the latest gradient norm and lr."""

    loss: float
    nll: float
    tokens: float
    updates: int
    grad_norm: float
    lr: float


@dataclass
class UpdateTotals:
    """The updates since the last metrics row: their sums on the device (skipped updates left
    out), the latest one, and the host's clock."""

    sums: torch.Tensor | None = None  # (4,) float64: loss, nll, tokens, updates
    latest: LaunchedUpdate | None = None  # its gradient norm and lr go in the row
    data_seconds: float = 0.0  # spent waiting for the next batches, skipped updates included
    start: float = field(default_factory=time.perf_counter)

    def add(self, update: LaunchedUpdate) -> None:
        """Add `update` without reading it: a skipped one adds zeros."""
        one = torch.ones_like(update.loss)
        values = torch.stack([update.loss, update.nll, one * update.tokens, one])
        values = torch.where(update.applied, values, 0.0)
        self.sums = values if self.sums is None else self.sums + values
        self.latest = update

    def read(self) -> WindowFigures:
        """The sums and the latest gradient norm on the host: one wait for the device."""
        assert self.sums is not None and self.latest is not None
        grad_norm = self.latest.grad_norm.double().reshape(1)
        loss, nll, tokens, updates, norm = torch.cat([self.sums, grad_norm]).tolist()
        return WindowFigures(loss, nll, tokens, int(updates), norm, self.latest.lr)


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

    def updated(self, step: int, update: LaunchedUpdate, data_seconds: float) -> bool:
        """Count update `step`, which waited `data_seconds` for its batches, without reading
        it. Returns whether a train row is due (`train_row` writes it)."""
        self.window.data_seconds += data_seconds
        self.window.add(update)
        self.bar.update(1)
        return self.clock.due(step)

    def train_row(self, step: int, counters: RunCounters) -> None:
        """Read the updates since the last row and write their row (none when every one was
        skipped); the next row counts from here."""
        window = self.window
        if window.sums is not None:
            figures = window.read()  # before the clock: the device has caught up
            if figures.updates:
                self._write_row(step, figures, counters)
        self.window = UpdateTotals()

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
            "step %d valid loss %.4f nll %.4f ppl %.2f bleu %s in %.1f s%s",
            *(step, result.loss, result.nll, result.ppl, bleu, result.seconds),
            " (best)" if best else "",
        )

    def _write_row(self, step: int, figures: WindowFigures, counters: RunCounters) -> None:
        """A metrics row, the bar's numbers, and (when the bar is off: no terminal) a line."""
        window = self.window
        seconds = max(time.perf_counter() - window.start, 1e-9)
        loss = figures.loss / figures.tokens
        row = {
            "loss": loss,
            "nll": figures.nll / figures.tokens,
            "ppl": perplexity(figures.nll / figures.tokens),
            "lr": figures.lr,
            "grad_norm": figures.grad_norm,
            "tokens_per_s": figures.tokens / seconds,
            "data_wait": window.data_seconds / seconds,
            "epoch": counters.epoch,
            "skipped_updates": counters.skipped_updates,
            "elapsed": round(counters.elapsed, 3),
        }
        assert window.latest is not None  # a row has updates
        if window.latest.loss.device.type == "cuda":
            row.update(cuda_memory(window.latest.loss.device))
        self.bar.set_postfix(
            loss=f"{loss:.3f}", lr=f"{figures.lr:.2e}", tok_s=f"{row['tokens_per_s']:.0f}"
        )
        if self.metrics is not None:
            self.metrics.write("train", step, row)
        if self.is_main:
            rate = figures.updates / seconds
            left = remaining_seconds(
                step, counters.elapsed, rate, self.cfg.max_steps, self.cfg.max_minutes
            )
            line = progress_line(
                *(step, counters.epoch, loss, figures.lr, row["tokens_per_s"], counters.elapsed),
                *(left, row["data_wait"]),
            )
            logging.getLogger(PROGRESS_LOGGER).info("%s", line)


def cuda_memory(device: torch.device) -> dict[str, float]:
    """The CUDA caching allocator's figures for a train row (host-side counters: no wait).

    Its peak of allocated memory, and how many blocks it has asked the driver for
    (`gpu_mallocs`) and how often it had to free its cache and ask again (`gpu_alloc_retries`):
    each of those stops the device, so counts that still grow after the first epoch say that new
    batch shapes keep needing new memory."""
    stats = torch.cuda.memory_stats(device)
    return {
        "gpu_peak_gib": stats.get("allocated_bytes.all.peak", 0) / 2**30,
        "gpu_mallocs": stats.get("segment.all.allocated", 0),
        "gpu_alloc_retries": stats.get("num_alloc_retries", 0),
    }
