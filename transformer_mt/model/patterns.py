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

On the SDPA path these masks save no work: SDPA still computes every score and discards the
hidden ones. `block_mask` states the same rule as a `torch.nn.attention.flex_attention`
mask_mod; flex attention then skips the (128 x 128) blocks with no visible key at all, so the
work of `local` shrinks from O(L^2) to O(L * window) (model.attention_backend: flex).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from transformer_mt.model.attention import causal_mask

if TYPE_CHECKING:
    from torch.nn.attention.flex_attention import BlockMask


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
        return self.keeps(queries - torch.arange(n_keys, device=device)[None, :])  # (Tq, Tk)

    def keeps(self, distance: Tensor) -> Tensor:
        """The rule itself: True where query position - key position = `distance` is visible.

        One definition for the dense masks and the flex mask_mod, so the two cannot drift.
        """
        if self.kind == "full":
            return torch.ones_like(distance, dtype=torch.bool)
        local = distance.abs() <= self.window
        if self.kind == "local":
            return local
        dilated = distance % self.dilation == 0
        return dilated if self.kind == "dilated" else local | dilated

    def causal_mask(
        self, n_queries: int, n_keys: int, device: torch.device | None = None
    ) -> Tensor | None:
        """(Tq, Tk) pattern & causal keep-mask for the decoder; None for `full`.

        None lets the caller keep its fast causal path (`is_causal=True` in training, no mask
        for one new query on top of a cache).
        """
        keep = self.mask(n_queries, n_keys, device)
        return None if keep is None else keep & causal_mask(n_queries, n_keys, device)

    def block_mask(
        self,
        n_queries: int,
        n_keys: int,
        key_keep: Tensor | None = None,
        causal: bool = False,
        device: torch.device | None = None,
    ) -> BlockMask:
        """The pattern (and padding, and causality) as a flex_attention `BlockMask`.

        Args:
            key_keep: (B, Tk) bool, True = real key (padding mask); None: every key is real.
            n_queries, n_keys: lower-right aligned as `mask`.
            causal: also hide future keys (decoder self-attention).
            device: where the mask lives when there is no `key_keep`.
        """
        from torch.nn.attention.flex_attention import create_block_mask

        offset = n_keys - n_queries

        def mask_mod(b: Tensor, h: Tensor, q: Tensor, k: Tensor) -> Tensor:
            distance = q + offset - k
            keep = self.keeps(distance)
            if causal:
                keep = keep & (distance >= 0)
            if key_keep is not None:
                keep = keep & key_keep[b, k]
            return keep

        batch = None if key_keep is None else key_keep.size(0)
        device = key_keep.device if key_keep is not None else device or torch.device("cpu")
        return create_block_mask(mask_mod, batch, None, n_queries, n_keys, device=device)
