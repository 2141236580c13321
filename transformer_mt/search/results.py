"""What a search returns: finished hypotheses, collected from finished rows and scored by the
length penalty, and the ranked n-best list of each sentence."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from transformer_mt.config import DecodeConfig
from transformer_mt.search.lengths import length_penalty


@dataclass(frozen=True)
class Hypothesis:
    """One finished translation, in target ids."""

    tokens: list[int]  # generated tokens without BOS and EOS
    score: float  # log_prob / lp(|y|): the ranking key (search/__init__)
    log_prob: float  # log P(y|x): sum of token log-probs, EOS included
    has_eos: bool  # False: cut at max_len without EOS
    # Constraints it leaves unmet: only a hypothesis cut at max_len can leave any, and it
    # ranks after every hypothesis that meets them all (search.constraints).
    unmet: int = 0

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


@dataclass(frozen=True)
class Ended:
    """M hypotheses that end at this step (EOS, or max_len), as the search's tensors hold them.

    Attributes:
        sentence_ids: (M,) long, the sentence of each hypothesis (a key of `finished`).
        tokens: (M, W) long: the tokens before the last one are tokens[m, :lengths[m]].
        lengths: (M,) long, the tokens before the last one.
        last: (M,) long, the last token (EOS, or any token at max_len; EOS is not kept).
        log_probs: (M,) log P(y|x).
        unmet: (M,) long, the constraints each leaves unmet (None: no constraints).
    """

    sentence_ids: Tensor
    tokens: Tensor
    lengths: Tensor
    last: Tensor
    log_probs: Tensor
    unmet: Tensor | None = None


def collect_finished(
    finished: Sequence[list[Hypothesis]] | Mapping[int, list[Hypothesis]],
    ended: Ended,
    cfg: DecodeConfig,
    eos_id: int,
) -> None:
    """Append the `ended` hypotheses to their sentences' lists in `finished`, scored by
    `cfg`'s length penalty."""
    unmet = torch.zeros_like(ended.lengths) if ended.unmet is None else ended.unmet
    columns = [ended.sentence_ids, ended.tokens, ended.lengths, ended.last, ended.log_probs]
    rows = zip(*(c.tolist() for c in [*columns, unmet]), strict=True)
    for sentence, row, length, token, log_prob, n_unmet in rows:
        eos = token == eos_id
        body = row[:length] if eos else [*row[:length], token]
        penalty = length_penalty(length + 1, cfg)
        finished[sentence].append(Hypothesis(body, log_prob / penalty, log_prob, eos, n_unmet))


def ranked_results(finished: list[list[Hypothesis]], n_best: int) -> list[SearchResult]:
    """Each sentence's `n_best` finished hypotheses, those that meet all their constraints
    first, each group by score, best first."""
    # sorted() is stable: equal keys keep the order in which they finished.
    return [
        SearchResult(sorted(hyps, key=lambda h: (h.unmet, -h.score))[:n_best]) for hyps in finished
    ]
