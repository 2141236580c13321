"""Lexical constraints of beam search: target phrases every translation must contain, and the
banks of dynamic beam allocation (Post & Vilar 2018, "Fast Lexically Constrained Decoding with
Dynamic Beam Allocation"; Hu et al. 2019 for doing it on tensors).

A constraint is a phrase of target ids. A hypothesis meets it when the phrase occurs in its
tokens as one contiguous run (forced-prefix tokens included); equal phrases of one sentence
count once. Per row and constraint the state is `matched`: the length of the longest end of
the row's tokens that begins the phrase, a state of the phrase's Knuth-Morris-Pratt automaton,
or the phrase's length once it has occurred (met stays met). So a phrase abandoned midway is
unmet again, and a run that restarts inside a phrase keeps what still begins it ("a a b" read
in "a a a b" is at 2 after the third "a"). Each constraint has its own state, so constraints
that begin alike ("a b", "a c") both advance on "a".

Tokens met, the bank of a hypothesis: the tokens of the phrases it has met plus the longest
partial match among those it has not. Beam search ranks a step's candidates within their banks
by score and fills the beam from the banks in turn, the bank of most tokens met first
(`bank_order`): every bank gets about K / (banks) slots and slots a bank cannot fill go to the
others. The best candidate of the highest bank always enters the beam, and it is never below
the best live hypothesis' bank + 1 (the next token of an unmet constraint is always a
candidate), so a sentence whose max_len holds its prefix, its constraint tokens and one more
has met every constraint by that length (`BeamState.start` raises max_len to that).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from transformer_mt.errors import SettingError

# A sentence's phrases, each a sequence of target ids.
Phrases = Sequence[Sequence[int]]


@dataclass
class Constraints:
    """The constraints of N sentences and the progress of their K rows each through them.

    Row n * K + k is beam k of sentence n, as in `BeamState`; C is the most constraints of a
    sentence and L the longest phrase (both may be 0).
    """

    phrases: Tensor  # (N, C, L) long: sentence n's phrases, right-padded with 0
    lengths: Tensor  # (N, C) long: tokens of each phrase; 0 marks an empty slot (always met)
    # (N, C, L, L) long: [n, c, s, j] the state after reading token phrases[n, c, j] in state
    # s < lengths[n, c]; reading a token not in the phrase leads to state 0.
    transitions: Tensor
    matched: Tensor  # (N * K, C) long: each row's state; lengths[n, c] once met

    @classmethod
    def start(
        cls,
        phrases: Sequence[Phrases],
        beam_size: int,
        forbidden: Sequence[int],
        device: torch.device,
    ) -> Constraints | None:
        """The constraints of N sentences before their first step; None when no sentence has
        one (search is then exactly the unconstrained one).

        Empty phrases are dropped and repeated ones kept once.

        Raises:
            SettingError: a phrase holding an id in `forbidden` (EOS, or ids never generated).
        """
        kept = [_distinct(sentence, forbidden) for sentence in phrases]
        if not any(kept):
            return None
        width = max(len(p) for sentence in kept for p in sentence)
        slots = max(len(sentence) for sentence in kept)
        padded = torch.zeros(len(kept), slots, width, dtype=torch.long)
        lengths = torch.zeros(len(kept), slots, dtype=torch.long)
        transitions = torch.zeros(len(kept), slots, width, width, dtype=torch.long)
        for n, sentence in enumerate(kept):
            for c, phrase in enumerate(sentence):
                padded[n, c, : len(phrase)] = torch.tensor(phrase)
                lengths[n, c] = len(phrase)
                transitions[n, c] = torch.tensor(automaton(phrase, width))
        matched = torch.zeros(len(kept) * beam_size, slots, dtype=torch.long)
        return cls(padded, lengths, transitions, matched).to(device)

    @classmethod
    def empty(cls, n_sentences: int, beam_size: int, device: torch.device) -> Constraints:
        """N sentences without constraints (to join a state that has some)."""
        long = dict(dtype=torch.long, device=device)
        return cls(
            phrases=torch.zeros(n_sentences, 0, 0, **long),
            lengths=torch.zeros(n_sentences, 0, **long),
            transitions=torch.zeros(n_sentences, 0, 0, 0, **long),
            matched=torch.zeros(n_sentences * beam_size, 0, **long),
        )

    def to(self, device: torch.device) -> Constraints:
        return Constraints(*(t.to(device) for t in self._tensors()))

    def _tensors(self) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        return self.phrases, self.lengths, self.transitions, self.matched

    @property
    def beam_size(self) -> int:
        return self.matched.shape[0] // max(self.lengths.shape[0], 1)

    def tokens_needed(self) -> Tensor:
        """(N,) long: the constraint tokens of each sentence."""
        return self.lengths.sum(dim=1)

    def _row_lengths(self) -> Tensor:
        """(N * K, C) long: `lengths` of every row's sentence."""
        return self.lengths.repeat_interleave(self.beam_size, dim=0)

    def all_met(self) -> Tensor:
        """(N * K,) bool: the rows that have met every constraint of their sentence."""
        return (self.matched == self._row_lengths()).all(dim=1)

    def next_tokens(self) -> tuple[Tensor, Tensor]:
        """(N * K, C) long, the token that advances each row in each constraint (the first
        of the phrase, or the next of a phrase begun), and (N * K, C) bool, True where the
        constraint is unmet (elsewhere the token means nothing)."""
        unmet = self.matched < self._row_lengths()  # (R, C)
        if not self.phrases.shape[2]:
            return torch.zeros_like(self.matched), unmet
        phrases = self.phrases.repeat_interleave(self.beam_size, dim=0)  # (R, C, L)
        at = self.matched.clamp(max=self.phrases.shape[2] - 1)
        return phrases.gather(2, at.unsqueeze(2)).squeeze(2), unmet

    def step(self, rows: Tensor, tokens: Tensor) -> Tensor:
        """The states after row rows[n, m] reads tokens[n, m] (both (N, M) long, every row
        one of sentence n's): (N, M, C) long."""
        before = self.matched[rows]  # (N, M, C)
        width = self.phrases.shape[2]
        if not width:
            return before
        n, m, c = before.shape
        table = self.transitions.unsqueeze(1).expand(n, m, c, width, width)
        at = before.clamp(max=width - 1)[..., None, None].expand(n, m, c, 1, width)
        after = table.gather(3, at).squeeze(3)  # (N, M, C, L): the state after each phrase token
        reads = self.phrases.unsqueeze(1) == tokens[:, :, None, None]  # (N, M, C, L)
        after = (after * reads).amax(dim=3)  # 0: a token the phrase does not hold
        lengths = self.lengths.unsqueeze(1)  # (N, 1, C)
        return torch.where(before == lengths, lengths, after)

    def tokens_met(self, matched: Tensor) -> Tensor:
        """(N, M) long, the bank of each state in `matched` (N, M, C): tokens of the met
        phrases plus the longest partial match of an unmet one."""
        if not matched.shape[2]:
            return matched.new_zeros(matched.shape[:2])
        lengths = self.lengths.unsqueeze(1)  # (N, 1, C)
        met = matched == lengths
        return (lengths * met).sum(dim=2) + (matched * ~met).amax(dim=2)

    def n_unmet(self, matched: Tensor, sentences: Tensor) -> Tensor:
        """(M,) long: constraints of sentences[m] left unmet by the states matched[m] (M, C)."""
        return (matched != self.lengths[sentences]).sum(dim=1)

    def read(self, sentence: int, tokens: Sequence[int]) -> None:
        """Move the rows of sentence `sentence` through `tokens`, as though each row had
        generated them: a forced prefix whose decoding a server takes from its prefix cache."""
        k = self.beam_size
        rows = torch.arange(self.matched.shape[0], device=self.matched.device).view(-1, k)
        for token in tokens:
            after = self.step(rows, torch.full_like(rows, token))  # (N, K, C)
            self.matched[sentence * k : (sentence + 1) * k] = after[sentence]

    def keep(self, sentences: Tensor, rows: Tensor) -> None:
        """Keep sentences `sentences` (N',) and rows `rows` (N' * K,), in that order."""
        self.phrases = self.phrases[sentences]
        self.lengths = self.lengths[sentences]
        self.transitions = self.transitions[sentences]
        self.matched = self.matched[rows]

    def extend(self, other: Constraints) -> None:
        """Add the sentences of `other` (same beam size) after these."""
        slots = max(self.lengths.shape[1], other.lengths.shape[1])
        width = max(self.phrases.shape[2], other.phrases.shape[2])
        shapes = ((slots, width), (slots,), (slots, width, width), (slots,))
        self.phrases, self.lengths, self.transitions, self.matched = (
            torch.cat([_pad_to(mine, shape), _pad_to(theirs, shape)])
            for mine, theirs, shape in zip(self._tensors(), other._tensors(), shapes, strict=True)
        )


