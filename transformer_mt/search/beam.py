"""Beam search: K live hypotheses per sentence, 2K candidates a step (rules: search/__init__);
with constraints, more candidates and their order by banks (search/constraints.py)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from transformer_mt.config import DecodeConfig
from transformer_mt.errors import TmtError
from transformer_mt.search.beam_state import INF, BeamState
from transformer_mt.search.constraints import Phrases, bank_order
from transformer_mt.search.lengths import length_penalty
from transformer_mt.search.options import DEFAULT_OPTIONS, SearchOptions, SpecialIds
from transformer_mt.search.protocol import DecodingModel
from transformer_mt.search.results import (
    Ended,
    Hypothesis,
    SearchResult,
    collect_finished,
    ranked_results,
)
from transformer_mt.search.rows import (
    Forced,
    ModelRows,
    decode_rows,
    drop_done,
    next_log_probs,
    start_rows,
)
from transformer_mt.search.topk import top_k


@dataclass(frozen=True)
class _Candidates:
    """The 2K one-token expansions of each sentence's beams that the beam takes first: the
    best by score, or with constraints in the order of their banks (`bank_order`)."""

    scores: Tensor  # (N, 2K) log P of beam + token
    beams: Tensor  # (N, 2K) long: which beam (0..K-1) is expanded
    tokens: Tensor  # (N, 2K) long: with which token
    matched: Tensor | None = None  # (N, 2K, C) long: constraint states after it (constraints)


def beam_search(
    model: DecodingModel,
    src_ids: Tensor,
    src_mask: Tensor,
    cfg: DecodeConfig,
    options: SearchOptions = DEFAULT_OPTIONS,
    prefixes: Sequence[Sequence[int]] | None = None,
    constraints: Sequence[Phrases] | None = None,
) -> list[SearchResult]:
    """Beam search with cfg.beam_size beams per sentence (rules in search/__init__).

    Args:
        model: anything with `encode` and `decode_step` (see `DecodingModel`).
        src_ids: (B, S) long source ids, right-padded with pad_id.
        src_mask: (B, 1, 1, S) bool, True at real source tokens.
        cfg: beam_size, length_penalty, length_norm, early_stopping, max_len_a, max_len_b,
            min_len, n_best.
        options: special ids, length cap and first cache (`SearchOptions`).
        prefixes: per sentence, target ids every hypothesis must start with (None: none).
        constraints: per sentence, phrases of target ids every translation must contain
            (`search.constraints`; None, or no phrase at all: the unconstrained search).

    Returns:
        One `SearchResult` per source sentence, in input order, with up to cfg.n_best
        hypotheses sorted by score, best first.

    Raises:
        TmtError: a sentence whose every score was NaN (no hypothesis finished).
    """
    finished: list[list[Hypothesis]] = [[] for _ in range(src_ids.shape[0])]
    with torch.inference_mode():
        forced = Forced(prefixes, constraints)
        state, rows = start_rows(
            model, src_ids, src_mask, cfg, options, beam_size=cfg.beam_size, forced=forced
        )
        first = True
        while state.sentence_ids.numel():
            if first:  # one live beam per sentence: decode one row each, repeat the log-probs
                log_probs = _first_log_probs(model, state, rows, options.ids.bos)
            else:
                log_probs = next_log_probs(model, state, rows, options.ids.bos)
            beam_rows, done = beam_step(state, log_probs, cfg, options.ids, finished)
            # After the first step the cache holds one row per sentence, its beams' parent.
            if first:
                drop_done(state, rows, done, beam_rows // cfg.beam_size, regrouped=True)
            else:
                drop_done(state, rows, done, beam_rows)
            first = False
    if not all(finished):  # every score NaN: no hypothesis can finish
        raise TmtError(
            "the model's scores are not numbers (NaN) for a batch of sentences: its arithmetic "
            "overflowed; translate in float32, without int8 layers"
        )
    return ranked_results(finished, cfg.n_best)


def _first_log_probs(
    model: DecodingModel, state: BeamState, rows: ModelRows, bos_id: int
) -> Tensor:
    """The (N * K, V) log-probs of the first step from a decoder step on one row per sentence.

    Before the first token a sentence's K rows are equal (BOS over the same source) and only
    its first beam is live (`BeamState.start`), so decoding all N * K rows would repeat the same
    work K times. The cache (and `rows.sources`) comes back with one row per sentence; the
    caller's first reorder maps each new beam to its sentence's row (beam_rows // K).
    """
    k = state.beam_size
    last = state.last_tokens(bos_id)[::k]  # (N,)
    rows.read_from(rows.sources[::k])  # (N,): the rows decoded, each its sentence's source
    log_probs, rows.cache = decode_rows(model, last, rows)
    return log_probs if k == 1 else log_probs.repeat_interleave(k, dim=0)


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
    candidates = _expand(state, log_probs, cfg, ids)
    _retire_beams(state, candidates, cfg, ids.eos, finished)
    beam_rows = _advance(state, candidates, ids.eos)
    done = (
        _search_over(state, cfg)
        | (state.max_lens <= state.steps)
        | ~state.scores.isfinite().any(dim=1)
    )
    return beam_rows, done


def _expand(state: BeamState, log_probs: Tensor, cfg: DecodeConfig, ids: SpecialIds) -> _Candidates:
    """The 2K allowed expansions of each sentence's K beams by one token that the beam takes
    first (log_probs (N*K, V), overwritten)."""
    n_sentences, beam_size = state.scores.shape
    vocab_size = log_probs.shape[-1]
    # In place: no new (N, K, V) tensor of megabytes (and its page faults) at every step.
    totals = log_probs.view(n_sentences, beam_size, vocab_size).add_(state.scores.unsqueeze(2))
    state.forbid(totals, cfg, ids)
    if state.constraints is not None:
        return _banked_candidates(state, totals)
    # 2K candidates: at most K of them end in EOS, so K non-EOS ones always remain.
    scores, flat = top_k(totals.view(n_sentences, -1), 2 * beam_size)  # (N, 2K)
    return _Candidates(scores, flat // vocab_size, flat % vocab_size)


def _banked_candidates(state: BeamState, totals: Tensor) -> _Candidates:
    """With constraints: the first 2K in the order of dynamic beam allocation among the 2K
    best expansions, each beam's best and each beam's next token of every constraint it has
    not met (Post & Vilar 2018), each (beam, token) once; `totals` (N, K, V) allowed scores.

    At a sentence's last step (max_len) every candidate among the first K finishes, so there
    the 2K best come from rows that have met every constraint, and candidates that meet them
    all go first (`bank_order`'s `finishing`): the n-best list then holds as many complete
    translations as the beam can give, and the others only fill it.
    """
    constraints = state.constraints
    n, k, vocab_size = totals.shape
    by_row = totals.view(n * k, vocab_size)
    best, best_tokens = top_k(by_row, 1)  # (N * K, 1)
    forced, unmet = constraints.next_tokens()  # (N * K, C)
    forced_scores = by_row.gather(1, forced).masked_fill_(~unmet, -INF)
    finishing = state.max_lens <= state.steps + 1  # (N,)
    if bool(finishing.any()):  # a row with a constraint unmet ends complete by a forced token only
        by_row.masked_fill_((finishing.repeat_interleave(k) & unmet.any(dim=1))[:, None], -INF)
    scores, flat = top_k(totals.view(n, -1), 2 * k)  # (N, 2K)
    beam = torch.arange(k, device=totals.device)
    scores = torch.cat([scores, best.view(n, k), forced_scores.view(n, -1)], dim=1)  # (N, M)
    beams = torch.cat(
        [
            flat // vocab_size,
            beam.expand(n, k),
            beam.repeat_interleave(forced.shape[1]).expand(n, -1),
        ],
        dim=1,
    )
    tokens = torch.cat([flat % vocab_size, best_tokens.view(n, k), forced.view(n, -1)], dim=1)
    scores = _once_each(scores, beams * vocab_size + tokens)
    matched = constraints.step(torch.arange(n, device=beams.device)[:, None] * k + beams, tokens)
    banks = constraints.tokens_met(matched)  # (N, M)
    complete = banks == constraints.tokens_needed()[:, None]
    order = bank_order(scores, banks, finishing, complete)[:, : 2 * k]  # (N, 2K)
    c = matched.shape[2]
    return _Candidates(
        scores.gather(1, order),
        beams.gather(1, order),
        tokens.gather(1, order),
        matched.gather(1, order.unsqueeze(2).expand(-1, -1, c)),
    )


def _once_each(scores: Tensor, keys: Tensor) -> Tensor:
    """`scores` (N, M) with -inf at every candidate whose key (N, M) long an earlier one
    of its row has: one hypothesis must not fill two slots. A candidate already at -inf
    (a constraint met) takes no key, so that it does not hide a live copy of itself."""
    unique = -1 - torch.arange(keys.shape[1], device=keys.device)  # (M,): below every key
    keys = torch.where(scores.isfinite(), keys, unique)
    ordered, order = keys.sort(dim=1, stable=True)
    repeated = torch.zeros_like(keys, dtype=torch.bool)
    repeated[:, 1:] = ordered[:, 1:] == ordered[:, :-1]
    return scores.masked_fill(torch.zeros_like(repeated).scatter_(1, order, repeated), -INF)


def _retire_beams(
    state: BeamState,
    candidates: _Candidates,
    cfg: DecodeConfig,
    eos_id: int,
    finished: Sequence[list[Hypothesis]] | Mapping[int, list[Hypothesis]],
) -> None:
    """Finish the candidates among each sentence's first K that end in EOS or reach max_len
    (with constraints, a hypothesis may end in EOS only once it has met them all)."""
    beam_size = state.beam_size
    at_max_len = (state.max_lens <= state.steps + 1).unsqueeze(1)  # (N, 1)
    ends = (candidates.tokens == eos_id) | at_max_len  # (N, 2K)
    ends &= candidates.scores.isfinite()
    ends[:, beam_size:] = False  # ranked too low to have entered the beam
    sentence, rank = ends.nonzero(as_tuple=True)  # (M,), (M,)
    if not sentence.numel():
        return
    _keep_best_finished(state, candidates.scores, ends, cfg)
    rows = sentence * beam_size + candidates.beams[sentence, rank]  # (M,)
    unmet = None
    if candidates.matched is not None:
        unmet = state.constraints.n_unmet(candidates.matched[sentence, rank], sentence)
    hypotheses = Ended(
        state.sentence_ids[sentence],
        state.tokens[rows],
        state.steps[sentence],
        candidates.tokens[sentence, rank],
        candidates.scores[sentence, rank],
        unmet,
    )
    collect_finished(finished, hypotheses, cfg, eos_id)


def _keep_best_finished(state: BeamState, scores: Tensor, ends: Tensor, cfg: DecodeConfig) -> None:
    """Merge the scores of the candidates that end here (`ends` (N, 2K) bool; `scores`
    (N, 2K) their log P) into each sentence's K best (`BeamState.best_finished`).

    Every candidate of a sentence has its steps + 1 tokens, so one lp per sentence scores
    them all, in float64 as `collect_finished` scores them one by one.
    """
    lp = length_penalty(state.steps + 1, cfg)  # (N,)
    ended = (scores.double() / lp[:, None]).masked_fill_(~ends, -INF)  # (N, 2K)
    merged = torch.cat([state.best_finished, ended], dim=1)  # (N, 3K)
    state.best_finished = merged.topk(state.beam_size, dim=1).values


def _search_over(state: BeamState, cfg: DecodeConfig) -> Tensor:
    """(N,) bool: the sentences that `cfg.early_stopping` ends, after their step's advance.

    Each has K finished hypotheses, and under `heuristic` and `never` its best live one,
    normalised at its current length, scores no better than the K-th best of them (`never`:
    normalised at the current length or max_len, whichever lp is larger: log P only falls, so
    that is the most the penalty can raise it). A longer hypothesis that the length penalty
    favours is then still searched for, as transformers' `generate` searches
    (`GenerationMixin._check_early_stop_heuristic`). A beam of one stops at its first
    finished hypothesis whatever the rule, as greedy search does (and `generate` with one beam).
    """
    worst = state.best_finished[:, -1]  # (N,) the K-th best finished score
    full = worst > -INF
    if cfg.early_stopping == "k_finished" or state.beam_size == 1:
        return full
    lp = length_penalty(state.steps, cfg)  # (N,) float64
    if cfg.early_stopping == "never":
        lp = torch.maximum(lp, length_penalty(state.max_lens, cfg))
    best_live = state.scores.max(dim=1).values.double() / lp  # (N,)
    return full & (best_live <= worst)


def _advance(state: BeamState, candidates: _Candidates, eos_id: int) -> Tensor:
    """Make the K best non-EOS candidates the new beams, each in the slot `_parent_slots`
    gives it; return the old row of each new row."""
    n_sentences, beam_size = state.scores.shape
    rank = torch.arange(2 * beam_size, device=candidates.tokens.device)
    # EOS candidates were retired (or ranked too low): push them behind every other candidate.
    order = rank + 2 * beam_size * (candidates.tokens == eos_id)  # (N, 2K)
    pick = order.topk(beam_size, dim=1, largest=False).indices  # (N, K), best first
    pick = pick.gather(1, _parent_slots(candidates.beams.gather(1, pick)).argsort(dim=1))
    state.scores = candidates.scores.gather(1, pick)
    beams = candidates.beams.gather(1, pick)  # (N, K)
    tokens = candidates.tokens.gather(1, pick)  # (N, K)
    offsets = torch.arange(n_sentences, device=beams.device)[:, None] * beam_size
    beam_rows = (offsets + beams).reshape(-1)  # (N * K,)
    state.tokens = state.tokens[beam_rows]
    state.append(tokens.reshape(-1))
    if candidates.matched is not None:
        c = candidates.matched.shape[2]
        matched = candidates.matched.gather(1, pick.unsqueeze(2).expand(-1, -1, c))
        state.constraints.matched = matched.reshape(n_sentences * beam_size, c)
    return beam_rows


def _parent_slots(parents: Tensor) -> Tensor:
    """(N, K) the slot of each new beam, given its parent beam `parents` (N, K), best first.

    The best child of each parent takes its parent's own slot; the other children take the
    slots of parents without children, in order. The order of a sentence's beams carries no
    meaning, and this one keeps most rows where they are: a cache can then copy only the rows
    that change (`KVCache.reorder`), about a third of them in a beam of 5, instead of all.
    """
    beam_size = parents.shape[1]
    children = F.one_hot(parents, beam_size)  # (N, K new, K parents)
    first = children.cumsum(dim=1).gather(2, parents.unsqueeze(2)).squeeze(2) == 1  # (N, K)
    taken = children.sum(dim=1) > 0  # (N, K): slots their parents' first children keep
    free = taken.int().argsort(dim=1, stable=True)  # untaken slots first, in order
    rank = ((~first).cumsum(dim=1) - 1).clamp(min=0)  # (N, K): among the other children
    return torch.where(first, parents, free.gather(1, rank))
