"""Self-attention over a server's decoding batch in groups of rows of similar length.

In a server's batch new and old hypotheses sit side by side, so the numbers of positions their
rows have cached differ widely, and one view of the batch padded to its longest row spent
about half of the attention's work on padding. With `group_rows` the paged cache (paged.py)
sorts its rows by length and gathers them in groups, each padded to its own longest row only
(`RowGroups`), and gives the model the kernel that reads them (`InGroups`): the layer's own
kernel, run once per group. The model sees only a kernel and what that kernel reads.

Only plain attention runs in groups: one query per row, no mask but each group's own, no
position terms in the scores (the engine keeps relative positions and latent attention on one
view, limits.py's `group_rows`).

Shapes: R rows, n_g rows in group g, H heads, Hkv key/value heads, T_g positions of group g's
longest row, Tq queries per row, Dh head size.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from transformer_mt.model.attention import AttentionKernel


@dataclass(frozen=True)
class RowGroups:
    """Keys and values of a decoding batch gathered group by group: group g holds the rows
    `rows[g]` (n_g,) long, keys/values[g] (n_g, Hkv, T_g, Dh) with the keep-mask masks[g]
    (n_g, 1, 1, T_g) (None: every key is valid)."""

    rows: list[Tensor]
    keys: list[Tensor]
    values: list[Tensor]
    masks: list[Tensor | None]

    @property
    def dtype(self) -> torch.dtype:
        """The keys' dtype, which attention runs in (as it runs in a key tensor's)."""
        return self.keys[0].dtype


@dataclass(frozen=True)
class InGroups:
    """The attention kernel over `RowGroups`: `kernel`, the layer's own, run on each group's
    rows of the query with that group's keys, values and mask."""

    kernel: AttentionKernel

    def __call__(
        self,
        query: Tensor,
        key: RowGroups,
        value: None = None,
        mask: None = None,
        is_causal: bool = False,
        dropout_p: float = 0.0,
        attn_bias: None = None,
    ) -> Tensor:
        """Attention of `query` (R, H, Tq, Dh) over the groups `key` -> (R, H, Tq, Dh); the
        arguments of `model.attention.attention`, of which the groups take none but the query
        (their values and masks are their own).

        Raises:
            ValueError: a value, mask, causal triangle, dropout or bias from the caller.
        """
        if value is not None or mask is not None or is_causal or dropout_p or attn_bias is not None:
            raise ValueError("row groups take one query per row, no mask, bias or dropout")
        out = torch.empty_like(query)
        for rows, keys, values, masks in zip(
            key.rows, key.keys, key.values, key.masks, strict=True
        ):
            out.index_copy_(0, rows, self.kernel(query.index_select(0, rows), keys, values, masks))
        return out
