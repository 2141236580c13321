"""The incremental-decoding key/value cache of one attention layer (the dense one: a server's
paged cache, serve/engine/paged.py, follows the same protocol).

Shapes: B batch (hypotheses), Hkv key/value heads, Dh head size.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch
from torch import Tensor

if TYPE_CHECKING:
    from transformer_mt.model.attention import AttentionKernel


@dataclass
class KVCache:
    """Keys and values of one attention layer, growing by appended time steps.

    The buffers are preallocated and doubled when full, so decoding T tokens copies O(T)
    elements in total instead of O(T^2) for concatenation at every step.

    Attributes:
        keys, values: (B, Hkv, capacity, Dh) buffers; only [:, :, :length] is valid. values
            is None in a keys-only cache: latent attention (model/latent.py) caches one
            latent "key" per position and reads its values from it.
        length: number of valid time steps.

    The buffers are (B, capacity, Hkv, Dh) in memory, seen through a transpose: a row's valid
    steps are then one block, which a beam reorder copies whole (at 320 rows and 10 steps a
    third of the time of copying Hkv strided pieces of each row).
    """

    keys: Tensor
    values: Tensor | None
    length: int = 0
    # The buffers before the last reorder, which the next one writes into (see `reorder`).
    spare: tuple[Tensor, Tensor | None] | None = field(default=None, repr=False)

    @classmethod
    def empty(cls, like: Tensor, capacity: int = 16, keys_only: bool = False) -> KVCache:
        """An empty cache for tensors shaped like `like`, (B, H, t, Dh)."""
        rows = like.size(0)
        values = None if keys_only else _new_buffer(like, rows, capacity)
        return cls(_new_buffer(like, rows, capacity), values, 0)

    def append(self, keys: Tensor, values: Tensor | None) -> tuple[Tensor, Tensor | None, None]:
        """Add (B, H, t, Dh) keys/values (None: keys only); return all valid keys and values
        (B, H, length, Dh) (and None: every row holds `length` valid steps, no mask is needed)."""
        new_length = self.length + keys.size(2)
        if new_length > self.keys.size(2):
            capacity = max(new_length, 2 * self.keys.size(2))
            self.keys = _grow(self.keys, capacity, self.length)
            self.values = _grow(self.values, capacity, self.length)
        self.keys[:, :, self.length : new_length] = keys
        if self.values is not None:
            self.values[:, :, self.length : new_length] = values
        self.length = new_length
        valid_values = None if self.values is None else self.values[:, :, :new_length]
        return self.keys[:, :, :new_length], valid_values, None

    def kernel(self, own: AttentionKernel) -> AttentionKernel:
        """`own`: the layer's kernel reads these keys and values as they are."""
        return own

    def reorder(self, indices: Tensor) -> None:
        """Keep batch rows `indices` (B',) in that order (beam reorder, finished-row pruning).

        When every row stays or continues a row that stays (beam search puts each parent's
        best child in its parent's slot), only the rows that change are copied, in place: in a
        beam of 5 about a third of them. Otherwise the new buffers keep the old capacity (a
        buffer cut down to `length` would be grown, copied again, by the next `append`), but
        only the `length` valid steps are copied. The rows are copied into the buffers the
        previous such reorder left (when they are large enough), which become this cache's,
        and the current ones are kept for the next: a fresh buffer of megabytes at every
        reorder costs more in page faults than the copy, for twice the memory.
        """
        moves = _moves_in_place(indices, self.keys.size(0))
        if moves is not None:
            for buffer in (self.keys, self.values):
                _copy_rows(buffer, *moves, self.length)
            return
        spare_keys, spare_values = self.spare or (None, None)
        self.spare = (self.keys, self.values)
        self.keys = _select_rows(self.keys, indices, self.length, spare_keys)
        self.values = _select_rows(self.values, indices, self.length, spare_values)


def _moves_in_place(indices: Tensor, rows: int) -> tuple[Tensor, Tensor] | None:
    """(targets, sources): the rows that change and the rows they continue, when `indices`
    keeps the row count and no source row is itself overwritten; else None."""
    if indices.numel() != rows:
        return None
    targets = (indices != torch.arange(rows, device=indices.device)).nonzero().squeeze(1)
    sources = indices[targets]
    if bool((indices[sources] != sources).any()):
        return None
    return targets, sources


def _copy_rows(buffer: Tensor | None, targets: Tensor, sources: Tensor, length: int) -> None:
    """Rows `sources` of `buffer`'s first `length` steps over rows `targets` (disjoint)."""
    if buffer is None or not targets.numel():
        return
    valid = buffer.transpose(1, 2)[:, :length]  # (B, length, Hkv, Dh): a block per row
    valid.index_copy_(0, targets, valid.index_select(0, sources))


def _select_rows(
    buffer: Tensor | None, indices: Tensor, length: int, spare: Tensor | None
) -> Tensor | None:
    """A buffer like `buffer` holding rows `indices` of its first `length` steps (rest unset):
    the first rows of `spare` when it is one of the same capacity with enough rows."""
    if buffer is None:
        return None
    rows = indices.numel()
    if spare is not None and spare.size(0) >= rows and spare.shape[1:] == buffer.shape[1:]:
        selected = spare[:rows]
    else:
        selected = _new_buffer(buffer, rows, buffer.size(2))
    # In memory order, (B, length, Hkv, Dh): one contiguous block per row.
    source, target = buffer.transpose(1, 2), selected.transpose(1, 2)
    torch.index_select(source[:, :length], 0, indices, out=target[:, :length])
    return selected


def _new_buffer(like: Tensor, rows: int, capacity: int) -> Tensor:
    """An unset (rows, Hkv, capacity, Dh) buffer for `like`'s heads, (rows, capacity, Hkv,
    Dh) in memory."""
    return like.new_empty(rows, capacity, like.size(1), like.size(3)).transpose(1, 2)


def _grow(buffer: Tensor | None, capacity: int, length: int) -> Tensor | None:
    if buffer is None:
        return None
    grown = _new_buffer(buffer, buffer.size(0), capacity)
    grown[:, :, :length] = buffer[:, :, :length]
    return grown
