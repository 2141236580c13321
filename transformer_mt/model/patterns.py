"""Sparse self-attention patterns as boolean keep-masks (True = this query may see this key).

Patterns depend only on the distance d = query position - key position:
  full           every key
  local          |d| <= window                                  (Longformer's sliding window)
  dilated        d a multiple of dilation: 0, ±dilation, ±2·dilation, ...  (itself included)
  local_dilated  local or dilated

Masks are lower-right aligned like `causal_mask`: the Tq queries are the last Tq of the Tk key
positions, so with a cache of Tk - Tq past tokens the new queries keep their true positions.
They combine with the padding mask (`&`) and, in the decoder, with causality. The encoder and
decoder build them once per forward pass and hand them to every layer.

These masks save no work: SDPA still computes every score and discards the hidden ones. On
CUDA, `torch.nn.attention.flex_attention` with a block mask built from the same distance rule
would skip fully hidden blocks; it is not written yet because it needs a GPU to test against
this path (TODO(#8)).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from transformer_mt.model.attention import causal_mask


@dataclass(frozen=True)
class AttentionPattern:
    """Which keys a self-attention query may see; see the module docstring."""

    kind: str = "full"  # full | local | dilated | local_dilated (ModelConfig.attention_pattern)
    window: int = 16
    dilation: int = 8

    def mask(
        self, n_queries: int, n_keys: int, device: torch.device | None = None
    ) -> Tensor | None:
        """(Tq, Tk) bool keep-mask, lower-right aligned; None for `full` (nothing to hide)."""
        if self.kind == "full":
            return None
        queries = torch.arange(n_keys - n_queries, n_keys, device=device)[:, None]  # (Tq, 1)
        distance = queries - torch.arange(n_keys, device=device)[None, :]  # (Tq, Tk)
        local = distance.abs() <= self.window
        dilated = distance % self.dilation == 0
        return {"local": local, "dilated": dilated, "local_dilated": local | dilated}[self.kind]

    def causal_mask(
        self, n_queries: int, n_keys: int, device: torch.device | None = None
    ) -> Tensor | None:
        """(Tq, Tk) pattern & causal keep-mask for the decoder; None for `full`.

        None lets the caller keep its fast causal path (`is_causal=True` in training, no mask
        for one new query on top of a cache).
        """
        keep = self.mask(n_queries, n_keys, device)
        return None if keep is None else keep & causal_mask(n_queries, n_keys, device)
