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
from transformer_mt.search.lengths import max_output_lengths
from transformer_mt.search.options import SearchOptions
from transformer_mt.search.protocol import DecodingModel, ReorderableCache


@dataclass
class ModelRows:
    """Model inputs kept row-aligned with `BeamState.tokens`."""

    memory: Tensor  # (N * K, S, D)
    src_mask: Tensor  # (N * K, 1, 1, S) bool
    cache: ReorderableCache | None


def start_rows(
    model: DecodingModel,
    src_ids: Tensor,
    src_mask: Tensor,
    cfg: DecodeConfig,
    beam_size: int,
    samples: int,
    options: SearchOptions,
    prefixes: Sequence[Sequence[int]] | None = None,
) -> tuple[BeamState, ModelRows]:
    """Encode once and lay out `samples` units per sentence, `beam_size` rows per unit."""
    batch_size = src_ids.shape[0]
    memory = model.encode(src_ids, src_mask)  # (B, S, D)
    copies = samples * beam_size
    if prefixes is not None:
        prefixes = [p for p in prefixes for _ in range(samples)]
    state = BeamState.start(
        max_output_lengths(src_mask, cfg, options.max_len_cap).repeat_interleave(samples),
        torch.arange(batch_size, device=src_ids.device).repeat_interleave(samples),
        beam_size,
        prefixes,
    )
    rows = ModelRows(
        memory=memory.repeat_interleave(copies, dim=0),  # (B * copies, S, D)
        src_mask=src_mask.repeat_interleave(copies, dim=0),  # (B * copies, 1, 1, S)
        cache=None if options.new_cache is None else options.new_cache(),
    )
    return state, rows


def next_log_probs(model: DecodingModel, state: BeamState, rows: ModelRows, bos_id: int) -> Tensor:
    """Run one decoder step on every row: the model's (R, V) log-probs, forbidden tokens not
    yet removed (callers apply `BeamState.forbid`)."""
    last = state.last_tokens(bos_id)  # (R,)
    log_probs, rows.cache = model.decode_step(last, rows.memory, rows.src_mask, rows.cache)
    return log_probs


def drop_done(state: BeamState, rows: ModelRows, done: Tensor, beam_rows: Tensor | None) -> None:
    """Drop the sentences marked `done` (N,) bool and realign the model rows with the state.

    Args:
        beam_rows: (N * K,) long, the old row each new row continues (beam search), or None
            when rows keep their place (greedy search and sampling).
    """
    n_sentences, beam_size = state.scores.shape
    if done.any():
        keep_rows = state.keep((~done).nonzero().squeeze(1))  # (N' * K,)
        # All rows of a sentence share its memory and mask, so dropping is all they need.
        rows.memory = rows.memory[keep_rows]
        rows.src_mask = rows.src_mask[keep_rows]
        if beam_rows is None:
            beam_rows = keep_rows
        else:
            beam_rows = beam_rows.reshape(n_sentences, beam_size)[~done].reshape(-1)
    if beam_rows is not None and rows.cache is not None:
        rows.cache = rows.cache.reorder(beam_rows)