def bank_order(
    scores: Tensor, banks: Tensor, finishing: Tensor | None = None, complete: Tensor | None = None
) -> Tensor:
    """(N, M) long: the order in which a beam takes candidates, by dynamic beam allocation.

    Candidates are ranked by score inside their bank; the beam takes the best of every bank,
    highest bank first, then the second best of every bank, and so on, so each bank gets an
    equal share of the slots and the slots of a bank short of candidates go to the others.
    With one bank this is the order of the scores. A sentence at its last step (`finishing`)
    takes its `complete` candidates first, then the others, each by score. Candidates of
    score -inf come last.

    Args:
        scores: (N, M) float, the candidates' log P.
        banks: (N, M) long, their tokens met (`Constraints.tokens_met`).
        finishing: (N,) bool, the sentences at their last step (None: none).
        complete: (N, M) bool, the candidates that meet every constraint (with `finishing`).
    """
    n_banks = int(banks.max()) + 1 if banks.numel() else 1
    by_score = scores.argsort(dim=1, descending=True, stable=True)  # (N, M)
    bank = banks.gather(1, by_score)
    members = F.one_hot(bank, n_banks)  # (N, M, B)
    rank = (members.cumsum(dim=1) * members).sum(dim=2) - 1  # (N, M): its rank in its bank
    key = rank * n_banks + (n_banks - 1 - bank)
    last = scores.shape[1] * n_banks  # above every key
    if finishing is not None:
        position = torch.arange(scores.shape[1], device=scores.device)
        incomplete = ~complete.gather(1, by_score)
        key = torch.where(finishing[:, None], position + last * incomplete, key)
        last = 2 * last
    key = key.masked_fill(~scores.gather(1, by_score).isfinite(), last)
    return by_score.gather(1, key.argsort(dim=1, stable=True))


