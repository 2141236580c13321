"""One optimizer update: forward under autocast -> loss -> accumulate -> clip -> step
(Vaswani et al., 2017, section 5).

An update reads `update_freq` batches on every rank. Its loss is the sum of the label-smoothed
loss over all non-pad target tokens of those batches on all ranks, divided by their total count,
so the gradient does not depend on how tokens were split over batches or ranks: each rank
scales its summed loss by world_size / global_tokens, and DDP's gradient *mean* then equals the
single-process sum / total.

The trainer runs `Updater.update` once per step and nothing else changes the weights, so a
benchmark or a custom loop that builds an `Updater` over any model called as
`model(src_ids, tgt_in_ids, src_mask) -> logits` runs the very update `tmt train` runs.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass

import torch

from transformer_mt.config import TrainConfig
from transformer_mt.data.batching import Batch
from transformer_mt.errors import TmtError
from transformer_mt.training.distributed import DistributedContext
from transformer_mt.training.ema import WeightAverage
from transformer_mt.training.execution import (
    build_optimizer,
    resolve_precision,
    wrap_for_training,
)
from transformer_mt.training.loss import LossSums, fused_label_smoothed_loss
from transformer_mt.training.schedule import learning_rate

log = logging.getLogger(__name__)

# (logits (B, T, V), labels (B, T), label smoothing, pad id) -> summed losses of the batch
Criterion = Callable[[torch.Tensor, torch.Tensor, float, int], LossSums]


@dataclass(frozen=True)
class UpdateResult:
    """What one update did, summed over all ranks."""

    loss: float  # label-smoothed loss summed over the update's non-pad target tokens
    nll: float  # negative log-likelihood summed over the same tokens
    tokens: float  # non-pad target tokens
    grad_norm: float  # before clipping
    lr: float  # the optimizer's learning rate after the update
    applied: bool  # False: the loss or gradient was not finite and the update was skipped
    stop: bool  # some rank asked to stop (SIGINT/SIGTERM)


class Updater:
    """The model in its training form (DDP, torch.compile), its optimizer, gradient scaler and
    weight average, and the update they make together.

    Args:
        model: called as model(src_ids, tgt_in_ids, src_mask) -> logits (B, T, V); moved to
            `device`.
        cfg: the train section (precision, clipping, schedule, smoothing, non-finite policy).
        d_model: the model width that the learning-rate schedule scales with.
        device: where the model lives.
        dist: this process's rank (default: a single process).
        criterion: the training loss; default the fused label-smoothed cross-entropy.

    Example:
        updater = Updater(model, config.train, config.model.d_model)
        result = updater.update([next(batches) for _ in range(config.train.update_freq)], step=1)
    """

    def __init__(
        self,
        model: torch.nn.Module,
        cfg: TrainConfig,
        d_model: int,
        device: torch.device | str = "cpu",
        dist: DistributedContext | None = None,
        criterion: Criterion | None = None,
    ) -> None:
        self.cfg = cfg
        self.d_model = d_model
        self.device = torch.device(device)
        self.dist = dist or DistributedContext()
        self.model = model.to(self.device)
        self.amp_dtype = resolve_precision(cfg.precision, self.device)
        self.wrapped = wrap_for_training(self.model, self.device, self.dist, cfg.compile)
        self.optimizer = build_optimizer(self.model, cfg)
        fp16 = self.amp_dtype is torch.float16
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=fp16)
        self.ema = WeightAverage(self.model, cfg.ema_decay) if cfg.ema_decay > 0 else None
        self.criterion = criterion or fused_label_smoothed_loss

    def update(
        self, batches: Sequence[Batch], step: int, stopping: Callable[[], bool] | None = None
    ) -> UpdateResult:
        """Update number `step` (1-based: it sets the learning rate) from this rank's `batches`.

        `stopping()`, asked once the backward pass is done (has this rank caught a signal?),
        travels in the all-reduce of the loss sums, so every rank learns of a stop at no extra
        cost and all stop after the same update.

        Raises:
            TmtError: a NaN/inf loss or gradient norm under train.nonfinite_loss: stop.
        """
        local_tokens = float(sum(b.n_tgt_tokens for b in batches))
        (tokens,) = self.dist.sum_over_ranks([local_tokens], self.device)
        loss, nll = self._forward_backward(batches, tokens)
        stop = float(stopping is not None and stopping())
        loss, nll, stops = self.dist.sum_over_ranks([loss, nll, stop], self.device)
        grad_norm, applied = self._step(loss / tokens, step)
        lr = self.optimizer.param_groups[0]["lr"]
        return UpdateResult(loss, nll, tokens, grad_norm, lr, applied, stops > 0)

    def autocast(self) -> AbstractContextManager:
        """The mixed-precision context of the forward pass (nothing under float32)."""
        if self.amp_dtype is None:
            return nullcontext()
        return torch.autocast(self.device.type, dtype=self.amp_dtype)

    def _forward_backward(self, batches: Sequence[Batch], tokens: float) -> tuple[float, float]:
        """Backward of every batch's summed loss * world_size / tokens (see module doc).

        DDP synchronises gradients only on the last batch of the update (no_sync before it).
        """
        scale = self.dist.world_size / tokens
        loss_sum = torch.zeros((), dtype=torch.float64, device=self.device)
        nll_sum = torch.zeros((), dtype=torch.float64, device=self.device)
        for i, batch in enumerate(batches):
            batch = batch.to(self.device, non_blocking=True)
            last = i == len(batches) - 1
            sync = nullcontext() if last or not self.dist.enabled else self.wrapped.no_sync()
            with sync:
                with self.autocast():
                    logits = self.wrapped(batch.src_ids, batch.tgt_in_ids, batch.src_mask)
                sums = self.criterion(
                    logits, batch.tgt_out_ids, self.cfg.label_smoothing, self.model.pad_id
                )
                self.scaler.scale(sums.loss * scale).backward()
            loss_sum += sums.loss.detach().double()
            nll_sum += sums.nll.double()
        return loss_sum.item(), nll_sum.item()

    def _step(self, loss: float, step: int) -> tuple[float, bool]:
        """Clip, set the learning rate, step: (the gradient norm, whether the update was made).

        Raises:
            TmtError: as `update`.
        """
        self.scaler.unscale_(self.optimizer)
        max_norm = self.cfg.clip_norm if self.cfg.clip_norm > 0 else float("inf")
        grad_norm = float(torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm))
        # fp16's GradScaler skips steps with inf gradients by itself (and lowers its scale).
        checked = [loss] if self.scaler.is_enabled() else [loss, grad_norm]
        if not all(math.isfinite(v) for v in checked):
            self.optimizer.zero_grad(set_to_none=True)
            if self.cfg.nonfinite_loss == "stop":
                raise TmtError(
                    f"step {step}: loss {loss} / gradient norm {grad_norm} is not finite; "
                    "lower train.lr, set train.clip_norm, or set train.nonfinite_loss: skip"
                )
            log.warning("step %d: non-finite loss %s, update skipped", step, loss)
            return grad_norm, False
        lr = learning_rate(step, self.cfg, self.d_model)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)
        if self.ema is not None:
            self.ema.update(self.model)
        return grad_norm, True
