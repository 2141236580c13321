"""Exponential moving average of model weights (Polyak averaging), optional via train.ema_decay.

    shadow <- decay * shadow + (1 - decay) * weights      after every optimizer update

The shadow copy is kept in float32 beside the model; validation and the saved "ema" entry use
it, while training continues on the raw weights (which is what exact resume restores).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch


class WeightAverage:
    """EMA over every floating-point parameter and buffer of a module."""

    def __init__(self, model: torch.nn.Module, decay: float) -> None:
        self.decay = decay
        self.shadow = {
            name: t.detach().clone().float()
            for name, t in model.state_dict().items()
            if t.is_floating_point()
        }

    @torch.no_grad()
    def update(self, model: torch.nn.Module, applied: torch.Tensor | None = None) -> None:
        """One step of the average towards `model`'s weights; none where `applied`, a () bool
        tensor, is False (a skipped update), decided on its device without reading it."""
        weight = 1.0 - self.decay
        step = weight if applied is None else applied * weight
        for name, t in model.state_dict().items():
            if name in self.shadow:
                self.shadow[name].lerp_(t.float(), step)

    def state_dict(self, model: torch.nn.Module) -> dict[str, torch.Tensor]:
        """A full state_dict for `model` (non-float buffers from the model) with EMA weights."""
        return {
            name: self.shadow[name].to(t.dtype).clone() if name in self.shadow else t.clone()
            for name, t in model.state_dict().items()
        }

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        for name in self.shadow:
            self.shadow[name].copy_(state[name])

    @contextmanager
    def applied_to(self, model: torch.nn.Module) -> Iterator[torch.nn.Module]:
        """Temporarily put the EMA weights into `model` (e.g. for validation), then restore."""
        saved = {name: t.detach().clone() for name, t in model.state_dict().items()}
        model.load_state_dict(self.state_dict(model))
        try:
            yield model
        finally:
            model.load_state_dict(saved)