def constrained_beam_size(beam_size: int, n_constraints: int) -> int:
    """The beam a sentence with `n_constraints` constraints is searched with: at least one
    slot more than it has constraints, so that a bank short of candidates never starves the
    hypotheses that have met none (the condition under which the tests find the exhaustive
    optimum); `beam_size` otherwise."""
    return max(beam_size, n_constraints + 1) if n_constraints else beam_size


def automaton(phrase: Sequence[int], width: int) -> list[list[int]]:
    """The Knuth-Morris-Pratt automaton of `phrase`, as `Constraints.transitions` stores it:
    [s][j] the state after reading phrase[j] in state s, padded with 0 to width x width.

    Built in O(L^2): state s behaves like its restart state (the longest proper end of
    phrase[:s] that begins the phrase) on every token but phrase[s], which leads to s + 1.
    """
    table = [[0] * width for _ in range(width)]
    restart = 0
    for s, token in enumerate(phrase):
        for j, other in enumerate(phrase):
            if other == token:
                table[s][j] = s + 1
            elif s:
                table[s][j] = table[restart][j]
        if s:
            restart = table[restart][s]
    return table


def _distinct(phrases: Phrases, forbidden: Sequence[int]) -> list[list[int]]:
    """The non-empty phrases of a sentence, each once, in order; refuses forbidden ids."""
    kept: list[list[int]] = []
    for phrase in phrases:
        phrase = [int(t) for t in phrase]
        bad = sorted(set(phrase) & set(forbidden))
        if bad:
            raise SettingError(
                "constraints", phrase, f"holds id(s) {bad} that no hypothesis may contain"
            )
        if phrase and phrase not in kept:
            kept.append(phrase)
    return kept


def _pad_to(t: Tensor, shape: tuple[int, ...]) -> Tensor:
    """`t` (M, *dims) zero-padded at the end of each dimension after the first to `shape`."""
    padding = []
    for have, want in zip(reversed(t.shape[1:]), reversed(shape), strict=True):
        padding += [0, want - have]
    return F.pad(t, padding) if any(padding) else t
