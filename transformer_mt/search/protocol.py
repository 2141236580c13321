"""The decoding protocol: all that search needs from a model (`Seq2SeqTransformer`, or a fake
one in tests), and from the cache the model returns."""

from __future__ import annotations

from typing import Protocol

from torch import Tensor


class ReorderableCache(Protocol):
    """Incremental-decoding state owned by the caller of `decode_step`: all search needs of it
    is to keep some of its rows (`model.DecoderCache` is the real one)."""

    def reorder(self, indices: Tensor) -> ReorderableCache:
        """Keep rows `indices` (R',) long, in that order; return the reordered cache."""
        ...


class DecodingModel(Protocol):
    """What search needs from a model (`Seq2SeqTransformer` or a fake one in tests)."""

    def encode(self, src_ids: Tensor, src_mask: Tensor) -> Tensor:
        """src_ids (B, S) long, src_mask (B, 1, 1, S) bool True = real token -> memory (B, S, D)."""
        ...

    def decode_step(
        self, tgt_ids: Tensor, memory: Tensor, src_mask: Tensor, cache: ReorderableCache | None
    ) -> tuple[Tensor, ReorderableCache]:
        """tgt_ids (R,) last token per row, memory (R, S, D), src_mask (R, 1, 1, S), cache (None
        on the first step) -> log_probs (R, V) of the next token, a tensor of the caller's own
        (beam search overwrites it), and the updated cache."""
        ...
