"""The training loop: update -> log -> validate -> checkpoint, until a limit or a signal.

Its collaborators do the rest: the batches come from the data's `BatchIterator` or
`StreamingBatches` (the cursor a checkpoint stores), each update is `update.Updater`'s, the
rows and lines are `reporting.TrainingReport`'s, and `early_stopping.EarlyStopping` keeps the
best score.

The loop does not wait for the device between updates: an update's figures are read at the
next metrics row (every train.log_every updates, or PROGRESS_SECONDS), and the updates skipped
as non-finite are settled there and before every checkpoint (`Updater.settle`).

A run directory holds config.yaml (resolved), the tokenizer model(s), metrics.jsonl and
checkpoints/{last,best,step_*}.pt. Running the same command again resumes from last.pt with
every state a continuation needs (optimizer, scaler, RNGs, data position), so a run stopped at
step k and resumed reaches step n with the same parameters (bitwise on CPU, float32) as one that
never stopped. SIGINT, SIGTERM and SIGHUP finish the current update, save last.pt and exit
with status 130 / 143 / 129 (training/signals.py).
"""

from __future__ import annotations

import logging
import os
import time
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from transformer_mt import artifacts
from transformer_mt.artifacts import Checkpoint, TrainingState
from transformer_mt.config import ExperimentConfig, config_to_dict
from transformer_mt.data.cursor import CorpusChanged
from transformer_mt.data.locations import describe_split
from transformer_mt.data.pipeline import TrainData
from transformer_mt.data.specials import OWN_SPECIALS, SpecialTokens
from transformer_mt.data.tokenizer import Tokenizer
from transformer_mt.errors import TmtError
from transformer_mt.machine import ThreadGovernor
from transformer_mt.run_layout import BEST_NAME, CHECKPOINTS_DIR, LAST_NAME, periodic_name
from transformer_mt.training.checkpoints import prune_checkpoints
from transformer_mt.training.distributed import DistributedContext
from transformer_mt.training.early_stopping import EarlyStopping
from transformer_mt.training.reporting import RunCounters, TrainingReport
from transformer_mt.training.rng import capture_rng_state, restore_rng_state
from transformer_mt.training.signals import StopRequests
from transformer_mt.training.update import LaunchedUpdate, Updater
from transformer_mt.training.validation import validate

log = logging.getLogger(__name__)


@dataclass
class TrainResult:
    step: int
    best_score: float | None
    stopped_by: str  # "max_steps", "max_epochs", "max_minutes", "patience", or a signal's name
    exit_code: int = 0  # 128 + signal number after a signal (130, 143, 129), as shells report


@dataclass(frozen=True)
class Placement:
    """Where a training runs: its device, its process among the ranks of a DDP job (None:
    a single process), and the governor that adapts the CPU threads to the machine's load
    (None: the count stays)."""

    device: torch.device | str = "cpu"
    dist: DistributedContext | None = None
    threads: ThreadGovernor | None = None


