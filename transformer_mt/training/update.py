"""One optimizer update: forward under autocast -> loss -> accumulate -> clip -> step
(Vaswani et al., 2017, section 5).

An update reads `update_freq` batches on every rank. Its loss is the sum of the label-smoothed
loss over all non-pad target tokens of those batches on all ranks, divided by their total count,
so the gradient does not depend on how tokens were split over batches or ranks: each rank
scales its summed loss by world_size / global_tokens, and DDP's gradient *mean* then equals the
single-process sum / total.

An update never waits for the device: its figures (loss, NLL, gradient norm, whether it was
applied) stay there as a `LaunchedUpdate` until they are read, so the host queues the next
batches while a GPU computes. The trainer reads them once per metrics row. An update whose
loss or gradient norm is not finite is skipped on the device: the fused AdamW step is handed
the flag as `found_inf` (GradScaler's hand-over), which leaves weights, moments and step
count as they were, and the weight average does not move. `settle()` reads how many were
skipped: under train.nonfinite_loss=stop it raises, naming the first, so the run stops at the
next metrics row or checkpoint instead of at that update. Under DDP the token count and the
stop flag cross ranks in every update, and that waits for them.

With train.cuda_graphs the same update (`forward_backward`, then `step`, fed the learning
rate, step number and token scale as tensors) is recorded once per batch shape and replayed
(training/graphs.py).

The trainer runs `Updater.launch` once per step and nothing else changes the weights, so a
benchmark or a custom loop that builds an `Updater` over any model called as
`model(src_ids, tgt_in_ids, src_mask) -> logits` runs the very update `tmt train` runs
(`update`: launched and read at once).
"""

from __future__ import annotations

import logging
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
from transformer_mt.training.graphs import CapturedUpdates
from transformer_mt.training.loss import LossSums, fused_label_smoothed_loss
from transformer_mt.training.schedule import learning_rate

log = logging.getLogger(__name__)

# (logits (B, T, V), labels (B, T), label smoothing, pad id) -> summed losses of the batch
Criterion = Callable[[torch.Tensor, torch.Tensor, float, int], LossSums]


@dataclass(frozen=True)
class UpdateResult:
    """What one update did, summed over all ranks, read on the host."""

    loss: float  # label-smoothed loss summed over the update's non-pad target tokens
    nll: float  # negative log-likelihood summed over the same tokens
    tokens: float  # non-pad target tokens
    grad_norm: float  # before clipping
    lr: float  # the optimizer's learning rate after the update
    applied: bool  # False: the loss or gradient was not finite and the update was skipped
    stop: bool  # some rank asked to stop (a signal: training/signals.py)


