"""What every search mode shares: the decoding protocol, the live state, results and lengths.

Rows of a step are decoded as one tensor; `start_rows` encodes once and lays the rows out,
`next_log_probs` runs a decoder step on all of them, `collect_finished` turns finished rows into
hypotheses and `drop_done` drops sentences whose search is over (with their model rows).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import torch
from torch import Tensor

from transformer_mt.config import DecodeConfig, check_one_prefix_per_text

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
        on the first step) -> log_probs (R, V) of the next token, a tensor of the caller's own
        (beam search overwrites it), and the updated cache."""
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
    sentence n. Greedy search and sampling use K = 1. Sentences need not be in step: each has
    its own `steps`, so that a server can let new sentences join a running search.
    """

    tokens: Tensor  # (N * K, W) long: row r's tokens so far (no BOS) are [:steps[r // K]]
    scores: Tensor  # (N, K) float: log P of each live beam; -inf marks an empty slot
    sentence_ids: Tensor  # (N,) long: which sentence (an index into the caller's results)
    max_lens: Tensor  # (N,) long: max_len(x) of each sentence
    n_finished: Tensor  # (N,) long: finished hypotheses collected so far
    steps: Tensor  # (N,) long: tokens generated so far
    prefix: Tensor  # (N, P) long: forced first target tokens, right-padded; P may be 0
    prefix_lens: Tensor  # (N,) long: how many of them each sentence has

    @classmethod
    def start(
        cls,
        max_lens: Tensor,
        sentence_ids: Tensor,
        beam_size: int,
        prefixes: Sequence[Sequence[int]] | None = None,
    ) -> BeamState:
        """N sentences before their first step, with optional forced target prefixes.

        A sentence's max_len is raised to hold its prefix and one more token, so that a
        prefix is never cut. Only the first of the K beams is live (the others are -inf), so
        that the first step does not fill the beam with K copies of the best token.
        """
        n, device = max_lens.numel(), max_lens.device
        prefix, prefix_lens = _pad_prefixes(prefixes, n, device)
        scores = torch.zeros(n, beam_size, device=device)
        scores[:, 1:] = -INF
        return cls(
            tokens=torch.empty(n * beam_size, 0, dtype=torch.long, device=device),
            scores=scores,
            sentence_ids=sentence_ids,
            max_lens=torch.maximum(max_lens, prefix_lens + 1),
            n_finished=torch.zeros(n, dtype=torch.long, device=device),
            steps=torch.zeros(n, dtype=torch.long, device=device),
            prefix=prefix,
            prefix_lens=prefix_lens,
        )

    @property
    def beam_size(self) -> int:
        return self.scores.shape[1]

    def row_steps(self) -> Tensor:
        """(N * K,) long: `steps` of every row's sentence (`steps` itself when K is 1: for
        reading)."""
        k = self.beam_size
        return self.steps if k == 1 else self.steps.repeat_interleave(k)

    def last_tokens(self, bos_id: int) -> Tensor:
        """(N * K,) long: the latest token of every row, BOS before its first step."""
        steps = self.row_steps()
        if not self.tokens.shape[1]:
            return torch.full_like(steps, bos_id)
        last = self.tokens.gather(1, (steps - 1).clamp(min=0)[:, None]).squeeze(1)
        return torch.where(steps > 0, last, bos_id)

    def forbid(self, log_probs: Tensor, min_len: int, ids: SpecialIds) -> Tensor:
        """`log_probs` (N, K, V), changed in place and returned: -inf for PAD and BOS always,
        for EOS before min_len tokens, and for all but the prefix token while a sentence is
        inside its forced prefix (the prefix token keeps its log-prob, so scores count it)."""
        log_probs.index_fill_(2, torch.tensor([ids.pad, ids.bos], device=log_probs.device), -INF)
        early = self.steps < min_len  # (N,)
        if bool(early.any()):
            log_probs[:, :, ids.eos].masked_fill_(early[:, None], -INF)
        if not self.prefix.shape[1]:  # no sentence has a prefix
            return log_probs
        forced = (self.steps < self.prefix_lens).nonzero().squeeze(1)  # (M,)
        if forced.numel():
            token = self.prefix[forced, self.steps[forced]]  # (M,)
            index = token[:, None, None].expand(-1, self.beam_size, 1)  # (M, K, 1)
            rows = log_probs[forced]  # (M, K, V), a copy
            log_probs[forced] = torch.full_like(rows, -INF).scatter_(
                2, index, rows.gather(2, index)
            )
        return log_probs

    def append(self, row_tokens: Tensor) -> None:
        """Write every row's next token (N * K,) at its sentence's step, and count the step."""
        steps = self.row_steps()
        width = int(steps.max()) + 1 if steps.numel() else 0
        self.tokens = _widen(self.tokens, width)
        self.tokens.scatter_(1, steps[:, None], row_tokens[:, None])
        self.steps = self.steps + 1

    def keep(self, sentences: Tensor) -> Tensor:
        """Keep sentences `sentences` (N',) long, in that order; returns their rows (N' * K,)."""
        offsets = torch.arange(self.beam_size, device=sentences.device)
        rows = (sentences[:, None] * self.beam_size + offsets).reshape(-1)
        self.tokens = self.tokens[rows]
        for name in SENTENCE_FIELDS:
            setattr(self, name, getattr(self, name)[sentences])
        return rows

    def extend(self, other: BeamState) -> None:
        """Add the sentences of `other` (same beam size) after this state's own."""
        width = max(self.tokens.shape[1], other.tokens.shape[1])
        self.tokens = torch.cat([_widen(self.tokens, width), _widen(other.tokens, width)])
        width = max(self.prefix.shape[1], other.prefix.shape[1])
        self.prefix = torch.cat([_widen(self.prefix, width), _widen(other.prefix, width)])
        for name in SENTENCE_FIELDS:
            if name != "prefix":
                setattr(self, name, torch.cat([getattr(self, name), getattr(other, name)]))


