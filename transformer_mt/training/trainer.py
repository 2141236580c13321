"""The training loop: batch -> forward under autocast -> loss -> accumulate -> clip -> step ->
schedule -> log -> validate -> checkpoint (Vaswani et al., 2017, section 5).

One update takes `update_freq` batches on every rank. Its loss is the sum of the label-smoothed
loss over all non-pad target tokens of those batches on all ranks, divided by their total count,
so the gradient does not depend on how tokens were split over batches or ranks: each rank
scales its summed loss by world_size / global_tokens, and DDP's gradient *mean* then equals
the single-process sum / total.

A run directory holds config.yaml (resolved), the tokenizer model(s), metrics.jsonl and
checkpoints/{last,best,step_*}.pt. Running the same command again resumes from last.pt with
every state a continuation needs (optimizer, scaler, RNGs, data position), so a run stopped at
step k and resumed reaches step n with the same parameters (bitwise on CPU, float32) as one that
never stopped. SIGINT and SIGTERM finish the current update, save last.pt and exit with
status 130 / 143.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from transformer_mt import artifacts
from transformer_mt.artifacts import Checkpoint, TrainingState
from transformer_mt.config import ExperimentConfig, config_to_dict
from transformer_mt.data.batching import Batch, BatchIterator, collate
from transformer_mt.data.tokenizer import PAD_ID, Tokenizer
from transformer_mt.errors import TmtError
from transformer_mt.machine import ThreadGovernor
from transformer_mt.training.distributed import DistributedContext
from transformer_mt.training.ema import WeightAverage
from transformer_mt.training.execution import (
    build_optimizer,
    resolve_precision,
    wrap_for_training,
)
from transformer_mt.training.loss import LossSums, fused_label_smoothed_loss, perplexity
from transformer_mt.training.metrics import MetricsLog
from transformer_mt.training.progress import LogClock, progress_line, remaining_seconds
from transformer_mt.training.rng import capture_rng_state, restore_rng_state
from transformer_mt.training.schedule import learning_rate
from transformer_mt.training.signals import StopRequests
from transformer_mt.training.validation import ValidResult, validate

log = logging.getLogger(__name__)


@dataclass
class TrainData:
    """What the loop consumes: resumable training batches and a fixed validation set."""

    train: BatchIterator  # this rank's share of every epoch
    valid_batches: list[Batch]  # teacher-forced valid loss
    valid_sources: list[str] | None  # raw source lines translated for BLEU (None: BLEU off)
    valid_references: list[str]  # raw target lines, one per valid source


@dataclass
class DataPosition:
    """The next batch to read: batch `batch_index` of epoch `epoch` (this rank's share)."""

    epoch: int = 0
    batch_index: int = 0


@dataclass
class TrainResult:
    step: int
    best_score: float | None
    stopped_by: str  # "max_steps", "max_epochs", "max_minutes", "patience", "SIGINT", "SIGTERM"
    exit_code: int = 0  # 128 + signal number after SIGINT/SIGTERM (130/143), as shells report


@dataclass
class UpdateTotals:
    """Sums since the last metrics row."""

    loss: float = 0.0
    nll: float = 0.0
    tokens: float = 0.0
    updates: int = 0
    start: float = field(default_factory=time.perf_counter)


class Trainer:
    """Owns the model, optimizer and run directory of one training run.

    Args:
        config: the resolved experiment config (stored in every checkpoint).
        model: the unwrapped Seq2SeqTransformer; wrapped in DDP here when `dist.enabled`, and
            torch.compile'd when train.compile.
        data: batches to train and validate on.
        src_tokenizer, tgt_tokenizer: stored in checkpoints so translation needs nothing else.
        run_dir: where checkpoints and metrics go.
        dist: this process's rank (default: a single process).
        device: where the model lives.
        threads: adapts the CPU thread count to the machine's load (None: the count stays).
    """

    def __init__(
        self,
        config: ExperimentConfig,
        model: torch.nn.Module,
        data: TrainData,
        src_tokenizer: Tokenizer,
        tgt_tokenizer: Tokenizer,
        run_dir: str | Path,
        dist: DistributedContext | None = None,
        device: torch.device | str = "cpu",
        threads: ThreadGovernor | None = None,
    ) -> None:
        self.config = config
        self.threads = threads
        self.cfg = config.train
        self.device = torch.device(device)
        self.model = model.to(self.device)
        self.dist = dist or DistributedContext()
        self.data = data
        self.tokenizers = (src_tokenizer, tgt_tokenizer)
        self.run_dir = Path(run_dir)
        self.amp_dtype = resolve_precision(self.cfg.precision, self.device)
        self.wrapped = wrap_for_training(model, self.device, self.dist, self.cfg.compile)
        self.optimizer = build_optimizer(model, self.cfg)
        self.scaler = torch.amp.GradScaler(
            self.device.type, enabled=self.amp_dtype is torch.float16
        )
        self.ema = WeightAverage(model, self.cfg.ema_decay) if self.cfg.ema_decay > 0 else None
        # (logits, labels, epsilon, pad_id) -> LossSums; benchmarks give other models their own.
        self.loss_fn: Callable[[torch.Tensor, torch.Tensor, float, int], LossSums] = (
            fused_label_smoothed_loss
        )
        self.step = 0
        self.position = DataPosition()
        self.best_score: float | None = None
        self.bad_validations = 0
        self.skipped_updates = 0
        self._epoch_cache: tuple[int, list] = (-1, [])
        self.stop_requests = StopRequests()
        self._last_grad_norm = 0.0
        self.elapsed_before = 0.0  # seconds trained by earlier processes of this run
        self._started = time.monotonic()

    # --- the loop ------------------------------------------------------------------------

    def train(self) -> TrainResult:
        """Run updates until max_steps, max_epochs, early stopping or a signal."""
        self.model.train()
        metrics = self._open_metrics()
        bar = tqdm(
            total=self.cfg.max_steps,
            initial=self.step,
            unit="step",
            dynamic_ncols=True,
            disable=None if self.dist.is_main else True,
        )
        window = UpdateTotals()
        clock = LogClock(self.cfg.log_every)
        stopped_by = "max_steps"
        last_validated = self.step
        try:
            with self.stop_requests.caught():
                while self.step < self.cfg.max_steps:
                    if self._epochs_done():
                        stopped_by = "max_epochs"
                        break
                    if self._out_of_time():
                        stopped_by = "max_minutes"
                        break
                    stop_requested = self.train_step(window)
                    bar.update(1)
                    if clock.due(self.step):
                        self._log_train(metrics, window, bar)
                        window = UpdateTotals()
                        self._follow_load()
                    if self.step % self.cfg.valid_every == 0:
                        started = time.perf_counter()
                        self._validate_and_save(metrics)
                        window.start += time.perf_counter() - started  # tokens/s: training only
                        last_validated = self.step
                        if self.cfg.patience and self.bad_validations >= self.cfg.patience:
                            stopped_by = "patience"
                            break
                    if stop_requested:
                        return self._stop_on_signal(bar)
                if last_validated != self.step:
                    self._validate_and_save(metrics)
        finally:
            bar.close()
            if metrics is not None:
                metrics.close()
        log.info("training stopped at step %d (%s)", self.step, stopped_by)
        return TrainResult(self.step, self.best_score, stopped_by)

    def train_step(self, window: UpdateTotals | None = None) -> bool:
        """One update; returns True when any rank caught SIGINT/SIGTERM (all then stop).

        Public so benchmarks can time exactly the updates `train` runs.
        """
        window = window or UpdateTotals()
        batches = self._next_batches(self.cfg.update_freq)
        local_tokens = sum(b.n_tgt_tokens for b in batches)
        global_tokens = self._sum_over_ranks([float(local_tokens)])[0]
        loss_sum, nll_sum = self._forward_backward(batches, global_tokens)
        stop_flag = float(self.stop_requests.signum is not None)
        loss_sum, nll_sum, stop = self._sum_over_ranks([loss_sum, nll_sum, stop_flag])
        if self._apply_update(loss_sum / global_tokens):
            window.loss += loss_sum
            window.nll += nll_sum
            window.tokens += global_tokens
            window.updates += 1
        return stop > 0

    def _forward_backward(self, batches: list[Batch], global_tokens: float) -> tuple[float, float]:
        """Backward of every batch's summed loss * world_size / global_tokens (see module doc).

        DDP synchronises gradients only on the last batch of the update (no_sync before it).
        """
        scale = self.dist.world_size / global_tokens
        loss_sum = torch.zeros((), dtype=torch.float64, device=self.device)
        nll_sum = torch.zeros((), dtype=torch.float64, device=self.device)
        for i, batch in enumerate(batches):
            batch = batch.to(self.device, non_blocking=True)
            last = i == len(batches) - 1
            sync = nullcontext() if last or not self.dist.enabled else self.wrapped.no_sync()
            with sync:
                with self._autocast():
                    logits = self.wrapped(batch.src_ids, batch.tgt_in_ids, batch.src_mask)
                sums = self.loss_fn(logits, batch.tgt_out_ids, self.cfg.label_smoothing, PAD_ID)
                self.scaler.scale(sums.loss * scale).backward()
            loss_sum += sums.loss.detach().double()
            nll_sum += sums.nll.double()
        return loss_sum.item(), nll_sum.item()

    def _apply_update(self, loss: float) -> bool:
        """Clip, set the learning rate, step; returns False when a non-finite update was skipped.

        Raises:
            TmtError: a NaN/inf loss or gradient norm under train.nonfinite_loss: stop.
        """
        self.scaler.unscale_(self.optimizer)
        max_norm = self.cfg.clip_norm if self.cfg.clip_norm > 0 else float("inf")
        grad_norm = float(torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm))
        self._last_grad_norm = grad_norm
        # fp16's GradScaler skips steps with inf gradients by itself (and lowers its scale).
        checked = [loss] if self.scaler.is_enabled() else [loss, grad_norm]
        self.step += 1
        if not all(math.isfinite(v) for v in checked):
            self.optimizer.zero_grad(set_to_none=True)
            if self.cfg.nonfinite_loss == "stop":
                raise TmtError(
                    f"step {self.step}: loss {loss} / gradient norm {grad_norm} is not finite; "
                    "lower train.lr, set train.clip_norm, or set train.nonfinite_loss: skip"
                )
            self.skipped_updates += 1
            log.warning("step %d: non-finite loss %s, update skipped", self.step, loss)
            return False
        lr = learning_rate(self.step, self.cfg, self.config.model.d_model)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)
        if self.ema is not None:
            self.ema.update(self.model)
        return True

    def _validate_and_save(self, metrics: MetricsLog | None) -> ValidResult:
        """Validate on rank 0, share the result, track the best score, write checkpoints."""
        result = None
        if self.dist.is_main:
            with self.ema.applied_to(self.model) if self.ema is not None else nullcontext():
                result = validate(
                    self.model,
                    self.data.valid_batches,
                    self.data.valid_sources if self.cfg.valid_bleu else None,
                    self.data.valid_references,
                    self.tokenizers,
                    self.config.decode,
                    self.cfg.label_smoothing,
                    self.device,
                    self._autocast,
                )
        result = self.dist.broadcast(result)
        # Higher is better: BLEU, or minus the valid NLL when BLEU is off.
        score = result.bleu if result.bleu is not None else -result.nll
        improved = self.best_score is None or score > self.best_score
        if improved:
            self.best_score, self.bad_validations = score, 0
        else:
            self.bad_validations += 1
        if metrics is not None:
            metrics.write("valid", self.step, {**result.as_dict(), "best_score": self.best_score})
        bleu = "off" if result.bleu is None else f"{result.bleu:.2f}"
        log.info(
            "step %d valid loss %.4f nll %.4f ppl %.2f bleu %s%s",
            *(self.step, result.loss, result.nll, result.ppl, bleu),
            " (best)" if improved else "",
        )
        self.save(periodic=True, best=improved)
        return result

    def _stop_on_signal(self, bar: tqdm) -> TrainResult:
        self.save(periodic=False, best=False)
        name = self.stop_requests.name
        log.info(
            "%s: saved %s at step %d; run the same command again to resume",
            *(name, self.run_dir / "checkpoints" / "last.pt", self.step),
        )
        code = self.stop_requests.exit_code
        return TrainResult(self.step, self.best_score, name, exit_code=code)

    # --- data ----------------------------------------------------------------------------

    def _next_batches(self, count: int) -> list[Batch]:
        """The next `count` batches of this rank, moving on to the next epoch when one ends."""
        batches = []
        while len(batches) < count:
            indices = self._epoch_indices(self.position.epoch)
            corpus = self.data.train.corpus_for(self.position.epoch)
            batches.append(collate(corpus, indices[self.position.batch_index]))
            self.position.batch_index += 1
            if self.position.batch_index >= len(indices):
                self.position = DataPosition(self.position.epoch + 1, 0)
        return batches

    def _epoch_indices(self, epoch: int) -> list:
        if self._epoch_cache[0] != epoch:
            indices = self.data.train.batch_indices(epoch)
            if not indices:
                raise TmtError(
                    f"epoch {epoch} has no batches for rank {self.dist.rank} of "
                    f"{self.dist.world_size}: the training set is too small for this many ranks"
                )
            self._epoch_cache = (epoch, indices)
        return self._epoch_cache[1]

    def _epochs_done(self) -> bool:
        return self.cfg.max_epochs is not None and self.position.epoch >= self.cfg.max_epochs

    def elapsed_seconds(self) -> float:
        """Wall-clock time of this run so far, earlier (resumed-from) processes included."""
        return self.elapsed_before + time.monotonic() - self._started

    def _out_of_time(self) -> bool:
        """All ranks agree (rank 0's clock decides) so that they stop at the same step."""
        if self.cfg.max_minutes is None:
            return False
        over = float(self.dist.is_main and self.elapsed_seconds() >= 60 * self.cfg.max_minutes)
        return self._sum_over_ranks([over])[0] > 0

    # --- checkpoints ---------------------------------------------------------------------

    def to_checkpoint(self, rng_states: list[dict[str, Any]]) -> Checkpoint:
        """Everything a continuation needs (the format is `artifacts.Checkpoint`'s)."""
        src, tgt = self.tokenizers
        return Checkpoint(
            model=self.model.state_dict(),
            config=config_to_dict(self.config),
            tokenizers=artifacts.pack_tokenizers(src, tgt),
            step=self.step,
            ema=self.ema.state_dict(self.model) if self.ema is not None else None,
            training=TrainingState(
                optimizer=self.optimizer.state_dict(),
                scaler=self.scaler.state_dict(),
                rng=rng_states,
                data_position=dataclasses.asdict(self.position),
                best_score=self.best_score,
                bad_validations=self.bad_validations,
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
        """
        training = checkpoint.training
        if training is None:
            raise TmtError(
                f"the checkpoint of step {checkpoint.step} holds no training state (an averaged "
                "or inference checkpoint); resume from a run's last.pt"
            )
        self.model.load_state_dict(checkpoint.model, strict=True)
        self.optimizer.load_state_dict(training.optimizer)
        self.scaler.load_state_dict(training.scaler)
        if self.ema is not None and checkpoint.ema:
            self.ema.load_state_dict(checkpoint.ema)
        self.step = checkpoint.step
        self.position = DataPosition(**training.data_position)
        self.best_score = training.best_score
        self.bad_validations = training.bad_validations
        self.skipped_updates = training.stats["skipped_updates"]
        self.elapsed_before = training.stats.get("elapsed_seconds", 0.0)
        self._started = time.monotonic()
        rng = training.rng
        if len(rng) == self.dist.world_size:
            restore_rng_state(rng[self.dist.rank])
        else:
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
        pruned only after the new one is on disk. Every rank sends its RNG states, so dropout
        continues exactly on each one.
        """
        rng_states = self.dist.gather(capture_rng_state())
        if not self.dist.is_main:
            return
        directory = self.run_dir / "checkpoints"
        checkpoint = self.to_checkpoint(rng_states or [])
        names = ["best.pt"] if best else []
        names += [artifacts.periodic_name(self.step)] if periodic and self.cfg.keep_last else []
        first, *others = [directory / name for name in [*names, "last.pt"]]
        artifacts.save_checkpoint(checkpoint, first)
        for target in others[:-1]:
            artifacts.copy_checkpoint(first, target)
        if periodic:
            artifacts.prune_checkpoints(directory, self.cfg.keep_last, up_to=self.step)
        if others:
            artifacts.copy_checkpoint(first, others[-1])

    # --- helpers -------------------------------------------------------------------------

    def _log_train(self, metrics: MetricsLog | None, window: UpdateTotals, bar: tqdm) -> None:
        """A metrics row, the bar's numbers, and (when the bar is off: no terminal) a line."""
        if not window.updates:
            return
        window_seconds = max(time.perf_counter() - window.start, 1e-9)
        loss = window.loss / window.tokens
        elapsed = self.elapsed_seconds()
        row = {
            "loss": loss,
            "nll": window.nll / window.tokens,
            "ppl": perplexity(window.nll / window.tokens),
            "lr": self.optimizer.param_groups[0]["lr"],
            "grad_norm": self._last_grad_norm,
            "tokens_per_s": window.tokens / window_seconds,
            "epoch": self.position.epoch,
            "skipped_updates": self.skipped_updates,
            "elapsed": round(elapsed, 3),
        }
        bar.set_postfix(
            loss=f"{loss:.3f}", lr=f"{row['lr']:.2e}", tok_s=f"{row['tokens_per_s']:.0f}"
        )
        if metrics is not None:
            metrics.write("train", self.step, row)
        if bar.disable and self.dist.is_main:
            left = remaining_seconds(
                self.step,
                elapsed,
                window.updates / window_seconds,
                self.cfg.max_steps,
                self.cfg.max_minutes,
            )
            line = progress_line(
                self.step, row["epoch"], loss, row["lr"], row["tokens_per_s"], elapsed, left
            )
            log.info("%s", line)

    def _follow_load(self) -> None:
        change = self.threads.update() if self.threads is not None else None
        if change is not None:
            log.info("threads %d: %s", change.value, change.reason)

    def _open_metrics(self) -> MetricsLog | None:
        if not self.dist.is_main:
            return None
        return MetricsLog(self.run_dir / "metrics.jsonl", resume_step=self.step)

    def _sum_over_ranks(self, values: list[float]) -> list[float]:
        if not self.dist.enabled:
            return values
        tensor = torch.tensor(values, dtype=torch.float64, device=self.device)
        return self.dist.all_reduce_sum(tensor).tolist()

    def _autocast(self) -> AbstractContextManager:
        if self.amp_dtype is None:
            return nullcontext()
        return torch.autocast(self.device.type, dtype=self.amp_dtype)