@dataclass(frozen=True)
class LaunchedUpdate:
    """One update as queued: its figures on the device, unread (fields as `UpdateResult`'s).

    Shape: loss, nll: () float64; grad_norm: () float32; applied: () bool.
    """

    loss: torch.Tensor
    nll: torch.Tensor
    tokens: float  # known on the host, from the batches
    grad_norm: torch.Tensor
    lr: float
    applied: torch.Tensor
    stop: bool

    def read(self) -> UpdateResult:
        """The figures on the host: one wait for the device."""
        figures = [self.loss, self.nll, self.grad_norm.double(), self.applied.double()]
        loss, nll, grad_norm, applied = torch.stack(figures).tolist()
        return UpdateResult(loss, nll, self.tokens, grad_norm, self.lr, applied > 0, self.stop)


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
        launched = updater.launch(batches, step=2)  # as the trainer does: read later, or never
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
        self.autocast_cache = True  # autocast's cast weights kept for the pass (not in graphs)
        # Since the last `settle`, on the device: the first non-finite update (step, mean
        # loss, gradient norm; step 0: none) and how many there were.
        self._nonfinite = torch.zeros(3, dtype=torch.float64, device=self.device)
        self._skipped = torch.zeros((), dtype=torch.int64, device=self.device)
        self.graphs = None
        if cfg.cuda_graphs:
            if self.device.type != "cuda" or self.dist.enabled:
                where = f"{self.dist.world_size} processes" if self.dist.enabled else self.device
                raise TmtError(
                    f"train.cuda_graphs needs one process on a CUDA device (this run: {where}); "
                    "set train.cuda_graphs: false"
                )
            self.graphs = CapturedUpdates(self)

    def update(
        self, batches: Sequence[Batch], step: int, stopping: Callable[[], bool] | None = None
    ) -> UpdateResult:
        """`launch`, then read at once (a wait for the device), with the non-finite policy.

        Raises:
            TmtError: a NaN/inf loss or gradient norm under train.nonfinite_loss: stop.
        """
        launched = self.launch(batches, step, stopping)
        self.settle()
        return launched.read()

    def launch(
        self, batches: Sequence[Batch], step: int, stopping: Callable[[], bool] | None = None
    ) -> LaunchedUpdate:
        """Queue update number `step` (1-based: it sets the learning rate) from this rank's
        `batches`, without waiting for the device (module docstring).

        `stopping()`, asked once the backward pass is done (has this rank caught a signal?),
        travels in the all-reduce of the loss sums, so every rank learns of a stop at no extra
        cost and all stop after the same update.
        """
        local_tokens = float(sum(b.n_tgt_tokens for b in batches))
        (tokens,) = self.dist.sum_over_ranks([local_tokens], self.device)
        lr = learning_rate(step, self.cfg, self.d_model)
        if self.graphs is not None:  # one batch on one rank (train.cuda_graphs' conditions)
            (batch,) = batches
            loss, nll, grad_norm, applied = self.graphs.launch(batch, step, tokens, lr)
            stop = stopping is not None and stopping()
        else:
            loss, nll = self.forward_backward(batches, self.dist.world_size / tokens)
            stop = stopping is not None and stopping()
            if self.dist.enabled:
                sums = torch.stack([loss, nll, torch.full_like(loss, float(stop))])
                self.dist.sum_in_place(sums)
                loss, nll, stop = sums[0], sums[1], bool(sums[2] > 0)
            grad_norm, applied = self.step(loss / tokens, step, lr)
        return LaunchedUpdate(loss, nll, tokens, grad_norm, lr, applied, stop)

    def settle(self) -> int:
        """The number of updates skipped as non-finite since the last call (a wait for the
        device); logs them under train.nonfinite_loss: skip.

        Raises:
            TmtError: there was one, under train.nonfinite_loss: stop (naming the first).
        """
        figures = torch.cat([self._nonfinite, self._skipped.double().reshape(1)])
        step, loss, grad_norm, skipped = figures.tolist()
        if not skipped:
            return 0
        self._nonfinite.zero_()
        self._skipped.zero_()
        if self.cfg.nonfinite_loss == "stop":
            raise TmtError(
                f"step {int(step)}: loss {loss} / gradient norm {grad_norm} is not finite; "
                "lower train.lr, set train.clip_norm, or set train.nonfinite_loss: skip"
            )
        log.warning(
            "%d update(s) skipped for a non-finite loss or gradient norm, the first at step "
            "%d (loss %s)",
            *(int(skipped), int(step), loss),
        )
        return int(skipped)

    def autocast(self) -> AbstractContextManager:
        """The mixed-precision context of the forward pass (nothing under float32)."""
        if self.amp_dtype is None:
            return nullcontext()
        return torch.autocast(
            self.device.type, dtype=self.amp_dtype, cache_enabled=self.autocast_cache
        )

    def forward_backward(
        self, batches: Sequence[Batch], scale: float | torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Backward of every batch's summed loss * `scale` (world_size / tokens, see module
        doc); the summed loss and NLL of this rank's batches, () float64 on the device.
        `scale` is a () float32 tensor when the update is recorded in a CUDA graph.

        DDP synchronises gradients only on the last batch of the update (no_sync before it).
        """
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
        return loss_sum, nll_sum

    def step(
        self, loss: torch.Tensor, step: int | torch.Tensor, lr: float | torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Clip, set the learning rate, step, on the device: (the gradient norm before
        clipping, whether the update was applied), both unread.

        `loss` is the update's mean loss, () float64; `step` and `lr` are () tensors on the
        device when the update is recorded in a CUDA graph (`graphs.CapturedUpdates`).
        """
        self.scaler.unscale_(self.optimizer)
        max_norm = self.cfg.clip_norm if self.cfg.clip_norm > 0 else float("inf")
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm)
        finite = torch.isfinite(loss)
        if not self.scaler.is_enabled():
            finite &= torch.isfinite(grad_norm)
        self._count_nonfinite(finite, step, loss, grad_norm)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        if self.scaler.is_enabled():
            # fp16: GradScaler hands the fused step its own found_inf and lowers its scale; a
            # non-finite loss leaves non-finite gradients, which it skips as well.
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.found_inf = (~finite).float()  # type: ignore[attr-defined]
            try:
                self.optimizer.step()
            finally:
                del self.optimizer.found_inf  # type: ignore[attr-defined]
        self.optimizer.zero_grad(set_to_none=True)
        if self.ema is not None:
            self.ema.update(self.model, applied=finite)
        return grad_norm, finite

    def _count_nonfinite(
        self,
        finite: torch.Tensor,
        step: int | torch.Tensor,
        loss: torch.Tensor,
        grad_norm: torch.Tensor,
    ) -> None:
        """Count a non-finite update and keep the first one's figures, on the device, in place
        (a CUDA graph's replays update the counters the graph was recorded with)."""
        bad = ~finite
        first = bad & (self._nonfinite[0] == 0)
        number = torch.full_like(loss, step) if isinstance(step, int) else step.to(loss.dtype)
        figures = torch.stack([number, loss, grad_norm.to(loss.dtype)])
        self._nonfinite.copy_(torch.where(first, figures, self._nonfinite))
        self._skipped += bad