# BeamState fields with one entry per sentence (`tokens` has one per row).
SENTENCE_FIELDS = (
    "scores",
    "sentence_ids",
    "max_lens",
    "n_finished",
    "steps",
    "prefix",
    "prefix_lens",
)
INF = float("inf")


def _widen(t: Tensor, width: int) -> Tensor:
    """(M, w) -> (M, max(w, width)), zero columns appended."""
    if t.shape[1] >= width:
        return t
    return torch.cat([t, t.new_zeros(t.shape[0], width - t.shape[1])], dim=1)


def _pad_prefixes(
    prefixes: Sequence[Sequence[int]] | None, n: int, device: torch.device
) -> tuple[Tensor, Tensor]:
    """(N, P) right-padded prefix tokens and their (N,) lengths; P = 0 without prefixes."""
    check_one_prefix_per_text(prefixes, n)
    if prefixes is None:
        prefixes = [[]] * n
    lens = [len(p) for p in prefixes]
    padded = torch.zeros(n, max(lens, default=0), dtype=torch.long)
    for i, p in enumerate(prefixes):
        padded[i, : len(p)] = torch.tensor(list(p), dtype=torch.long)
    return padded.to(device), torch.tensor(lens, dtype=torch.long, device=device)


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


def collect_finished(
    finished: Sequence[list[Hypothesis]] | Mapping[int, list[Hypothesis]],
    sentence_ids: Tensor,
    tokens: Tensor,
    lengths: Tensor,
    last: Tensor,
    log_probs: Tensor,
    cfg: DecodeConfig,
    eos_id: int,
) -> None:
    """Append M finished hypotheses to their sentences' lists in `finished`.

    Args:
        sentence_ids: (M,) long, the sentence of each hypothesis (a key of `finished`).
        tokens: (M, W) long: the tokens before the last one are tokens[m, :lengths[m]].
        last: (M,) long, the last token (EOS, or any token at max_len; EOS is not kept).
        log_probs: (M,) log P(y|x).
    """
    columns = (sentence_ids, tokens, lengths, last, log_probs)
    for sentence, row, length, token, log_prob in zip(*(c.tolist() for c in columns), strict=True):
        eos = token == eos_id
        body = row[:length] if eos else [*row[:length], token]
        penalty = length_penalty(length + 1, cfg)
        finished[sentence].append(Hypothesis(body, log_prob / penalty, log_prob, eos))


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


def top_k(values: Tensor, k: int, chunk: int = 128) -> tuple[Tensor, Tensor]:
    """The k largest entries of each row of `values` (N, M), best first, and their columns.

    The same values as `values.topk(k, dim=1)`, from a fraction of the work: a CPU's topk
    inspects every entry at a few ns each, and beam search asks for 2K of K * V entries per
    sentence at every step (greedy search for 1 of V). Cut each row into chunks of `chunk`
    columns; a chunk whose maximum is not among the k largest chunk maxima cannot hold any of
    the k largest entries, so one max pass over the row picks k chunks, and topk runs over
    those k * chunk entries (and the columns after the last whole chunk). Among equal values
    the columns chosen may differ.
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


def ranked_results(finished: list[list[Hypothesis]], n_best: int) -> list[SearchResult]:
    # sorted() is stable: equal scores keep the order in which they finished.
    return [SearchResult(sorted(hyps, key=lambda h: -h.score)[:n_best]) for hyps in finished]
