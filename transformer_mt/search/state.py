"""What every search mode shares: the decoding protocol, the live state, results and lengths.

Rows of a step are decoded as one tensor; `start_rows` encodes once and lays the rows out,
`next_log_probs` runs a decoder step on all of them, `collect_finished` turns finished rows into
hypotheses and `drop_done` drops sentences whose search is over (with their model rows).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import torch
from torch import Tensor

from transformer_mt.config import DecodeConfig

# The fixed special ids of data/tokenizer.py (PAD_ID, BOS_ID, EOS_ID), repeated here rather than
# imported so that search depends on the decoding protocol only.
PAD_ID, BOS_ID, EOS_ID = 0, 2, 3


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
class ModelRows:
    """Model inputs kept row-aligned with `BeamState.tokens`."""

    memory: Tensor  # (N * K, S, D)
    src_mask: Tensor  # (N * K, 1, 1, S) bool
    cache: ReorderableCache | None


@dataclass(frozen=True)
class SpecialIds:
    pad: int = PAD_ID
    bos: int = BOS_ID
    eos: int = EOS_ID


@dataclass(frozen=True)
class SearchOptions:
    """How a search runs, apart from the user's `DecodeConfig`: the same for every mode."""

    ids: SpecialIds = field(default_factory=SpecialIds)
    # The most tokens the model can decode at all (its position table); None: no cap.
    max_len_cap: int | None = None
    # An empty cache for the first decoding step (e.g. one storing keys and values in a narrower
    # dtype); None: the model makes its own on the first step.
    new_cache: Callable[[], ReorderableCache] | None = None
    # Sampling draws from it (a seeded one makes the draws reproducible); None: torch's global
    # generator. Greedy and beam search draw nothing.
    generator: torch.Generator | None = None


DEFAULT_OPTIONS = SearchOptions()


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


def start_rows(
    model: DecodingModel,
    src_ids: Tensor,
    src_mask: Tensor,
    cfg: DecodeConfig,
    beam_size: int,
    samples: int,
    options: SearchOptions,
) -> tuple[BeamState, ModelRows]:
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
        max_lens=max_output_lengths(src_mask, cfg, options.max_len_cap).repeat_interleave(samples),
        n_finished=torch.zeros(units, dtype=torch.long, device=device),
    )
    rows = ModelRows(
        memory=memory.repeat_interleave(copies, dim=0),  # (B * copies, S, D)
        src_mask=src_mask.repeat_interleave(copies, dim=0),  # (B * copies, 1, 1, S)
        cache=None if options.new_cache is None else options.new_cache(),
    )
    return state, rows


def next_log_probs(
    model: DecodingModel, state: BeamState, rows: ModelRows, step: int, bos_id: int
) -> Tensor:
    """Run one decoder step on every row: the model's (R, V) log-probs, forbidden tokens not
    yet removed (callers apply `forbidden_tokens`)."""
    if step == 0:
        last = torch.full((state.tokens.shape[0],), bos_id, device=state.tokens.device)
    else:
        last = state.tokens[:, -1]  # (R,)
    log_probs, rows.cache = model.decode_step(last, rows.memory, rows.src_mask, rows.cache)
    return log_probs


def forbidden_tokens(step: int, min_len: int, ids: SpecialIds, device: torch.device) -> Tensor:
    """Token ids that may not come next: PAD and BOS always, EOS before min_len tokens."""
    forbidden = [ids.pad, ids.bos] + ([ids.eos] if step < min_len else [])
    return torch.tensor(forbidden, device=device)


def collect_finished(
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


def drop_done(state: BeamState, rows: ModelRows, done: Tensor, beam_rows: Tensor | None) -> None:
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


def ranked_results(finished: list[list[Hypothesis]], n_best: int) -> list[SearchResult]:
    # sorted() is stable: equal scores keep the order in which they finished.
    return [SearchResult(sorted(hyps, key=lambda h: -h.score)[:n_best]) for hyps in finished]
