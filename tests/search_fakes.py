"""Fake models for the search tests: they follow `search.DecodingModel` and nothing more.

- `RecurrentFake`: a deterministic random recurrence over the whole prefix and the source, so
  scores depend on every earlier token and beams genuinely differ.
- `ScriptedFake`: the same hand-written distribution for every row at a given step, so expected
  beams and scores can be worked out by hand.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

PAD, BOS, EOS = 0, 2, 3


@dataclass
class HiddenCache:
    """Recurrent state per row (R, D), and how many tokens it has seen."""

    hidden: Tensor
    length: int

    def reorder(self, indices: Tensor, sources: Tensor | None = None) -> HiddenCache:
        return HiddenCache(self.hidden[indices], self.length)


class RecurrentFake:
    """h_t = tanh(h_{t-1} W + E[y_t] + mean of the real source embeddings + t p);
    log_probs = log_softmax(sharpness * h_t U). float64, so batch and single runs agree.

    `row_counts` records the rows of every decode_step call, to show pruning happened, and
    `layouts` the calls of source_rows.
    """

    def __init__(self, vocab_size: int = 10, dim: int = 8, seed: int = 0, sharpness: float = 3.0):
        g = torch.Generator().manual_seed(seed)

        def randn(*shape: int) -> Tensor:
            return torch.randn(*shape, generator=g, dtype=torch.float64)

        self.src_embedding = randn(vocab_size, dim)
        self.tgt_embedding = randn(vocab_size, dim)
        self.recurrence = randn(dim, dim) / math.sqrt(dim)
        self.position = randn(dim) / 2
        self.output = randn(dim, vocab_size) * sharpness / math.sqrt(dim)
        self.vocab_size = vocab_size
        self.row_counts: list[int] = []
        self.layouts = 0  # source_rows calls: once per change of the rows' sources

    def encode(self, src_ids: Tensor, src_mask: Tensor) -> Tensor:
        return self.src_embedding[src_ids]  # (B, S, D)

    def source_rows(self, sources: Tensor, n_sources: int) -> Tensor:
        self.layouts += 1
        return sources

    def decode_step(
        self,
        tgt_ids: Tensor,
        memory: Tensor,
        src_mask: Tensor,
        sources: Tensor,
        cache: HiddenCache | None,
    ) -> tuple[Tensor, HiddenCache]:
        rows = tgt_ids.shape[0]
        self.row_counts.append(rows)
        memory, src_mask = memory[sources], src_mask[sources]  # (R, S, D), (R, 1, 1, S)
        keep = src_mask.reshape(rows, -1, 1).to(memory.dtype)  # (R, S, 1)
        source = (memory * keep).sum(dim=1) / keep.sum(dim=1)  # (R, D)
        if cache is None:
            cache = HiddenCache(torch.zeros_like(source), 0)
        hidden = torch.tanh(
            cache.hidden @ self.recurrence
            + self.tgt_embedding[tgt_ids]
            + source
            + cache.length * self.position
        )
        log_probs = torch.log_softmax(hidden @ self.output, dim=-1)  # (R, V)
        return log_probs, HiddenCache(hidden, cache.length + 1)


@dataclass
class StepCache:
    step: int

    def reorder(self, indices: Tensor, sources: Tensor | None = None) -> StepCache:
        return self


class ScriptedFake:
    """decode_step returns `probs[step]` (a {token: probability} dict) for every row; steps past
    the script repeat its last distribution. Tokens not named have probability 0."""

    def __init__(self, probs: list[dict[int, float]], vocab_size: int = 6):
        table = torch.zeros(len(probs), vocab_size, dtype=torch.float64)
        for step, dist in enumerate(probs):
            for token, p in dist.items():
                table[step, token] = p
        self.log_table = table.log()  # (T, V); log(0) = -inf

    def encode(self, src_ids: Tensor, src_mask: Tensor) -> Tensor:
        return torch.zeros(*src_ids.shape, 1, dtype=torch.float64)

    def source_rows(self, sources: Tensor, n_sources: int) -> Tensor:
        return sources

    def decode_step(
        self,
        tgt_ids: Tensor,
        memory: Tensor,
        src_mask: Tensor,
        sources: Tensor,
        cache: StepCache | None,
    ) -> tuple[Tensor, StepCache]:
        step = 0 if cache is None else cache.step
        row = self.log_table[min(step, len(self.log_table) - 1)]
        return row.repeat(tgt_ids.shape[0], 1), StepCache(step + 1)  # search may overwrite it


def sequence_log_prob(model, src_ids: Tensor, tokens: list[int]) -> float:
    """log P(tokens | src) by feeding BOS + tokens[:-1] one step at a time (src_ids (S,))."""
    src = src_ids[None]
    src_mask = (src != PAD)[:, None, None, :]
    memory = model.encode(src, src_mask)
    cache, total, last = None, 0.0, BOS
    for token in tokens:
        log_probs, cache = model.decode_step(
            torch.tensor([last]), memory, src_mask, torch.zeros(1, dtype=torch.long), cache
        )
        total += float(log_probs[0, token])
        last = token
    return total
