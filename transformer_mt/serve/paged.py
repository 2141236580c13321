"""A paged KV cache for decoder self-attention (Kwon et al. 2023, PagedAttention).

One pool of fixed-size blocks is allocated at start; each hypothesis (a row of the decoding
batch) holds a block table, the list of blocks that store its keys and values in order. A beam
reorder forks rows: a child row copies its parent's table and shares every block by reference
count, so beams that share a prefix share its memory. A block is copied only when a row writes
into a block that others still read (copy-on-write, at most one partial block per fork), and a
block goes back to the pool when its last reader leaves. Attention gathers each row's blocks
into one (R, Hkv, T, Dh) view and masks the slots past its length.

`PagedDecoderCache` follows the protocol of `model.DecoderCache` (rows may be at different
positions: `length` is a (R,) tensor), so the model decodes through it unchanged; the dense
cache is its slow twin in the tests.

Shapes: R rows, L decoder layers, Hkv key/value heads, Dh head size, bs block size.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from transformer_mt.errors import TmtError
from transformer_mt.model.layers import LayerCache


class PoolExhausted(TmtError):
    """Every block of the pool is in use."""


class BlockPool:
    """`n_blocks` blocks of `block_size` positions for every decoder layer, and their
    reference counts. keys/values: (L, n_blocks, bs, Hkv, Dh)."""

    def __init__(
        self,
        n_blocks: int,
        block_size: int,
        n_layers: int,
        n_kv_heads: int,
        head_dim: int,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str = "cpu",
    ):
        shape = (n_layers, n_blocks, block_size, n_kv_heads, head_dim)
        self.keys = torch.zeros(shape, dtype=dtype, device=device)
        self.values = torch.zeros(shape, dtype=dtype, device=device)
        self.block_size = block_size
        self.refs = [0] * n_blocks
        self._free = list(range(n_blocks - 1, -1, -1))  # a stack: block 0 is handed out first

    @property
    def n_blocks(self) -> int:
        return len(self.refs)

    @property
    def n_free(self) -> int:
        return len(self._free)

    @property
    def n_used(self) -> int:
        return self.n_blocks - self.n_free

    @property
    def block_bytes(self) -> int:
        """Bytes one block takes (keys and values of every layer)."""
        return 2 * self.keys[:, 0].numel() * self.keys.element_size()

    def allocate(self) -> int:
        if not self._free:
            raise PoolExhausted(f"all {self.n_blocks} KV blocks are in use")
        block = self._free.pop()
        self.refs[block] = 1
        return block

    def share(self, block: int) -> None:
        self.refs[block] += 1

    def release(self, block: int) -> None:
        self.refs[block] -= 1
        if self.refs[block] == 0:
            self._free.append(block)

    def copy(self, source: int, target: int) -> None:
        self.keys[:, target] = self.keys[:, source]
        self.values[:, target] = self.values[:, source]


class PagedDecoderCache:
    """The decoder's incremental state with self-attention in a `BlockPool`.

    Cross-attention keys and values stay in `layers[i].cross_attn`. With `rows_own_cross`
    (a drop-in for search, which lays out one memory row per hypothesis) they are per row,
    computed by the model on the first step and reordered with the rows; otherwise the owner
    (the server's scheduler) keeps one row per source and sets `cross_slots`.
    """

    share_sources = False
    source_group = 1

    def __init__(
        self,
        pool: BlockPool,
        n_layers: int,
        dtype: torch.dtype | None = None,
        rows: int = 0,
        rows_own_cross: bool = True,
    ):
        self.pool = pool
        self.rows_own_cross = rows_own_cross
        self.tables: list[list[int]] = [[] for _ in range(rows)]
        self.lengths = torch.zeros(rows, dtype=torch.long, device=pool.keys.device)
        self.layers = [
            LayerCache(self_attn=_PagedLayer(self, i), dtype=dtype) for i in range(n_layers)
        ]
        self._step: _StepSlots | None = None
        self._buffers: list[Tensor | None] = [None, None]  # gathered keys, values

    @property
    def length(self) -> Tensor | int:
        """(R,) tokens each row has cached: the position of its next token (0 while the cache
        has no rows: search's first step brings them)."""
        return self.lengths if self.tables else 0

    def add_rows(self, n: int, table: Sequence[int] = (), length: int = 0) -> None:
        """Append `n` rows (new hypotheses) that start with `length` positions cached in the
        blocks of `table` (shared, e.g. a cached prefix's), or empty."""
        for _ in range(n):
            for block in table:
                self.pool.share(block)
            self.tables.append(list(table))
        self.lengths = torch.cat([self.lengths, self.lengths.new_full((n,), length)])

    def reorder(self, indices: Tensor) -> PagedDecoderCache:
        """Row i continues old row indices[i] (any row may be picked many times, or none):
        its table is a copy, its blocks shared; rows not picked release theirs."""
        tables = [list(self.tables[i]) for i in indices.tolist()]
        for table in tables:
            for block in table:
                self.pool.share(block)
        self.release_all()
        self.tables, self.lengths = tables, self.lengths[indices]
        if self.rows_own_cross:
            for layer in self.layers:
                if layer.cross_attn is not None:
                    keys, values = layer.cross_attn
                    layer.cross_attn = (keys[indices], values[indices])
        return self

    def release_all(self) -> None:
        """Give every row's blocks back (the rows stay, empty, until the next reorder)."""
        for table in self.tables:
            for block in table:
                self.pool.release(block)
        self.tables = [[] for _ in self.tables]

    def append(self, layer: int, keys: Tensor, values: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Write one new position per row (R, Hkv, 1, Dh) for decoder layer `layer`; return
        every row's keys and values (R, Hkv, T, Dh) and the (R, 1, 1, T) keep-mask."""
        if keys.size(2) != 1:
            raise ValueError("the paged cache takes one new position per row and step")
        if layer == 0:
            if not self.tables:
                self.add_rows(keys.size(0))
            self._step = self._start_step()
        step = self._step
        pool_keys, pool_values = self.pool.keys[layer], self.pool.values[layer]
        pool_keys[step.blocks, step.offsets] = keys[:, :, 0].to(pool_keys.dtype)
        pool_values[step.blocks, step.offsets] = values[:, :, 0].to(pool_values.dtype)
        # (R * blocks, bs, Hkv, Dh) -> (R, T, Hkv, Dh) -> (R, Hkv, T, Dh), a strided view
        shape = (step.tables.size(0), -1, keys.size(1), keys.size(3))
        tables = step.tables.view(-1)
        all_keys = self._gather(pool_keys, tables, 0).view(shape).transpose(1, 2)
        all_values = self._gather(pool_values, tables, 1).view(shape).transpose(1, 2)
        if layer == len(self.layers) - 1:
            self.lengths = self.lengths + 1
        return all_keys, all_values, step.valid

    def _gather(self, source: Tensor, index: Tensor, which: int) -> Tensor:
        """source[index] into buffer `which` (0 keys, 1 values), reused by every layer and
        step: a fresh tensor of this size each time costs more in page faults than the copy.
        The result is valid until the next call with the same `which`."""
        shape = (index.numel(), *source.shape[1:])
        size = math.prod(shape)
        buffer = self._buffers[which]
        if buffer is None or buffer.numel() < size:
            grown = size if buffer is None else max(size, 2 * buffer.numel())
            buffer = self._buffers[which] = source.new_empty(grown)
        out = buffer[:size].view(shape)
        return torch.index_select(source, 0, index, out=out)

    def _start_step(self) -> _StepSlots:
        """Give every row a writable slot for its next position (a new block when it starts
        one, a private copy when its block is shared) and lay out the step's block tables."""
        size, pool = self.pool.block_size, self.pool
        blocks, offsets = [], []
        for table, length in zip(self.tables, self.lengths.tolist(), strict=True):
            index = length // size
            if index == len(table):
                table.append(pool.allocate())
            elif pool.refs[table[index]] > 1:  # copy-on-write
                private = pool.allocate()
                pool.copy(table[index], private)
                pool.release(table[index])
                table[index] = private
            blocks.append(table[index])
            offsets.append(length % size)
        device = self.lengths.device
        width = max((len(t) for t in self.tables), default=0)
        padded = [t + [0] * (width - len(t)) for t in self.tables]  # pads: any block, masked
        positions = torch.arange(width * size, device=device)
        return _StepSlots(
            blocks=torch.tensor(blocks, dtype=torch.long, device=device),
            offsets=torch.tensor(offsets, dtype=torch.long, device=device),
            tables=torch.tensor(padded, dtype=torch.long, device=device).view(-1, width),
            valid=(positions <= self.lengths[:, None])[:, None, None, :],
        )


@dataclass(frozen=True)
class _StepSlots:
    """Where a decoding step writes and what it reads."""

    blocks: Tensor  # (R,) long: the block of each row's new position
    offsets: Tensor  # (R,) long: its slot in that block
    tables: Tensor  # (R, blocks) long: every row's table, padded with block 0
    valid: Tensor  # (R, 1, 1, T) bool: slots holding a position of the row (the new one too)


class _PagedLayer:
    """One decoder layer's view of a `PagedDecoderCache` (the model's `SelfAttentionCache`)."""

    def __init__(self, cache: PagedDecoderCache, layer: int):
        self.cache, self.layer = cache, layer

    @property
    def length(self) -> Tensor | int:
        return self.cache.length

    def append(self, keys: Tensor, values: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        return self.cache.append(self.layer, keys, values)
