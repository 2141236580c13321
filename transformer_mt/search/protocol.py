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


class SourceVocabulary(Protocol):
    """The target ids each source of a batch may produce (a shortlist), for `decode_step`;
    search only keeps it aligned with the sources, as it does the memory."""

    def keep(self, sources: Tensor) -> SourceVocabulary:
        """Keep the sources `sources` (N',) long, in that order."""
        ...


class DecodingModel(Protocol):
    """What search needs from a model (`Seq2SeqTransformer` or a fake one in tests)."""

    def encode(self, src_ids: Tensor, src_mask: Tensor) -> Tensor:
        """src_ids (B, S) long, src_mask (B, 1, 1, S) bool True = real token -> memory (B, S, D)."""
        ...

    def source_rows(self, sources: Tensor, n_sources: int) -> object:
        """sources (R,) long, the source (row of memory) each row reads, each in
        [0, n_sources) -> that index in the form `decode_step` reads (the model's own: for
        `Seq2SeqTransformer` which rows attend together). Search asks once per change of its
        rows' sources, not at every step."""
        ...

    def decode_step(
        self,
        tgt_ids: Tensor,
        memory: Tensor,
        src_mask: Tensor,
        sources: object,
        cache: ReorderableCache | None,
        vocab: SourceVocabulary | None = None,
    ) -> tuple[Tensor, ReorderableCache]:
        """tgt_ids (R,) last token per row, memory (N, S, D) and src_mask (N, 1, 1, S) one row
        per source, sources what `source_rows` returned for the rows, cache (None on the
        first step), vocab what `SearchOptions.vocabulary` returned for the batch (passed
        only when one is set: each row scores its source's ids, -inf the others) ->
        log_probs (R, V) of the next token, a tensor of the caller's own (beam search
        overwrites it), and the updated cache.

        The model may compute what it needs of a source once, on the first step, and keep it
        in the cache: a reorder that keeps every row inside its source leaves the cache's
        sources, and `sources`, alone."""
        ...
