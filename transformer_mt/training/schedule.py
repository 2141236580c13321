"""Learning rate as a pure function of the update step (unit-tested, plottable).

Two schedules, chosen by `train.schedule`:

- `noam` (Vaswani et al., 2017, eq. 3):
      lr(s) = noam_scale * d_model^-0.5 * min(s^-0.5, s * warmup_steps^-1.5)
- `inverse_sqrt` (fairseq): linear warm-up from `warmup_init_lr` to the peak `lr` over
  `warmup_steps` updates, then decay proportional to the inverse square root of the step:
      lr(s) = warmup_init_lr + s * (lr - warmup_init_lr) / warmup_steps   for s < warmup_steps
      lr(s) = lr * sqrt(warmup_steps / s)                                 afterwards

`s` is the 1-based number of the update about to be taken; steps below 1 count as 1 so the
first update never gets an infinite or zero rate from the formulas.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from transformer_mt.config import TrainConfig


def noam_lr(step: int, d_model: int, warmup_steps: int, noam_scale: float = 1.0) -> float:
    """The paper's schedule; with no warm-up it is the pure inverse-square-root decay."""
    s = max(step, 1)
    if warmup_steps <= 0:
        return noam_scale * d_model**-0.5 * s**-0.5
    return noam_scale * d_model**-0.5 * min(s**-0.5, s * warmup_steps**-1.5)


def inverse_sqrt_lr(step: int, lr: float, warmup_steps: int, warmup_init_lr: float) -> float:
    """fairseq's `inverse_sqrt`: linear warm-up to the peak `lr`, then lr * sqrt(warmup / s)."""
    s = max(step, 1)
    if s < warmup_steps:
        return warmup_init_lr + s * (lr - warmup_init_lr) / warmup_steps
    return lr * math.sqrt(max(warmup_steps, 1) / s)


def _noam(step: int, cfg: TrainConfig, d_model: int) -> float:
    return noam_lr(step, d_model, cfg.warmup_steps, cfg.noam_scale)


def _inverse_sqrt(step: int, cfg: TrainConfig, d_model: int) -> float:
    return inverse_sqrt_lr(step, cfg.lr, cfg.warmup_steps, cfg.warmup_init_lr)


SCHEDULES: dict[str, Callable[[int, TrainConfig, int], float]] = {
    "noam": _noam,
    "inverse_sqrt": _inverse_sqrt,
}


def learning_rate(step: int, cfg: TrainConfig, d_model: int) -> float:
    """The rate for update number `step` (1-based) under `cfg.schedule`."""
    return SCHEDULES[cfg.schedule](step, cfg, d_model)
