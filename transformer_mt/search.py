"""Greedy, beam and sampling search over the decoding protocol.

Search sees a model only through `DecodingModel`: `encode` once per batch, then `decode_step`
once per output position with the last token of every row and an explicit cache that search
reorders. All rows of a step (sentences x beams, or sentences x samples) are decoded as one
tensor. A sentence whose search is over leaves the batch: its rows of memory, source mask and
cache are dropped, so one long sentence does not keep the work of the short ones alive.

Definitions, in the names of `DecodeConfig`:

    |x|        source length: real source tokens (True entries of src_mask; the source EOS
               counts, padding does not).
    |y|        hypothesis length: generated tokens, EOS included when the hypothesis ends with
               it. BOS is the first decoder input, not an output, and is never counted.
    log P(y|x) sum of the model's log-probs of those |y| tokens (EOS included).
    score(y)   log P(y|x) / lp(|y|), the key finished hypotheses are ranked by, where
                   lp(n) = ((5 + n) / 6) ** length_penalty    length_norm: gnmt
                                                              (Wu et al. 2016, eq. 14)
                   lp(n) = n                                  length_norm: average
                   lp(n) = 1                                  length_norm: none
    max_len(x) max(1, floor(max_len_a * |x| + max_len_b)): the most tokens a hypothesis may
               generate, EOS included. One that reaches max_len tokens without EOS is finished as
               it is (no EOS is forced), so a translation never exceeds max_len tokens.
    min_len    EOS is forbidden while fewer than min_len tokens have been generated, so every
               translation has at least min(min_len, max_len) tokens.

PAD and BOS are never generated. Beam search (beam_size = K) keeps K live hypotheses per sentence.
Each step ranks the 2K best one-token expansions of them: an EOS expansion among the first K is
finished (as in fairseq: one ranked lower would not have entered the beam) and the K best
non-EOS expansions live on. A sentence is done once it has K finished hypotheses (early
stopping: a longer hypothesis that the length penalty would have preferred can be missed) or
reaches max_len, and it returns its n_best finished hypotheses of highest score. Greedy search
is the same rule with one row per sentence; sampling draws n_best independent samples.

The caller puts the model in eval mode; search runs under `torch.inference_mode()`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import torch
from torch import Tensor

from transformer_mt.config import DecodeConfig

# The fixed special ids of data/tokenizer.py (PAD_ID, BOS_ID, EOS_ID). They are keyword defaults
# here rather than an import so that search depends on the decoding protocol only.
_PAD_ID, _BOS_ID, _EOS_ID = 0, 2, 3


class DecoderCache(Protocol):
    """Incremental-decoding state owned by the caller of `decode_step`."""

    def reorder(self, indices: Tensor) -> DecoderCache:
        """Keep rows `indices` (R',) long, in that order; return the reordered cache."""
        ...


class DecodingModel(Protocol):
    """What search needs from a model (`Seq2SeqTransformer` or a fake one in tests)."""

    def encode(self, src_ids: Tensor, src_mask: Tensor) -> Tensor:
        """src_ids (B, S) long, src_mask (B, 1, 1, S) bool True = real token -> memory (B, S, D)."""
        ...

    def decode_step(
        self, tgt_ids: Tensor, memory: Tensor, src_mask: Tensor, cache: DecoderCache | None
    ) -> tuple[Tensor, DecoderCache]:
        """tgt_ids (R,) last token per row, memory (R, S, D), src_mask (R, 1, 1, S), cache (None
        on the first step) -> log_probs (R, V) of the next token, updated cache."""
        ...


@dataclass(frozen=True)
class Hypothesis:
    """One finished translation, in target ids."""

    tokens: list[int]  # generated tokens without BOS and EOS
    score: float  # log_prob / lp(|y|): the ranking key (see the module docstring)
    log_prob: float  # log P(y|x): sum of token log-probs, EOS included
    has_eos: bool  # False: cut at max_len without EOS

    @property
    def length(self) -> int:
        """|y|: generated tokens, EOS included."""
        return len(self.tokens) + self.has_eos


@dataclass(frozen=True)
class SearchResult:
    """The n-best list of one source sentence, best first."""

    hypotheses: list[Hypothesis]

    @property
    def best(self) -> Hypothesis:
        return self.hypotheses[0]


@dataclass
class BeamState:
    """Live hypotheses of the N sentences still being searched, K rows per sentence.

    Row n * K + k of `tokens` (and of the model's memory, mask and cache) is beam k of active
    sentence n. Greedy search and sampling use K = 1.
    """

    tokens: Tensor  # (N * K, t) long: tokens generated so far, no BOS
    scores: Tensor  # (N, K) float: log P of each live beam; -inf marks an empty slot
    sentence_ids: Tensor  # (N,) long: where each sentence sits in the input batch
    max_lens: Tensor  # (N,) long: max_len(x) of each sentence
    n_finished: Tensor  # (N,) long: finished hypotheses collected so far


@dataclass
class _ModelRows:
    """Model inputs kept row-aligned with `BeamState.tokens`."""

    memory: Tensor  # (N * K, S, D)
    src_mask: Tensor  # (N * K, 1, 1, S) bool
    cache: DecoderCache | None


@dataclass(frozen=True)
class _Candidates:
    """The 2K best one-token expansions of each sentence's beams, best first."""

    scores: Tensor  # (N, 2K) log P of beam + token
    beams: Tensor  # (N, 2K) long: which beam (0..K-1) is expanded
    tokens: Tensor  # (N, 2K) long: with which token


@dataclass(frozen=True)
class _SpecialIds:
    pad: int
    bos: int
    eos: int


def length_penalty(length: int, cfg: DecodeConfig) -> float:
    """lp(|y|): ((5 + |y|) / 6) ** length_penalty (gnmt), |y| (average) or 1 (none)."""
    if cfg.length_norm == "gnmt":
        return ((5.0 + length) / 6.0) ** cfg.length_penalty
    if cfg.length_norm == "average":
        return float(length)
    return 1.0


def max_output_lengths(src_mask: Tensor, cfg: DecodeConfig, cap: int | None = None) -> Tensor:
    """max_len(x) = max(1, floor(max_len_a * |x| + max_len_b)) per sentence, at most `cap`.

    Args:
        src_mask: (B, 1, 1, S) bool, True at real source tokens.
        cap: the most tokens the model can decode at all (its position table), or None.

    Returns:
        (B,) long: the most tokens each hypothesis may generate, EOS included.
    """
    src_lens = src_mask.reshape(src_mask.shape[0], -1).sum(dim=1)  # (B,)
    # float64, as Python computes the same formula, so that x.5-style bounds floor alike.
    limits = torch.floor(src_lens.double() * cfg.max_len_a + cfg.max_len_b)
    return limits.long().clamp(min=1, max=cap)


def search(
    model: DecodingModel,
    src_ids: Tensor,
    src_mask: Tensor,
    cfg: DecodeConfig,
    *,
    generator: torch.Generator | None = None,
    pad_id: int = _PAD_ID,
    bos_id: int = _BOS_ID,
    eos_id: int = _EOS_ID,
    max_len_cap: int | None = None,
) -> list[SearchResult]:
    """Sampling if `cfg.sampling`, else greedy search if `cfg.beam_size == 1`, else beam search.

    Args and Returns: as `beam_search`; `generator` is used by sampling only.
    `max_len_cap` bounds every max_len (a model cannot decode past its position table).
    """
    # The same special ids and length cap for all three.
    ids = {"pad_id": pad_id, "bos_id": bos_id, "eos_id": eos_id, "max_len_cap": max_len_cap}
    if cfg.sampling:
        return sample(model, src_ids, src_mask, cfg, generator=generator, **ids)
    if cfg.beam_size == 1:
        return greedy_search(model, src_ids, src_mask, cfg, **ids)
    return beam_search(model, src_ids, src_mask, cfg, **ids)


def beam_search(
    model: DecodingModel,
    src_ids: Tensor,
    src_mask: Tensor,
    cfg: DecodeConfig,
    *,
    pad_id: int = _PAD_ID,
    bos_id: int = _BOS_ID,
    eos_id: int = _EOS_ID,
    max_len_cap: int | None = None,
) -> list[SearchResult]:
    """Beam search with cfg.beam_size beams per sentence (rules in the module docstring).

    Args:
        model: anything with `encode` and `decode_step` (see `DecodingModel`).
        src_ids: (B, S) long source ids, right-padded with pad_id.
        src_mask: (B, 1, 1, S) bool, True at real source tokens.
        cfg: beam_size, length_penalty, length_norm, max_len_a, max_len_b, min_len, n_best.

    Returns:
        One `SearchResult` per source sentence, in input order, with up to cfg.n_best
        hypotheses sorted by score, best first.
    """
    ids = _SpecialIds(pad_id, bos_id, eos_id)
    beam_size = cfg.beam_size
    finished: list[list[Hypothesis]] = [[] for _ in range(src_ids.shape[0])]
    with torch.inference_mode():
        state, rows = _start(model, src_ids, src_mask, cfg, beam_size, 1, max_len_cap)
        # The K beams of a sentence start as copies: only the first is live, so that the first
        # step does not fill the beam with K copies of the best token.
        state.scores[:, 1:] = float("-inf")
        step = 0
        while state.sentence_ids.numel():
            log_probs = _next_log_probs(model, state, rows, step, ids.bos)
            forbidden = _forbidden(step, cfg.min_len, ids, log_probs.device)
            candidates = _expand(state, log_probs, forbidden)
            _retire_beams(state, candidates, step, cfg, ids.eos, finished)
            beam_rows = _advance(state, candidates, ids.eos)
            done = (
                (state.n_finished >= beam_size)
                | (state.max_lens <= step + 1)
                | ~state.scores.isfinite().any(dim=1)
            )
            _drop_done(state, rows, done, beam_rows)
            step += 1
    return _results(finished, cfg.n_best)


def greedy_search(
    model: DecodingModel,
    src_ids: Tensor,
    src_mask: Tensor,
    cfg: DecodeConfig,
    *,
    pad_id: int = _PAD_ID,
    bos_id: int = _BOS_ID,
    eos_id: int = _EOS_ID,
    max_len_cap: int | None = None,
) -> list[SearchResult]:
    """The most probable next token at every step; one hypothesis per sentence.

    Independent of `beam_search` (which it must equal at beam_size 1) so that each can test the
    other. Args and Returns as `beam_search`; cfg.beam_size and cfg.n_best are not used.
    """
    ids = _SpecialIds(pad_id, bos_id, eos_id)
    return _decode_rows(model, src_ids, src_mask, cfg, ids, 1, _argmax, max_len_cap)


def sample(
    model: DecodingModel,
    src_ids: Tensor,
    src_mask: Tensor,
    cfg: DecodeConfig,
    *,
    generator: torch.Generator | None = None,
    pad_id: int = _PAD_ID,
    bos_id: int = _BOS_ID,
    eos_id: int = _EOS_ID,
    max_len_cap: int | None = None,
) -> list[SearchResult]:
    """Draw cfg.n_best samples per sentence from the filtered next-token distributions.

    Each step divides the log-probs by cfg.temperature, keeps the cfg.top_k most probable tokens
    (0: all), then the smallest set of most probable tokens holding cfg.top_p of the mass, and
    draws from what is left. Hypothesis scores use the model's own (unfiltered, untempered)
    log-probs, so samples and beams are scored alike.

    Args:
        generator: a seeded `torch.Generator` on the device of src_ids makes the draws
            reproducible; None uses the global generator.
        Others as `beam_search`.
    """
    ids = _SpecialIds(pad_id, bos_id, eos_id)
    choose = _sampler(cfg, generator)
    return _decode_rows(model, src_ids, src_mask, cfg, ids, cfg.n_best, choose, max_len_cap)


# --- helpers shared by all modes ----------------------------------------------------------


def _start(
    model: DecodingModel,
    src_ids: Tensor,
    src_mask: Tensor,
    cfg: DecodeConfig,
    beam_size: int,
    samples: int,
    max_len_cap: int | None,
) -> tuple[BeamState, _ModelRows]:
    """Encode once and lay out `samples` units per sentence, `beam_size` rows per unit."""
    batch_size = src_ids.shape[0]
    device = src_ids.device
    memory = model.encode(src_ids, src_mask)  # (B, S, D)
    copies = samples * beam_size
    units = batch_size * samples
    state = BeamState(
        tokens=torch.empty(units * beam_size, 0, dtype=torch.long, device=device),
        scores=torch.zeros(units, beam_size, device=device),
        sentence_ids=torch.arange(batch_size, device=device).repeat_interleave(samples),
        max_lens=max_output_lengths(src_mask, cfg, max_len_cap).repeat_interleave(samples),
        n_finished=torch.zeros(units, dtype=torch.long, device=device),
    )
    rows = _ModelRows(
        memory=memory.repeat_interleave(copies, dim=0),  # (B * copies, S, D)
        src_mask=src_mask.repeat_interleave(copies, dim=0),  # (B * copies, 1, 1, S)
        cache=None,
    )
    return state, rows


def _next_log_probs(
    model: DecodingModel, state: BeamState, rows: _ModelRows, step: int, bos_id: int
) -> Tensor:
    """Run one decoder step on every row: the model's (R, V) log-probs, forbidden tokens not
    yet removed (callers apply `_forbidden`)."""
    if step == 0:
        last = torch.full((state.tokens.shape[0],), bos_id, device=state.tokens.device)
    else:
        last = state.tokens[:, -1]  # (R,)
    log_probs, rows.cache = model.decode_step(last, rows.memory, rows.src_mask, rows.cache)
    return log_probs


def _forbidden(step: int, min_len: int, ids: _SpecialIds, device: torch.device) -> Tensor:
    """Token ids that may not come next: PAD and BOS always, EOS before min_len tokens."""
    forbidden = [ids.pad, ids.bos] + ([ids.eos] if step < min_len else [])
    return torch.tensor(forbidden, device=device)


def _collect(
    finished: list[list[Hypothesis]],
    sentence_ids: Tensor,
    tokens: Tensor,
    has_eos: Tensor,
    log_probs: Tensor,
    length: int,
    cfg: DecodeConfig,
) -> None:
    """Append M finished hypotheses of equal length |y| = `length` to their sentences' lists.

    Args:
        sentence_ids: (M,) long, input-batch index of each hypothesis' sentence.
        tokens: (M, length) long, the generated tokens including the last one (EOS or not).
        has_eos: (M,) bool, whether the last token is EOS (then it is not kept in `tokens`).
        log_probs: (M,) log P(y|x).
    """
    penalty = length_penalty(length, cfg)
    columns = (sentence_ids.tolist(), tokens.tolist(), has_eos.tolist(), log_probs.tolist())
    rows = zip(*columns, strict=True)
    for sentence, row, eos, log_prob in rows:
        finished[sentence].append(
            Hypothesis(row[:-1] if eos else row, log_prob / penalty, log_prob, eos)
        )


def _drop_done(state: BeamState, rows: _ModelRows, done: Tensor, beam_rows: Tensor | None) -> None:
    """Drop the sentences marked `done` (N,) bool and realign the model rows with the state.

    Args:
        beam_rows: (N * K,) long, the old row each new row continues (beam search), or None
            when rows keep their place (greedy search and sampling).
    """
    n_sentences, beam_size = state.scores.shape
    if done.any():
        keep = (~done).nonzero().squeeze(1)  # (N',)
        offsets = torch.arange(beam_size, device=keep.device)
        keep_rows = (keep[:, None] * beam_size + offsets).reshape(-1)  # (N' * K,)
        state.tokens = state.tokens[keep_rows]
        state.scores = state.scores[keep]
        state.sentence_ids = state.sentence_ids[keep]
        state.max_lens = state.max_lens[keep]
        state.n_finished = state.n_finished[keep]
        # All rows of a sentence share its memory and mask, so dropping is all they need.
        rows.memory = rows.memory[keep_rows]
        rows.src_mask = rows.src_mask[keep_rows]
        if beam_rows is None:
            beam_rows = keep_rows
        else:
            beam_rows = beam_rows.reshape(n_sentences, beam_size)[keep].reshape(-1)
    if beam_rows is not None and rows.cache is not None:
        rows.cache = rows.cache.reorder(beam_rows)


def _results(finished: list[list[Hypothesis]], n_best: int) -> list[SearchResult]:
    # sorted() is stable: equal scores keep the order in which they finished.
    return [SearchResult(sorted(hyps, key=lambda h: -h.score)[:n_best]) for hyps in finished]


# --- beam search ----------------------------------------------------------------------------


def _expand(state: BeamState, log_probs: Tensor, forbidden: Tensor) -> _Candidates:
    """The 2K best expansions of each sentence's K beams by one token (log_probs (N*K, V)),
    none by a `forbidden` token."""
    n_sentences, beam_size = state.scores.shape
    vocab_size = log_probs.shape[-1]
    totals = state.scores.unsqueeze(2) + log_probs.view(n_sentences, beam_size, vocab_size)
    # In place on our own new tensor: one pass fewer over (N, K, V) than masking log_probs.
    totals.index_fill_(2, forbidden, float("-inf"))
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
    step: int,
    cfg: DecodeConfig,
    eos_id: int,
    finished: list[list[Hypothesis]],
) -> None:
    """Finish the candidates among each sentence's first K that end in EOS or reach max_len."""
    beam_size = state.scores.shape[1]
    at_max_len = (state.max_lens <= step + 1).unsqueeze(1)  # (N, 1)
    is_eos = candidates.tokens == eos_id  # (N, 2K)
    ends = (is_eos | at_max_len) & candidates.scores.isfinite()
    ends[:, beam_size:] = False  # ranked too low to have entered the beam
    state.n_finished = state.n_finished + ends.sum(dim=1)
    sentence, rank = ends.nonzero(as_tuple=True)  # (M,), (M,)
    if not sentence.numel():
        return
    prefixes = state.tokens[sentence * beam_size + candidates.beams[sentence, rank]]  # (M, t)
    tokens = torch.cat([prefixes, candidates.tokens[sentence, rank, None]], dim=1)  # (M, t+1)
    _collect(
        finished,
        state.sentence_ids[sentence],
        tokens,
        is_eos[sentence, rank],
        candidates.scores[sentence, rank],
        step + 1,
        cfg,
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
    state.tokens = torch.cat([state.tokens[beam_rows], tokens.reshape(-1, 1)], dim=1)
    return beam_rows


# --- greedy search and sampling -------------------------------------------------------------


def _decode_rows(
    model: DecodingModel,
    src_ids: Tensor,
    src_mask: Tensor,
    cfg: DecodeConfig,
    ids: _SpecialIds,
    samples: int,
    choose: Callable[[Tensor], Tensor],
    max_len_cap: int | None,
) -> list[SearchResult]:
    """One row per (sentence, sample): `choose` maps (R, V) log-probs to (R,) next tokens."""
    finished: list[list[Hypothesis]] = [[] for _ in range(src_ids.shape[0])]
    with torch.inference_mode():
        state, rows = _start(model, src_ids, src_mask, cfg, 1, samples, max_len_cap)
        step = 0
        while state.sentence_ids.numel():
            log_probs = _next_log_probs(model, state, rows, step, ids.bos)
            forbidden = _forbidden(step, cfg.min_len, ids, log_probs.device)
            # Out of place: the model may hand out a view of something it keeps.
            log_probs = log_probs.index_fill(1, forbidden, float("-inf"))
            tokens = choose(log_probs)  # (R,)
            state.scores = state.scores + log_probs.gather(1, tokens[:, None])  # (R, 1)
            state.tokens = torch.cat([state.tokens, tokens[:, None]], dim=1)
            is_eos = tokens == ids.eos
            done = is_eos | (state.max_lens <= step + 1)
            ended = done.nonzero().squeeze(1)
            _collect(
                finished,
                state.sentence_ids[ended],
                state.tokens[ended],
                is_eos[ended],
                state.scores[ended, 0],
                step + 1,
                cfg,
            )
            _drop_done(state, rows, done, beam_rows=None)
            step += 1
    return _results(finished, samples)


def _argmax(log_probs: Tensor) -> Tensor:
    return log_probs.argmax(dim=-1)


def _sampler(cfg: DecodeConfig, generator: torch.Generator | None) -> Callable[[Tensor], Tensor]:
    """A `choose` function drawing from the temperature / top-k / top-p filtered distribution."""

    def choose(log_probs: Tensor) -> Tensor:
        logits = log_probs / cfg.temperature  # (R, V)
        if cfg.top_k > 0:
            kth_best = logits.topk(min(cfg.top_k, logits.shape[-1]), dim=-1).values[:, -1:]
            logits = logits.masked_fill(logits < kth_best, float("-inf"))
        if cfg.top_p < 1.0:
            sorted_logits, order = logits.sort(dim=-1, descending=True)
            probs = sorted_logits.softmax(dim=-1)
            # Drop a token once the tokens ranked above it already hold top_p of the mass; the
            # most probable token always stays.
            drop = probs.cumsum(dim=-1) - probs >= cfg.top_p
            logits = logits.scatter(-1, order, sorted_logits.masked_fill(drop, float("-inf")))
        probs = logits.softmax(dim=-1)
        return torch.multinomial(probs, 1, generator=generator).squeeze(1)

    return choose
