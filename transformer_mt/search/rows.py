"""The model's rows of a search, kept aligned with `BeamState`'s: encode once and lay the rows
out (`start_rows`), one decoder step on all of them (`next_log_probs`), and the sentences
whose search is over dropped with their rows (`drop_done`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from transformer_mt.config import DecodeConfig
from transformer_mt.search.beam_state import BeamState
from transformer_mt.search.constraints import Phrases
from transformer_mt.search.lengths import max_output_lengths
from transformer_mt.search.options import SearchOptions
from transformer_mt.search.protocol import DecodingModel, ReorderableCache, SourceVocabulary


@dataclass
class ModelRows:
    """Model inputs: one memory row per live source, and the source of each row of
    `BeamState.tokens`, kept aligned with it."""

    memory: Tensor  # (N, S, D)
    src_mask: Tensor  # (N, 1, 1, S) bool
    sources: Tensor  # (R,) long: the row of memory each row reads
    cache: ReorderableCache | None
    # `sources` as the model reads it (`DecodingModel.source_rows`); None: not asked yet.
    layout: object | None = None
    # With a shortlist, the ids each source may produce (`SearchOptions.vocabulary`), kept
    # aligned with `memory`; None: all of them.
    vocab: SourceVocabulary | None = None

    def read_from(self, sources: Tensor) -> None:
        """The rows now read `sources` (R,) long; the model lays them out at the next step."""
        self.sources, self.layout = sources, None

    def laid_out(self, model: DecodingModel) -> object:
        """`sources` as `model.decode_step` reads it, asked once per change of sources."""
        if self.layout is None:
            self.layout = model.source_rows(self.sources, self.memory.size(0))
        return self.layout


@dataclass(frozen=True)
class Forced:
    """What a search forces on each sentence's hypotheses (None: nothing).

    Attributes:
        prefixes: per sentence, target ids every hypothesis starts with.
        constraints: per sentence, phrases of target ids every translation contains (beam
            search only).
    """

    prefixes: Sequence[Sequence[int]] | None = None
    constraints: Sequence[Phrases] | None = None


def start_rows(
    model: DecodingModel,
    src_ids: Tensor,
    src_mask: Tensor,
    cfg: DecodeConfig,
    options: SearchOptions,
    *,
    beam_size: int,
    samples: int = 1,
    forced: Forced = Forced(),
) -> tuple[BeamState, ModelRows]:
    """Encode once and lay out `samples` units per sentence, `beam_size` rows per unit
    (constraints: beam search only, one unit per sentence)."""
    prefixes, constraints = forced.prefixes, forced.constraints
    batch_size = src_ids.shape[0]
    memory = model.encode(src_ids, src_mask)  # (B, S, D)
    copies = samples * beam_size
    rows = ModelRows(
        memory=memory,
        src_mask=src_mask,
        sources=torch.arange(batch_size, device=src_ids.device).repeat_interleave(copies),
        cache=None if options.new_cache is None else options.new_cache(),
    )
    if options.vocabulary is not None:
        needed = _needed_ids(options, batch_size, prefixes, constraints)
        rows.vocab = options.vocabulary(src_ids, needed)
    if prefixes is not None:
        prefixes = [p for p in prefixes for _ in range(samples)]
    state = BeamState.start(
        max_output_lengths(src_mask, cfg, options.max_len_cap).repeat_interleave(samples),
        torch.arange(batch_size, device=src_ids.device).repeat_interleave(samples),
        beam_size,
        prefixes,
        constraints,
        options.ids,
    )
    return state, rows


def _needed_ids(
    options: SearchOptions,
    batch_size: int,
    prefixes: Sequence[Sequence[int]] | None,
    constraints: Sequence[Phrases] | None,
) -> list[list[int]]:
    """`shortlist_needs` of each sentence of a batch."""
    return [
        shortlist_needs(
            options.ids.eos,
            prefixes[n] if prefixes is not None else (),
            constraints[n] if constraints is not None else (),
        )
        for n in range(batch_size)
    ]


def shortlist_needs(eos: int, prefix: Sequence[int], constraints: Phrases) -> list[int]:
    """The target ids a sentence's shortlist must keep: EOS, and the ids of its forced prefix
    and its constraints (its hypotheses have to be able to produce them)."""
    return [eos, *prefix, *(token for phrase in constraints for token in phrase)]


def decode_rows(
    model: DecodingModel, last: Tensor, rows: ModelRows
) -> tuple[Tensor, ReorderableCache]:
    """`model.decode_step` on `rows` for last tokens `last`, with the batch's shortlist (the
    argument is left out without one: models need not take it then)."""
    vocab = () if rows.vocab is None else (rows.vocab,)
    return model.decode_step(
        last, rows.memory, rows.src_mask, rows.laid_out(model), rows.cache, *vocab
    )


def next_log_probs(model: DecodingModel, state: BeamState, rows: ModelRows, bos_id: int) -> Tensor:
    """Run one decoder step on every row: the model's (R, V) log-probs, forbidden tokens not
    yet removed (callers apply `BeamState.forbid`)."""
    log_probs, rows.cache = decode_rows(model, state.last_tokens(bos_id), rows)  # (R,) tokens
    return log_probs


def drop_done(
    state: BeamState,
    rows: ModelRows,
    done: Tensor,
    beam_rows: Tensor | None,
    regrouped: bool = False,
) -> None:
    """Drop the sentences marked `done` (N,) bool and realign the model rows with the state.

    Args:
        beam_rows: (N * K,) long, the old row each new row continues (beam search), or None
            when rows keep their place (greedy search and sampling).
        regrouped: the new rows are not the old ones reordered (beam search's first step
            decoded one row per sentence, and its K beams continue it): their sources are
            laid out anew. Otherwise a beam's rows continue rows of their own sentence, all
            reading one source, and the model's layout of them holds.
    """
    n_sentences, beam_size = state.scores.shape
    kept_sources = None
    if done.any():
        keep_rows = state.keep((~done).nonzero().squeeze(1))  # (N' * K,)
        if beam_rows is None:
            beam_rows = keep_rows
        else:
            beam_rows = beam_rows.reshape(n_sentences, beam_size)[~done].reshape(-1)
        # The sources no row reads any more leave, memory and cache alike; the index is
        # renumbered over those that stay.
        kept_sources, sources = rows.sources[beam_rows].unique(return_inverse=True)
        rows.read_from(sources)
        rows.memory = rows.memory[kept_sources]
        rows.src_mask = rows.src_mask[kept_sources]
        if rows.vocab is not None:
            rows.vocab = rows.vocab.keep(kept_sources)
    elif regrouped and beam_rows is not None:
        rows.read_from(rows.sources[beam_rows])
    if beam_rows is not None and rows.cache is not None:
        rows.cache = rows.cache.reorder(beam_rows, kept_sources)