class Trainer:
    """Owns the model, optimizer and run directory of one training run.

    Args:
        config: the resolved experiment config (stored in every checkpoint).
        model: the unwrapped Seq2SeqTransformer; wrapped in DDP here when `dist.enabled`, and
            torch.compile'd when train.compile.
        data: batches to train and validate on.
        tokenizers: (source, target), stored in checkpoints so translation needs nothing
            else.
        run_dir: where checkpoints and metrics go.
        place: where it runs: the device, this process's rank (default: a single process)
            and the thread governor (None: the count stays).
        specials: the model's special ids, stored in checkpoints with the tokenizers.
    """

    def __init__(
        self,
        config: ExperimentConfig,
        model: torch.nn.Module,
        data: TrainData,
        tokenizers: tuple[Tokenizer, Tokenizer],
        run_dir: str | Path,
        *,
        place: Placement | None = None,
        specials: SpecialTokens = OWN_SPECIALS,
    ) -> None:
        place = place or Placement()
        device = place.device
        self.config = config
        self.cfg = config.train
        self.threads = place.threads
        self.dist = place.dist or DistributedContext()
        self.data = data
        self.tokenizers = tokenizers
        self.specials = specials
        self.run_dir = Path(run_dir)
        self.updater = Updater(model, self.cfg, config.model.d_model, device, self.dist)
        self.early_stopping = EarlyStopping(self.cfg.patience)
        self.step = 0
        self.skipped_updates = 0
        self.stop_requests = StopRequests()
        self.elapsed_before = 0.0  # seconds trained by earlier processes of this run
        self._started = time.monotonic()

    @property
    def model(self) -> torch.nn.Module:
        return self.updater.model

    @property
    def device(self) -> torch.device:
        return self.updater.device

    # --- the loop ------------------------------------------------------------------------

    def train(self) -> TrainResult:
        """Run updates until max_steps, max_epochs, max_minutes, early stopping or a signal."""
        self.model.train()
        report = TrainingReport(self.run_dir, self.cfg, self.step, self.dist.is_main)
        with report, self.stop_requests.caught():
            stopped_by = self._loop(report)
            if self.stop_requests.caught_one() and stopped_by == self.stop_requests.name:
                return self._stop_on_signal()
        log.info("training stopped at step %d (%s)", self.step, stopped_by)
        return TrainResult(self.step, self.early_stopping.best_score, stopped_by)

    def _loop(self, report: TrainingReport) -> str:
        """Updates until a limit, patience or a signal; returns which of them it was."""
        validated_at = self.step
        while (limit := self._limit_reached()) is None:
            launched, data_seconds = self._update()
            if report.updated(self.step, launched, data_seconds):
                self._settle()
                report.train_row(self.step, self._counters())
                self._follow_load()
            if self.step % self.cfg.valid_every == 0:
                with report.paused():  # tokens/s counts training only
                    self._validate_and_save(report)
                validated_at = self.step
            if launched.stop:
                return self.stop_requests.name
        if validated_at != self.step:
            self._validate_and_save(report)
        return limit

    def _update(self) -> tuple[LaunchedUpdate, float]:
        """The next `update_freq` batches of this rank, as update number `step + 1`, queued
        on the device; with the seconds spent waiting for them (reading, tokenizing,
        collating: the data pipeline)."""
        started = time.perf_counter()
        batches = [next(self.data.train) for _ in range(self.cfg.update_freq)]
        data_seconds = time.perf_counter() - started
        self.step += 1
        launched = self.updater.launch(batches, self.step, self.stop_requests.caught_one)
        return launched, data_seconds

    def _settle(self) -> None:
        """Count the updates skipped as non-finite since the last look (a wait for the device).

        Raises:
            TmtError: one was, under train.nonfinite_loss: stop.
        """
        self.skipped_updates += self.updater.settle()

    def _limit_reached(self) -> str | None:
        """patience, max_steps, max_epochs or max_minutes when that limit ends the run now,
        else None. Asked before the first update too: the same command again after any of
        them (a resume with the limit unchanged) trains no further."""
        if self.early_stopping.exhausted:
            return "patience"
        if self.step >= self.cfg.max_steps:
            return "max_steps"
        if self._epochs_done():
            return "max_epochs"
        if self._out_of_time():
            return "max_minutes"
        return None

    def _epochs_done(self) -> bool:
        """Every rank has read max_epochs epochs. Streaming ranks cross epoch ends at different
        updates, so they agree (the last one decides) to stop at the same step."""
        if self.cfg.max_epochs is None:
            return False
        done = float(self.data.train.position.epoch >= self.cfg.max_epochs)
        return self.dist.sum_over_ranks([done], self.device)[0] == self.dist.world_size

    def _out_of_time(self) -> bool:
        """All ranks agree (rank 0's clock decides) so that they stop at the same step."""
        if self.cfg.max_minutes is None:
            return False
        over = float(self.dist.is_main and self.elapsed_seconds() >= 60 * self.cfg.max_minutes)
        return self.dist.sum_over_ranks([over], self.device)[0] > 0

    def _validate_and_save(self, report: TrainingReport) -> None:
        """Validate on rank 0, share the result, track the best score, write checkpoints."""
        self._settle()  # a run that must stop for a non-finite loss stops before validating
        result = None
        if self.dist.is_main:
            ema = self.updater.ema
            with ema.applied_to(self.model) if ema is not None else nullcontext():
                result = validate(
                    self.model,
                    self.data,
                    self.tokenizers,
                    self.specials,
                    self.config,
                    self.device,
                    self.updater.autocast,
                )
        result = self.dist.broadcast(result)
        improved = self.early_stopping.record(result.score)
        report.validated(self.step, result, self.early_stopping.best_score, improved)
        self.save(periodic=True, best=improved)

    def _stop_on_signal(self) -> TrainResult:
        self.save(periodic=False, best=False)
        name = self.stop_requests.name
        log.info(
            "%s: saved %s at step %d; run the same command again to resume",
            *(name, self.run_dir / CHECKPOINTS_DIR / LAST_NAME, self.step),
        )
        code = self.stop_requests.exit_code
        return TrainResult(self.step, self.early_stopping.best_score, name, exit_code=code)

    def _counters(self) -> RunCounters:
        epoch = self.data.train.position.epoch
        return RunCounters(epoch, self.skipped_updates, self.elapsed_seconds())

    def _follow_load(self) -> None:
        change = self.threads.update() if self.threads is not None else None
        if change is not None:
            log.info("threads %d: %s", change.value, change.reason)

    def elapsed_seconds(self) -> float:
        """Wall-clock time of this run so far, earlier (resumed-from) processes included."""
        return self.elapsed_before + time.monotonic() - self._started

    # --- checkpoints ---------------------------------------------------------------------

    def to_checkpoint(
        self, rng_states: list[dict[str, Any]], data_positions: list[dict[str, int]]
    ) -> Checkpoint:
        """Everything a continuation needs (the format is `artifacts.Checkpoint`'s).

        Args:
            rng_states, data_positions: each rank's, in rank order (`save` gathers them).
        """
        src, tgt = self.tokenizers
        updater = self.updater
        return Checkpoint(
            model=self.model.state_dict(),
            config=config_to_dict(self.config),
            tokenizers=artifacts.pack_tokenizers(src, tgt),
            specials=self.specials.to_dict(),
            step=self.step,
            ema=updater.ema.state_dict(self.model) if updater.ema is not None else None,
            workdir=os.getcwd(),
            training=TrainingState(
                optimizer=updater.optimizer.state_dict(),
                scaler=updater.scaler.state_dict(),
                rng=rng_states,
                data_position=artifacts.stored_position(data_positions),
                best_score=self.early_stopping.best_score,
                bad_validations=self.early_stopping.bad_validations,
                scored_on=self.data.valid_key,
                stats={
                    "skipped_updates": self.skipped_updates,
                    "elapsed_seconds": self.elapsed_seconds(),
                },
            ),
        )

    def restore(self, checkpoint: Checkpoint) -> None:
        """Continue from a checkpoint written by `save` (strict: every key must match).

        Raises:
            TmtError: the checkpoint holds no training state (an averaged one).
            CorpusChanged: the training text is not the text the checkpoint was trained on.
        """
        training = checkpoint.training
        if training is None:
            raise TmtError(
                f"the checkpoint of step {checkpoint.step} holds no training state (an averaged "
                "or inference checkpoint); resume from a run's last.pt"
            )
        updater = self.updater
        self.model.load_state_dict(checkpoint.model, strict=True)
        updater.optimizer.load_state_dict(training.optimizer)
        updater.scaler.load_state_dict(training.scaler)
        if updater.ema is not None and checkpoint.ema:
            updater.ema.load_state_dict(checkpoint.ema)
        self.step = checkpoint.step
        position = artifacts.rank_position(
            training.data_position, self.dist.rank, self.dist.world_size
        )
        try:
            self.data.train.restore(position)
        except CorpusChanged as err:
            raise CorpusChanged(
                f"{describe_split(self.config.data)}: {err}. Resume with the text the run "
                f"was trained on, or start another run directory (train.init_from: this "
                "run's last.pt, to train on from its weights)"
            ) from None
        if self._scored_on_this_text(training.scored_on):
            self.early_stopping.best_score = training.best_score
            self.early_stopping.bad_validations = training.bad_validations
        self.skipped_updates = training.stats["skipped_updates"]
        self.elapsed_before = training.stats.get("elapsed_seconds", 0.0)
        self._started = time.monotonic()
        self._restore_rng(training.rng)

    def _scored_on_this_text(self, stored: str | None) -> bool:
        """Whether the saved best score was measured on this run's validation text (as far as
        is known): one measured on other text (a file replaced under its name) is not compared
        with the scores to come."""
        key = self.data.valid_key
        if stored is None or key is None or stored == key:
            return True
        log.warning(
            "%s: not the validation text the saved best score was measured on (corpus key %s "
            "then, %s now): the best score and the patience count start again, and the next "
            "validation writes best.pt",
            *(describe_split(self.config.data, "valid"), stored, key),
        )
        return False

    def _restore_rng(self, rng: list[dict[str, Any]]) -> None:
        """This rank's dropout RNG, when the checkpoint has one state per rank of this run."""
        if len(rng) == self.dist.world_size:
            restore_rng_state(rng[self.dist.rank])
            return
        log.warning(
            "checkpoint has RNG states of %d ranks, this run has %d: dropout masks will "
            "differ from an uninterrupted run",
            *(len(rng), self.dist.world_size),
        )

    def save(self, periodic: bool, best: bool) -> None:
        """Write last.pt, and on validation steps best.pt and the periodic file, on rank 0.

        The names are independent copies of one serialization, renamed into place in this
        order: best.pt, the periodic file, last.pt. A run killed during the save resumes from
        the previous last.pt and redoes the whole save; the periodic file, the fallback when
        last.pt is gone, exists only once best.pt agrees with it. Old periodic files are
        pruned only after the new one is on disk. Every rank sends its RNG states and data
        position, so dropout and (streamed) data continue exactly on each one.

        Raises:
            TmtError: an update since the last look was non-finite, under
                train.nonfinite_loss: stop (nothing is written).
        """
        self._settle()
        states = self.dist.gather((capture_rng_state(), self.data.train.state()))
        if not self.dist.is_main:
            return
        assert states is not None
        directory = self.run_dir / CHECKPOINTS_DIR
        checkpoint = self.to_checkpoint([rng for rng, _ in states], [pos for _, pos in states])
        names = [BEST_NAME] if best else []
        names += [periodic_name(self.step)] if periodic and self.cfg.keep_last else []
        first, *others = [directory / name for name in [*names, LAST_NAME]]
        artifacts.save_checkpoint(checkpoint, first)
        for target in others[:-1]:
            artifacts.copy_checkpoint(first, target)
        if periodic:
            prune_checkpoints(directory, self.cfg.keep_last, up_to=self.step)
        if others:
            artifacts.copy_checkpoint(first, others[-1])
