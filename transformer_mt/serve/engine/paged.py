"""A paged KV cache for decoder self-attention (Kwon et al. 2023, PagedAttention).

One pool of fixed-size blocks is allocated at start; each hypothesis (a row of the decoding
batch) holds a block table, the list of blocks that store its keys and values in order. A beam
reorder forks rows: a child row copies its parent's table and shares every block by reference
count, so beams that share a prefix share its memory. A block is copied only when a row writes
into a block that others still read (copy-on-write, at most one partial block per fork), and a
block goes back to the pool when its last reader leaves. Attention gathers each row's blocks
into one (R, Hkv, T, Dh) view and masks the slots past its length; with `group_rows`, rows
are sorted by length and gathered in groups, each padded to its own longest row only, and the
cache gives the model the kernel that attends group by group (row_groups.py): in a server's
batch, where new and old hypotheses sit side by side, one padded view spent about half of the
attention's work on padding.

The bookkeeping (reference counts, the free stack, the block tables) is held in CPU tensors
and updated with one vectorised operation per step, whatever the number of rows: a server
batch holds a thousand hypotheses or more, and a Python loop over them per step costs as
much as the model's work on them.

`PagedDecoderCache` follows the protocol of `model.DecoderCache` (rows may be at different
positions: `length` is a (R,) tensor), so the model decodes through it unchanged; the dense
cache is its slow twin in the tests.

Shapes: R rows, W table width (blocks), L decoder layers, Hkv key/value heads, Dh head size,
bs block size.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from transformer_mt.config import ModelConfig
from transformer_mt.errors import TmtError
from transformer_mt.model.attention import AttentionKernel
from transformer_mt.model.layers import LayerCache
from transformer_mt.serve.engine.row_groups import InGroups, RowGroups


class PoolExhausted(TmtError):
    """Every block of the pool is in use."""


def _blocks(indices: int | Sequence[int] | Tensor) -> Tensor:
    return torch.as_tensor(indices, dtype=torch.long).reshape(-1)


class BlockPool:
    """`n_blocks` blocks of `block_size` positions for every decoder layer, and their
    reference counts. keys/values: (L, n_blocks, bs, Hkv, Dh) on the model's device; refs and
    the free stack on the CPU. `keys_only`: no values (latent attention caches one latent
    per position, Hkv = 1 and Dh = r + d_R, and reads its values from it)."""

    def __init__(
        self,
        n_blocks: int,
        block_size: int,
        n_layers: int,
        n_kv_heads: int,
        head_dim: int,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str = "cpu",
        keys_only: bool = False,
    ):
        shape = (n_layers, n_blocks, block_size, n_kv_heads, head_dim)
        self.keys = torch.zeros(shape, dtype=dtype, device=device)
        self.values = None if keys_only else torch.zeros(shape, dtype=dtype, device=device)
        self.block_size = block_size
        self.refs = torch.zeros(n_blocks, dtype=torch.long)
        # A stack, top at the end: block 0 is handed out first.
        self._free = torch.arange(n_blocks - 1, -1, -1, dtype=torch.long)
        self._n_free = n_blocks

    @property
    def n_blocks(self) -> int:
        return self.refs.numel()

    @property
    def n_free(self) -> int:
        return self._n_free

    @classmethod
    def for_model(
        cls,
        cfg: ModelConfig,
        n_blocks: int,
        block_size: int,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str = "cpu",
    ) -> BlockPool:
        """A pool laid out as `cfg`'s decoder caches (`ModelConfig.self_attention_cache_layout`)."""
        heads, size, keys_only = cfg.self_attention_cache_layout
        layers = cfg.decoder_layers
        return cls(n_blocks, block_size, layers, heads, size, dtype, device, keys_only)

    @property
    def n_used(self) -> int:
        return self.n_blocks - self.n_free

    @property
    def block_bytes(self) -> int:
        """Bytes one block takes (keys and values of every layer)."""
        parts = 1 if self.values is None else 2
        return parts * self.keys[:, 0].numel() * self.keys.element_size()

    def allocate(self) -> int:
        return int(self.allocate_many(1)[0])

    def allocate_many(self, n: int) -> Tensor:
        """`n` free blocks (a (n,) tensor), each with one reference."""
        if n > self._n_free:
            raise PoolExhausted(
                f"all {self.n_blocks} KV blocks are in use"
                if self._n_free == 0
                else f"{n} KV blocks wanted, {self._n_free} of {self.n_blocks} free"
            )
        self._n_free -= n
        blocks = self._free[self._n_free : self._n_free + n].flip(0)
        self.refs[blocks] = 1
        return blocks

    def share(self, blocks: int | Sequence[int] | Tensor) -> None:
        """One more reference to each of `blocks` (a block may appear several times)."""
        blocks = _blocks(blocks)
        self.refs.index_add_(0, blocks, torch.ones_like(blocks))

    def release(self, blocks: int | Sequence[int] | Tensor) -> None:
        """One reference fewer to each of `blocks`; those left with none go back to the pool."""
        blocks = _blocks(blocks)
        if blocks.numel() == 0:
            return
        self.refs.index_add_(0, blocks, -torch.ones_like(blocks))
        freed = blocks[self.refs[blocks] == 0].unique()
        self._free[self._n_free : self._n_free + freed.numel()] = freed
        self._n_free += freed.numel()

    def copy(self, sources: int | Sequence[int] | Tensor, targets: int | Sequence[int] | Tensor):
        """Block targets[i] := block sources[i], every layer."""
        sources = _blocks(sources).to(self.keys.device)
        targets = _blocks(targets).to(self.keys.device)
        for part in (self.keys, self.values):
            if part is not None:
                part.index_copy_(1, targets, part.index_select(1, sources))


