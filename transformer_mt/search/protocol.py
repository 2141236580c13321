"""The decoding protocol: all that search needs from a model (`Seq2SeqTransformer`, or a fake
one in tests), and from the cache the model returns."""

from __future__ import annotations

from typing import Protocol

from torch import Tensor


class ReorderableCache(Protocol):
    """Incremental-decoding state owned by the caller of `decode_step`: all search needs of it
    is to keep some of its rows (`model.DecoderCache` is the real one)."""

    def reorder(self, indices: Tensor, sources: Tensor | None = None) -> ReorderableCache:
        """Keep rows `indices` (R',) long, in that order, and, when given, the sources
        `sources` (N',) long (None: every source, in place); return the reordered cache."""
        ...


class DecodingModel(Protocol):
    """What search needs from a model (`Seq2SeqTransformer` or a fake one in tests)."""

    def encode(self, src_ids: Tensor, src_mask: Tensor) -> Tensor:
        """src_ids (B, S) long, src_mask (B, 1, 1, S) bool True = real token -> memory (B, S, D)."""
        ...

    def decode_step(
        self,
        tgt_ids: Tensor,
        memory: Tensor,
        src_mask: Tensor,
        sources: Tensor,
        cache: ReorderableCache | None,
    ) -> tuple[Tensor, ReorderableCache]:
        """tgt_ids (R,) last token per row, memory (N, S, D) and src_mask (N, 1, 1, S) one row
        per source, sources (R,) long the source each row reads, cache (None on the first
        step) -> log_probs (R, V) of the next token, a tensor of the caller's own (beam search
        overwrites it), and the updated cache.

        The model may compute what it needs of a source once, on the first step, and keep it
        in the cache: a reorder that keeps rows inside their sources changes `sources`
        (reordered like the rows) and leaves the cache's sources alone."""
        ...
