"""Learning rate as a pure function of the update step (unit-tested, plottable).

Three schedules, chosen by `train.schedule`:

- `noam` (Vaswani et al., 2017, eq. 3):
      lr(s) = noam_scale * d_model^-0.5 * min(s^-0.5, s * warmup_steps^-1.5)
- `inverse_sqrt` (fairseq): linear warm-up from `warmup_init_lr` to the peak `lr` over
  `warmup_steps` updates, then decay proportional to the inverse square root of the step:
      lr(s) = warmup_init_lr + s * (lr - warmup_init_lr) / warmup_steps   for s < warmup_steps
      lr(s) = lr * sqrt(warmup_steps / s)                                 afterwards

- `linear`: the same warm-up, then a straight line down to zero at `max_steps`. When the
  number of updates is known in advance (a fixed budget), spending the whole decay inside
  it trains further than an inverse-square-root tail that is cut off half-way.
      lr(s) = lr * (max_steps - s) / (max_steps - warmup_steps)                  afterwards

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


def _warmup(s: int, lr: float, warmup_steps: int, warmup_init_lr: float) -> float:
    return warmup_init_lr + s * (lr - warmup_init_lr) / warmup_steps


def inverse_sqrt_lr(step: int, lr: float, warmup_steps: int, warmup_init_lr: float) -> float:
    """fairseq's `inverse_sqrt`: linear warm-up to the peak `lr`, then lr * sqrt(warmup / s)."""
    s = max(step, 1)
    if s < warmup_steps:
        return _warmup(s, lr, warmup_steps, warmup_init_lr)
    return lr * math.sqrt(max(warmup_steps, 1) / s)


def linear_lr(
    step: int, lr: float, warmup_steps: int, warmup_init_lr: float, max_steps: int
) -> float:
    """Warm-up as `inverse_sqrt`, then linear decay reaching zero at `max_steps`."""
    s = max(step, 1)
    if s < warmup_steps:
        return _warmup(s, lr, warmup_steps, warmup_init_lr)
    return lr * max(max_steps - s, 0) / max(max_steps - warmup_steps, 1)


def _noam(step: int, cfg: TrainConfig, d_model: int) -> float:
    return noam_lr(step, d_model, cfg.warmup_steps, cfg.noam_scale)


def _inverse_sqrt(step: int, cfg: TrainConfig, d_model: int) -> float:
    return inverse_sqrt_lr(step, cfg.lr, cfg.warmup_steps, cfg.warmup_init_lr)


def _linear(step: int, cfg: TrainConfig, d_model: int) -> float:
    return linear_lr(step, cfg.lr, cfg.warmup_steps, cfg.warmup_init_lr, cfg.max_steps)


SCHEDULES: dict[str, Callable[[int, TrainConfig, int], float]] = {
    "noam": _noam,
    "inverse_sqrt": _inverse_sqrt,
    "linear": _linear,
}


def learning_rate(step: int, cfg: TrainConfig, d_model: int) -> float:
    """The rate for update number `step` (1-based) under `cfg.schedule`."""
    return SCHEDULES[cfg.schedule](step, cfg, d_model)
