"""Beam search: K live hypotheses per sentence, 2K candidates a step (rules: search/__init__)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from transformer_mt.config import DecodeConfig
from transformer_mt.search import state as shared
from transformer_mt.search.state import (
    DEFAULT_OPTIONS,
    BeamState,
    DecodingModel,
    Hypothesis,
    SearchOptions,
    SearchResult,
    SpecialIds,
)


@dataclass(frozen=True)
class _Candidates:
    """The 2K best one-token expansions of each sentence's beams, best first."""

    scores: Tensor  # (N, 2K) log P of beam + token
    beams: Tensor  # (N, 2K) long: which beam (0..K-1) is expanded
    tokens: Tensor  # (N, 2K) long: with which token


def beam_search(
    model: DecodingModel,
    src_ids: Tensor,
    src_mask: Tensor,
    cfg: DecodeConfig,
    options: SearchOptions = DEFAULT_OPTIONS,
    prefixes: Sequence[Sequence[int]] | None = None,
) -> list[SearchResult]:
    """Beam search with cfg.beam_size beams per sentence (rules in the module docstring).

    Args:
        model: anything with `encode` and `decode_step` (see `DecodingModel`).
        src_ids: (B, S) long source ids, right-padded with pad_id.
        src_mask: (B, 1, 1, S) bool, True at real source tokens.
        cfg: beam_size, length_penalty, length_norm, max_len_a, max_len_b, min_len, n_best.
        options: special ids, length cap and first cache (`SearchOptions`).
        prefixes: per sentence, target ids every hypothesis must start with (None: none).

    Returns:
        One `SearchResult` per source sentence, in input order, with up to cfg.n_best
        hypotheses sorted by score, best first.
    """
    finished: list[list[Hypothesis]] = [[] for _ in range(src_ids.shape[0])]
    with torch.inference_mode():
        state, rows = shared.start_rows(
            model, src_ids, src_mask, cfg, cfg.beam_size, 1, options, prefixes
        )
        while state.sentence_ids.numel():
            log_probs = shared.next_log_probs(model, state, rows, options.ids.bos)
            beam_rows, done = beam_step(state, log_probs, cfg, options.ids, finished)
            shared.drop_done(state, rows, done, beam_rows)
    return shared.ranked_results(finished, cfg.n_best)


def beam_step(
    state: BeamState,
    log_probs: Tensor,
    cfg: DecodeConfig,
    ids: SpecialIds,
    finished: Sequence[list[Hypothesis]] | Mapping[int, list[Hypothesis]],
) -> tuple[Tensor, Tensor]:
    """One step of the beam rules for every sentence of `state`, whatever its step.

    Appends the hypotheses that finish to `finished[sentence_id]` and advances the live ones.
    `beam_search` and the server's scheduler both step through here.

    Args:
        log_probs: (N * K, V) the model's next-token log-probs for every row of `state`;
            used up (overwritten with the candidates' total scores).

    Returns:
        beam_rows (N * K,) long, the old row each new row continues, and done (N,) bool, the
        sentences whose search is over (their rows are still in `state`).
    """
    candidates = _expand(state, log_probs, cfg.min_len, ids)
    _retire_beams(state, candidates, cfg, ids.eos, finished)
    beam_rows = _advance(state, candidates, ids.eos)
    done = (
        (state.n_finished >= state.beam_size)
        | (state.max_lens <= state.steps)
        | ~state.scores.isfinite().any(dim=1)
    )
    return beam_rows, done