class PagedDecoderCache:
    """The decoder's incremental state with self-attention in a `BlockPool`.

    Row r's table is `tables[r, :counts[r]]` (the rest of the row is padding); `lengths[r]`
    positions of it are written. Cross-attention keys and values, one row per source, stay in
    `layers[i].cross_attn`: computed by the model on the first step (a drop-in for search's
    dense cache), or given by the owner with `attend_sources` (the server's scheduler, which
    keeps every source's keys from the moment it joins).
    """

    def __init__(
        self,
        pool: BlockPool,
        n_layers: int,
        dtype: torch.dtype | None = None,
        rows: int = 0,
        group_rows: int = 0,
    ):
        self.pool = pool
        self.group_rows = group_rows  # >0: attend in groups of about this many rows
        self.device = pool.keys.device
        self.tables = torch.zeros(rows, 1, dtype=torch.long)  # CPU
        self.counts = torch.zeros(rows, dtype=torch.long)  # CPU: blocks in each row's table
        self.lengths = torch.zeros(rows, dtype=torch.long)  # CPU: positions written
        self._length: Tensor | None = None  # `lengths` on the device, for the model
        self.layers = [
            LayerCache(self_attn=_PagedLayer(self, i), dtype=dtype) for i in range(n_layers)
        ]
        self._step: _StepSlots | None = None
        self._buffers: list[Tensor | None] = [None, None]  # gathered keys, values

    @property
    def n_rows(self) -> int:
        return self.lengths.numel()

    @property
    def length(self) -> Tensor | int:
        """(R,) tokens each row has cached: the position of its next token (0 while the cache
        has no rows: search's first step brings them)."""
        if not self.n_rows:
            return 0
        if self._length is None:
            self._length = self.lengths.to(self.device)
        return self._length

    def table(self, row: int) -> list[int]:
        """Row `row`'s blocks, in order."""
        return self.tables[row, : int(self.counts[row])].tolist()

    def blocks_in_use(self) -> Tensor:
        """Every table entry of every row (a block once per row that reads it)."""
        return self.tables[self._in_table(self.tables, self.counts)]

    def add_rows(self, n: int, table: Sequence[int] = (), length: int = 0) -> None:
        """Append `n` rows (new hypotheses) that start with `length` positions cached in the
        blocks of `table` (shared, e.g. a cached prefix's), or empty."""
        if n == 0:
            return
        width = max(self.tables.size(1), len(table), 1)
        new = torch.zeros(n, width, dtype=torch.long)
        if table:
            new[:, : len(table)] = torch.tensor(list(table), dtype=torch.long)
            self.pool.share(new[:, : len(table)])
        self.tables = torch.cat([self._widened(width), new])
        self.counts = torch.cat([self.counts, self.counts.new_full((n,), len(table))])
        self.lengths = torch.cat([self.lengths, self.lengths.new_full((n,), length)])
        self._length = None

    def attend_sources(self, cross: list[tuple[Tensor, Tensor]]) -> None:
        """Let the rows attend to `cross`, per decoder layer the (N, Hkv, S, Dh) keys and
        values of N sources (which source each row reads is the decoding step's argument)."""
        for layer, keys_values in zip(self.layers, cross, strict=True):
            layer.cross_attn = keys_values

    def reorder(self, indices: Tensor, sources: Tensor | None = None) -> PagedDecoderCache:
        """Row i continues old row indices[i] (any row may be picked many times, or none):
        its table is a copy, its blocks shared; rows not picked release theirs. With
        `sources` (N',) long, keep those cross-attention sources (None: every source)."""
        picks = indices.to("cpu", torch.long)
        old = self.blocks_in_use()
        self.tables, self.counts = self.tables[picks], self.counts[picks]
        self.lengths = self.lengths[picks]
        self._length = None
        self.pool.share(self.blocks_in_use())
        self.pool.release(old)
        if sources is not None:
            for layer in self.layers:
                if layer.cross_attn is not None:
                    keys, values = layer.cross_attn
                    layer.cross_attn = (keys[sources], values[sources])
        return self

    def release_all(self) -> None:
        """Give every row's blocks back (the rows stay, empty, until the next reorder)."""
        self.pool.release(self.blocks_in_use())
        self.counts = torch.zeros_like(self.counts)

    def append(
        self, layer: int, keys: Tensor, values: Tensor | None
    ) -> tuple[Tensor, Tensor | None, Tensor] | tuple[RowGroups, None, None]:
        """Write one new position per row (R, Hkv, 1, Dh) for decoder layer `layer`; return
        every row's keys and values (R, Hkv, T, Dh) and the (R, 1, 1, T) keep-mask, or, when
        `group_rows` splits the rows into several groups, the same as `RowGroups`, which only
        `kernel`'s kernel reads. Values None: a keys-only pool (latent attention), which
        attends over one padded view."""
        if keys.size(2) != 1:
            raise ValueError("the paged cache takes one new position per row and step")
        if layer == 0:
            if not self.n_rows:
                self.add_rows(keys.size(0))
            self._step = self._start_step()
        step = self._step
        pool_keys = self.pool.keys[layer]
        pool_values = None if values is None else self.pool.values[layer]
        for pool_part, part in ((pool_keys, keys), (pool_values, values)):
            if part is not None:
                slots = pool_part.view(-1, *pool_part.shape[2:])  # (n_blocks * bs, Hkv, Dh)
                slots.index_copy_(0, step.slots, part[:, :, 0].to(slots.dtype))
        if layer == len(self.layers) - 1:
            self.lengths = self.lengths + 1
            self._length = None
        all_keys = self._gather(pool_keys, step.tables, 0)
        if pool_values is None:
            if step.rows is not None:
                raise ValueError("a keys-only cache attends over one view (group_rows=0)")
            return all_keys[0], None, step.valid[0]
        all_values = self._gather(pool_values, step.tables, 1)
        if step.rows is None:
            return all_keys[0], all_values[0], step.valid[0]
        return RowGroups(step.rows, all_keys, all_values, step.valid), None, None

    def kernel(self, own: AttentionKernel) -> AttentionKernel:
        """The kernel attention over this step's keys runs through: `own`, the layer's, over
        one padded view; `own` group by group (`InGroups`) when the rows are in groups."""
        in_groups = self._step is not None and self._step.rows is not None
        return InGroups(own) if in_groups else own

    def _gather(self, source: Tensor, tables: list[Tensor], which: int) -> list[Tensor]:
        """Each (n, W) table's blocks of `source` (n_blocks, bs, Hkv, Dh) as (n, Hkv, W * bs,
        Dh), a strided view into buffer `which` (0 keys, 1 values), reused by every layer and
        step: a fresh tensor of this size each time costs more in page faults than the copy.
        The views are valid until the next call with the same `which`."""
        block = source[0].numel()
        size = sum(t.numel() for t in tables) * block
        buffer = self._buffers[which]
        if buffer is None or buffer.numel() < size:
            grown = size if buffer is None else max(size, 2 * buffer.numel())
            buffer = self._buffers[which] = source.new_empty(grown)
        out, start = [], 0
        for table in tables:
            n, width = table.shape
            stop = start + table.numel() * block
            flat = buffer[start:stop].view(table.numel(), *source.shape[1:])
            torch.index_select(source, 0, table.view(-1), out=flat)
            # (n * W, bs, Hkv, Dh) -> (n, W * bs, Hkv, Dh) -> (n, Hkv, W * bs, Dh)
            out.append(flat.view(n, -1, *source.shape[2:]).transpose(1, 2))
            start = stop
        return out

    def _start_step(self) -> _StepSlots:
        """Give every row a writable slot for its next position (a new block when it starts
        one, a private copy when its block is shared) and lay out the step's block tables:
        one padded table, or with `group_rows` one per group of rows of similar length."""
        pool, size = self.pool, self.pool.block_size
        rows = torch.arange(self.n_rows)
        column, offsets = self.lengths // size, self.lengths % size
        starts = offsets == 0  # the next position opens a new block
        width = int(column.max()) + 1
        if width > self.tables.size(1):
            self.tables = self._widened(max(width, 2 * self.tables.size(1)))
        fresh = rows[starts]
        self.tables[fresh, column[fresh]] = pool.allocate_many(fresh.numel())
        self.counts[fresh] += 1
        self._copy_shared(rows[~starts], column[~starts])
        device = self.device
        groups = [rows]
        if self.group_rows and self.n_rows > self.group_rows:
            groups = list(self.lengths.argsort().tensor_split(-(-self.n_rows // self.group_rows)))
        tables, valid = [], []
        for group in groups:
            group_width = int(column[group].max()) + 1  # pads: any block, masked
            tables.append(self.tables[group, :group_width].to(device))
            ends = self.lengths[group] + 1  # positions each row holds after this step
            if bool((ends == group_width * size).all()):
                valid.append(None)  # every slot holds a position: attention needs no mask
                continue
            positions = torch.arange(group_width * size)
            valid.append((positions < ends[:, None])[:, None, None, :].to(device))
        return _StepSlots(
            slots=(self.tables[rows, column] * size + offsets).to(device),
            rows=None if len(groups) == 1 else [group.to(device) for group in groups],
            tables=tables,
            valid=valid,
        )

    def _copy_shared(self, rows: Tensor, column: Tensor) -> None:
        """Copy-on-write: rows `rows` write into block `column` of their tables; each whose
        block another reader holds gets a private copy. When only writers hold a block, the
        first of them keeps it and the others copy."""
        current = self.tables[rows, column]
        shared = self.pool.refs[current] > 1
        rows, column, current = rows[shared], column[shared], current[shared]
        if not rows.numel():
            return
        current, order = current.sort(stable=True)
        rows, column = rows[order], column[order]
        writers = torch.bincount(current, minlength=self.pool.n_blocks)[current]
        first = torch.ones(rows.numel(), dtype=torch.bool)
        first[1:] = current[1:] != current[:-1]
        copies = ~(first & (self.pool.refs[current] == writers))
        rows, column, current = rows[copies], column[copies], current[copies]
        private = self.pool.allocate_many(rows.numel())
        self.pool.copy(current, private)
        self.pool.release(current)
        self.tables[rows, column] = private

    def _widened(self, width: int) -> Tensor:
        if width <= self.tables.size(1):
            return self.tables
        wider = self.tables.new_zeros(self.tables.size(0), width)
        wider[:, : self.tables.size(1)] = self.tables
        return wider

    @staticmethod
    def _in_table(tables: Tensor, counts: Tensor) -> Tensor:
        """(R, W) bool: the entries that are blocks of their row."""
        return torch.arange(tables.size(1)) < counts[:, None]


@dataclass(frozen=True)
class _StepSlots:
    """Where a decoding step writes and what it reads."""

    slots: Tensor  # (R,) long: where each row's new position goes, block * bs + offset
    rows: list[Tensor] | None  # the rows of each group (None: one group, every row in order)
    tables: list[Tensor]  # per group (n_g, W_g) long: its rows' tables, padded with block 0
    valid: list[Tensor | None]  # per group (n_g, 1, 1, W_g * bs) bool: slots holding a
    # position of the row (the new one too); None when every slot of the group does


class _PagedLayer:
    """One decoder layer's view of a `PagedDecoderCache` (the model's `SelfAttentionCache`)."""

    def __init__(self, cache: PagedDecoderCache, layer: int):
        self.cache, self.layer = cache, layer

    @property
    def length(self) -> Tensor | int:
        return self.cache.length

    def append(
        self, keys: Tensor, values: Tensor | None
    ) -> tuple[Tensor, Tensor | None, Tensor] | tuple[RowGroups, None, None]:
        return self.cache.append(self.layer, keys, values)

    def kernel(self, own: AttentionKernel) -> AttentionKernel:
        return self.cache.kernel(own)
