"""The two length formulas of `DecodeConfig` (definitions: search/__init__): the length
penalty lp(|y|) that scores divide by, and max_len(x), the most tokens a hypothesis may
generate; and the least max_len that a forced prefix and constraints need."""

from __future__ import annotations

from typing import TypeVar

import torch
from torch import Tensor

from transformer_mt.config import DecodeConfig

T = TypeVar("T", int, Tensor)


def length_penalty(length: int | Tensor, cfg: DecodeConfig) -> float | Tensor:
    """lp(|y|): ((5 + |y|) / 6) ** length_penalty (gnmt), |y| (average), |y| **
    length_penalty (power) or 1 (none). An int gives a float; a long tensor (a length per
    sentence, for a whole beam state at once) a float64 tensor, computed as the float is."""
    n = length.double() if isinstance(length, Tensor) else float(length)
    if cfg.length_norm == "gnmt":
        return ((5.0 + n) / 6.0) ** cfg.length_penalty
    if cfg.length_norm == "average":
        return n
    if cfg.length_norm == "power":
        return n**cfg.length_penalty
    return torch.ones_like(n) if isinstance(n, Tensor) else 1.0


def max_output_lengths(src_mask: Tensor, cfg: DecodeConfig, cap: int | None = None) -> Tensor:
    """max_len(x) = max(1, floor(max_len_a * |x| + max_len_b)) per sentence, at most `cap`.

    Args:
        src_mask: (B, 1, 1, S) bool, True at real source tokens.
        cap: the most tokens the model can decode at all (its position table), or None.

    Returns:
        (B,) long: the most tokens each hypothesis may generate, EOS included.
    """
    src_lens = src_mask.reshape(src_mask.shape[0], -1).sum(dim=1)  # (B,)
    # float64, as Python computes the same formula, so that x.5-style bounds floor alike.
    limits = torch.floor(src_lens.double() * cfg.max_len_a + cfg.max_len_b)
    return limits.long().clamp(min=1, max=cap)


def least_max_len(prefix_len: T, constraint_tokens: T | int) -> T:
    """The max_len a sentence needs at least, whatever max_len(x) says: room for its forced
    prefix (`prefix_len` tokens), its constraints' tokens (`constraint_tokens` in all) and one
    more (EOS, or the first token after the prefix), so that a prefix is never cut and every
    constraint can be met. Ints or (N,) long tensors alike: the search raises its max_lens
    with it, and the server reserves a sentence's cache blocks by it before the search.
    """
    return prefix_len + constraint_tokens + 1
