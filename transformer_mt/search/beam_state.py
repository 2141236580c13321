"""The live state of a search: the hypotheses of every sentence still searched, K rows per
sentence, with their scores, lengths, steps, forced prefixes and constraints (`BeamState`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from transformer_mt.config import DecodeConfig
from transformer_mt.errors import SettingError
from transformer_mt.search.constraints import Constraints, Phrases
from transformer_mt.search.lengths import least_max_len
from transformer_mt.search.options import OWN_IDS, SpecialIds
from transformer_mt.search.repeats import forbid_repeats


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
    # (N, K) float64: the scores of the K best finished hypotheses, best first; -inf where
    # fewer have finished (when to end a sentence: `DecodeConfig.early_stopping`).
    best_finished: Tensor
    steps: Tensor  # (N,) long: tokens generated so far
    prefix: Tensor  # (N, P) long: forced first target tokens, right-padded; P may be 0
    prefix_lens: Tensor  # (N,) long: how many of them each sentence has
    # Target phrases each sentence's translations must contain, and each row's progress
    # through them (beam search only); None: no sentence has any.
    constraints: Constraints | None = None

    @classmethod
    def start(
        cls,
        max_lens: Tensor,
        sentence_ids: Tensor,
        beam_size: int,
        prefixes: Sequence[Sequence[int]] | None = None,
        constraints: Sequence[Phrases] | None = None,
        ids: SpecialIds = OWN_IDS,
    ) -> BeamState:
        """N sentences before their first step, with optional forced target prefixes and
        constraints (one list of phrases per sentence; `ids` says which ids they may not
        hold).

        A sentence's max_len is raised to hold its prefix and one more token, so that a
        prefix is never cut, and with constraints to hold its prefix, its constraint tokens
        and one more, so that they can all be met (`search.constraints`). Only the first of
        the K beams is live (the others are -inf), so that the first step does not fill the
        beam with K copies of the best token.
        """
        n, device = max_lens.numel(), max_lens.device
        prefix, prefix_lens = _pad_prefixes(prefixes, n, device)
        scores = torch.zeros(n, beam_size, device=device)
        scores[:, 1:] = -INF
        if constraints is not None and len(constraints) != n:
            raise SettingError(
                "constraints", len(constraints), f"need one list of phrases per text ({n})"
            )
        if constraints is not None:
            forbidden = (ids.eos, *ids.never)
            constraints = Constraints.start(constraints, beam_size, forbidden, device)
        # `constraints` is None also when no sentence has a phrase.
        tokens = 0 if constraints is None else constraints.tokens_needed()
        needed = least_max_len(prefix_lens, tokens)
        return cls(
            tokens=torch.empty(n * beam_size, 0, dtype=torch.long, device=device),
            scores=scores,
            sentence_ids=sentence_ids,
            max_lens=torch.maximum(max_lens, needed),
            best_finished=torch.full((n, beam_size), -INF, dtype=torch.float64, device=device),
            steps=torch.zeros(n, dtype=torch.long, device=device),
            prefix=prefix,
            prefix_lens=prefix_lens,
            constraints=constraints,
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

    def forbid(self, log_probs: Tensor, cfg: DecodeConfig, ids: SpecialIds) -> Tensor:
        """`log_probs` (N, K, V), changed in place and returned: -inf for the ids the model
        never produces (`SpecialIds.never`) always, the unknown piece with cfg.disable_unk,
        EOS before cfg.min_len tokens and in rows that have not met all their constraints,
        a token that would repeat an n-gram (cfg.no_repeat_ngram_size, search/repeats.py)
        after a forced prefix unless it starts or continues an unmet constraint, and all but
        the prefix token while a sentence is inside its forced prefix (the prefix token keeps
        its log-prob, so scores count it)."""
        never = ids.never + (ids.unk,) if cfg.disable_unk else ids.never
        if never:
            log_probs.index_fill_(2, torch.tensor(never, device=log_probs.device), -INF)
        early = self.steps < cfg.min_len  # (N,)
        if bool(early.any()):
            log_probs[:, :, ids.eos].masked_fill_(early[:, None], -INF)
        if self.constraints is not None:
            unmet = ~self.constraints.all_met().view(-1, self.beam_size)  # (N, K)
            log_probs[:, :, ids.eos].masked_fill_(unmet, -INF)
        if cfg.no_repeat_ngram_size:
            exempt = self._constraint_tokens(log_probs)
            self._forbid_repeats(log_probs, cfg.no_repeat_ngram_size)
            if exempt is not None:
                log_probs.scatter_reduce_(2, *exempt, reduce="amax")
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

    def _constraint_tokens(self, log_probs: Tensor) -> tuple[Tensor, Tensor] | None:
        """The token that starts or continues each unmet constraint of each row, (N, K, C),
        and its log-prob in `log_probs` (N, K, V) before the n-gram rule (-inf for a met
        constraint's): what `forbid` puts back, as the rule must not make a phrase that
        holds an n-gram twice (or one the text already holds) impossible to meet."""
        if self.constraints is None:
            return None
        n, k, _ = log_probs.shape
        tokens, unmet = self.constraints.next_tokens()  # (N * K, C)
        index = tokens.view(n, k, -1)
        before = log_probs.gather(2, index).masked_fill_(~unmet.view(n, k, -1), -INF)
        return index, before

    def _forbid_repeats(self, log_probs: Tensor, n: int) -> None:
        """`forbid`'s n-gram rule on the rows of sentences past their forced prefix (a prefix
        is the user's: its tokens are forced even where they repeat, and count as history)."""
        free = (self.steps >= self.prefix_lens).nonzero().squeeze(1)  # (M,) sentences
        if not free.numel():
            return
        k, vocab_size = self.beam_size, log_probs.shape[-1]
        if free.numel() == self.steps.numel():
            forbid_repeats(log_probs.view(-1, vocab_size), self.tokens, self.row_steps(), n)
            return
        rows = (free[:, None] * k + torch.arange(k, device=free.device)).reshape(-1)
        part = log_probs[free].view(-1, vocab_size)  # (M * K, V), a copy
        forbid_repeats(part, self.tokens[rows], self.row_steps()[rows], n)
        log_probs[free] = part.view(-1, k, vocab_size)

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
        if self.constraints is not None:
            self.constraints.keep(sentences, rows)
        return rows

    def extend(self, other: BeamState) -> None:
        """Add the sentences of `other` (same beam size) after this state's own."""
        if self.constraints is not None or other.constraints is not None:
            mine = self.constraints or _no_constraints(self)
            mine.extend(other.constraints or _no_constraints(other))
            self.constraints = mine
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
    "best_finished",
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


def _no_constraints(state: BeamState) -> Constraints:
    """Empty constraints for the sentences of `state`, to join a state that has some."""
    return Constraints.empty(state.sentence_ids.numel(), state.beam_size, state.scores.device)


def _pad_prefixes(
    prefixes: Sequence[Sequence[int]] | None, n: int, device: torch.device
) -> tuple[Tensor, Tensor]:
    """(N, P) right-padded prefix tokens and their (N,) lengths; P = 0 without prefixes.
    One prefix per row: the caller's request type counted them per text (a mismatch here is
    a caller's bug, refused by `zip(strict=True)`)."""
    if prefixes is None:
        prefixes = [[]] * n
    lens = [len(p) for p in prefixes]
    padded = torch.zeros(n, max(lens, default=0), dtype=torch.long)
    for i, p in zip(range(n), prefixes, strict=True):
        padded[i, : len(p)] = torch.tensor(list(p), dtype=torch.long)
    return padded.to(device), torch.tensor(lens, dtype=torch.long, device=device)
