"""Seeding and the random-number-generator states a checkpoint carries for exact resume.

Determinism: on CPU in float32 a run is a pure function of `train.seed` (model init, dropout
masks; batch order is seeded separately by (seed, epoch) in data/batching.py). On CUDA some
kernels (atomics in backward) are not bitwise reproducible; we do not force
`torch.use_deterministic_algorithms`, which costs speed, so GPU runs match only up to float
noise.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch


def seed_everything(seed: int) -> None:
    """Seed Python's `random`, NumPy's global generator and torch (CPU and every CUDA device)."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def capture_rng_state() -> dict[str, Any]:
    """Every generator's state as tensors and plain values (loadable with weights_only=True)."""
    name, keys, pos, has_gauss, cached = np.random.get_state()
    return {
        "python": random.getstate(),
        "numpy": [name, keys.tolist(), int(pos), int(has_gauss), float(cached)],
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
    }


def restore_rng_state(state: dict[str, Any]) -> None:
    random.setstate(_as_tuples(state["python"]))
    name, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((name, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(state["torch"].cpu())
    if state["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([s.cpu() for s in state["cuda"]])


def _as_tuples(value: Any) -> Any:
    """random.setstate wants the nested tuples random.getstate gave (lists after a round trip)."""
    if isinstance(value, (list, tuple)):
        return tuple(_as_tuples(v) for v in value)
    return value
