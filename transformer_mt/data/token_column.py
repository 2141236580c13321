"""Rows of token ids stored flat: what an encoded corpus side, a batch's sources and a cached
Arrow column all are.

Two flat arrays, all ids concatenated and the row offsets, as an Arrow list column holds them:
batching slices rows out of it without Python lists per row. numpy and pyarrow only, so that
translating (which batches its sources through it) does not import `datasets`.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

if TYPE_CHECKING:
    from transformer_mt.data.typed_tags import TypedTags


@dataclass(frozen=True)
class TokenColumn:
    """Variable-length rows of token ids stored flat: row i is values[offsets[i]:offsets[i+1]]."""

    values: np.ndarray  # (total_tokens,) int32
    offsets: np.ndarray  # (N + 1,) int64

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> np.ndarray:
        return self.values[self.offsets[i] : self.offsets[i + 1]]

    @property
    def lengths(self) -> np.ndarray:
        """(N,) int64 tokens per row, without BOS/EOS."""
        return np.diff(self.offsets)

    def select(self, indices: np.ndarray) -> TokenColumn:
        """Rows `indices`, in that order, as a new compact column."""
        indices = np.asarray(indices, dtype=np.int64)
        lengths = self.lengths[indices]
        offsets = np.zeros(len(indices) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        if len(indices):
            starts = self.offsets[indices]
            gather = np.repeat(starts - offsets[:-1], lengths) + np.arange(offsets[-1])
            values = self.values[gather]
        else:
            values = np.zeros(0, dtype=np.int32)
        return TokenColumn(values, offsets)

    def without_tags(self, tags: TypedTags) -> tuple[TokenColumn, int]:
        """The rows with the tags written in their text taken out (`typed_tags`), and how many
        tags there were."""
        dropped, found = tags.dropped(self.values, self.offsets)
        if not found:
            return self, 0
        kept = np.zeros(len(self.values) + 1, dtype=np.int64)
        np.cumsum(~dropped, out=kept[1:])
        return TokenColumn(self.values[~dropped], kept[self.offsets]), found

    @classmethod
    def concat(cls, columns: Sequence[TokenColumn]) -> TokenColumn:
        """The rows of `columns`, one after the other."""
        if len(columns) == 1:
            return columns[0]
        values = np.concatenate([c.values for c in columns])
        lengths = np.concatenate([c.lengths for c in columns])
        offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        return cls(values, offsets)

    @classmethod
    def from_lists(cls, rows: Sequence[Sequence[int]]) -> TokenColumn:
        lengths = np.fromiter((len(r) for r in rows), dtype=np.int64, count=len(rows))
        offsets = np.zeros(len(rows) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        values = np.fromiter(itertools.chain.from_iterable(rows), np.int32, count=int(offsets[-1]))
        return cls(values, offsets)

    @classmethod
    def from_arrow(cls, column: pa.ChunkedArray) -> TokenColumn:
        array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
        offsets = array.offsets.to_numpy().astype(np.int64)
        values = array.values.to_numpy(zero_copy_only=False).astype(np.int32, copy=False)
        # Sliced Arrow arrays keep absolute offsets into the parent's values.
        return cls(values[offsets[0] : offsets[-1]], offsets - offsets[0])

    def to_arrow(self) -> pa.Array:
        return pa.ListArray.from_arrays(pa.array(self.offsets, pa.int32()), pa.array(self.values))