def _expand(state: BeamState, log_probs: Tensor, min_len: int, ids: SpecialIds) -> _Candidates:
    """The 2K best allowed expansions of each sentence's K beams by one token (log_probs
    (N*K, V), overwritten)."""
    n_sentences, beam_size = state.scores.shape
    vocab_size = log_probs.shape[-1]
    # In place: no new (N, K, V) tensor of megabytes (and its page faults) at every step.
    totals = log_probs.view(n_sentences, beam_size, vocab_size).add_(state.scores.unsqueeze(2))
    state.forbid(totals, min_len, ids)
    # 2K candidates: at most K of them end in EOS, so K non-EOS ones always remain.
    scores, flat = top_k(totals.view(n_sentences, -1), 2 * beam_size)  # (N, 2K)
    return _Candidates(scores, flat // vocab_size, flat % vocab_size)


def top_k(values: Tensor, k: int, chunk: int = 128) -> tuple[Tensor, Tensor]:
    """The k largest entries of each row of `values` (N, M), best first, and their columns.

    The same values as `values.topk(k, dim=1)`, from a fraction of the work: a CPU's topk
    inspects every entry at a few ns each, and beam search asks for 2K of K * V entries per
    sentence at every step. Cut each row into chunks of `chunk` columns; a chunk whose maximum
    is not among the k largest chunk maxima cannot hold any of the k largest entries, so one
    max pass over the row picks k chunks, and topk runs over those k * chunk entries (and the
    columns after the last whole chunk). Among equal values the columns chosen may differ.
    """
    n_rows, n_columns = values.shape
    n_chunks = n_columns // chunk
    if n_chunks <= k:
        return values.topk(k, dim=1)
    whole = values[:, : n_chunks * chunk].view(n_rows, n_chunks, chunk)
    best_chunks = whole.amax(dim=2).topk(k, dim=1).indices  # (N, k)
    offsets = torch.arange(chunk, device=values.device)
    columns = (best_chunks[:, :, None] * chunk + offsets).view(n_rows, k * chunk)
    tail = torch.arange(n_chunks * chunk, n_columns, device=values.device)
    columns = torch.cat([columns, tail.expand(n_rows, -1)], dim=1)  # (N, k * chunk + rest)
    best, picked = values.gather(1, columns).topk(k, dim=1)
    return best, columns.gather(1, picked)


def _retire_beams(
    state: BeamState,
    candidates: _Candidates,
    cfg: DecodeConfig,
    eos_id: int,
    finished: Sequence[list[Hypothesis]] | Mapping[int, list[Hypothesis]],
) -> None:
    """Finish the candidates among each sentence's first K that end in EOS or reach max_len."""
    beam_size = state.beam_size
    at_max_len = (state.max_lens <= state.steps + 1).unsqueeze(1)  # (N, 1)
    ends = (candidates.tokens == eos_id) | at_max_len  # (N, 2K)
    ends &= candidates.scores.isfinite()
    ends[:, beam_size:] = False  # ranked too low to have entered the beam
    state.n_finished = state.n_finished + ends.sum(dim=1)
    sentence, rank = ends.nonzero(as_tuple=True)  # (M,), (M,)
    if not sentence.numel():
        return
    rows = sentence * beam_size + candidates.beams[sentence, rank]  # (M,)
    shared.collect_finished(
        finished,
        state.sentence_ids[sentence],
        state.tokens[rows],
        state.steps[sentence],
        candidates.tokens[sentence, rank],
        candidates.scores[sentence, rank],
        cfg,
        eos_id,
    )


def _advance(state: BeamState, candidates: _Candidates, eos_id: int) -> Tensor:
    """Make the K best non-EOS candidates the new beams; return the old row of each new row."""
    n_sentences, beam_size = state.scores.shape
    rank = torch.arange(2 * beam_size, device=candidates.tokens.device)
    # EOS candidates were retired (or ranked too low): push them behind every other candidate.
    order = rank + 2 * beam_size * (candidates.tokens == eos_id)  # (N, 2K)
    pick = order.topk(beam_size, dim=1, largest=False).indices  # (N, K), best first
    state.scores = candidates.scores.gather(1, pick)
    beams = candidates.beams.gather(1, pick)  # (N, K)
    tokens = candidates.tokens.gather(1, pick)  # (N, K)
    offsets = torch.arange(n_sentences, device=beams.device)[:, None] * beam_size
    beam_rows = (offsets + beams).reshape(-1)  # (N * K,)
    state.tokens = state.tokens[beam_rows]
    state.append(tokens.reshape(-1))
    return beam_rows
