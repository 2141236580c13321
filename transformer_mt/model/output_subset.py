"""The output projection restricted to some target ids (a shortlist, vocabulary selection):
at a search step each row scores only the ids its source may produce, the others get
log-probability -inf.

A small model's search step spends about a fifth of its time on the projection onto the whole
vocabulary (8,000 ids at d_model 192-256, docs/distillation.md), while a batch of source
sentences can produce a few hundred or thousand of those ids. One product scores the union of
the batch's ids; each row is then normalised over its own source's ids, so that a sentence's
translation does not depend on the sentences it shares a batch with. Which ids a source may
produce is the shortlist's question (`transformer_mt.shortlist`), not the model's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor


@dataclass(frozen=True)
class OutputSubset:
    """The output projection's rows for target ids `ids` (V',) long, sorted and unique, and
    which of them each source may produce."""

    ids: Tensor
    project: Callable[[Tensor], Tensor]  # (B, D) -> (B, V') logits of `ids`
    allowed: Tensor  # (N, V') bool: the ids of each source, among `ids`
    vocab_size: int  # V: the width of the log-probs handed to search

    @classmethod
    def of(
        cls,
        allowed: Tensor,
        weight: Tensor,
        bias: Tensor | None,
        product: Product | None = None,
    ) -> OutputSubset:
        """From `allowed` (N, V) bool, the ids each source may produce, and the full projection
        `weight` (V, D) and `bias` (V,) or None: their rows for the union of the ids, copied
        once, and `product` of them (None: `F.linear`; a caller may pass a faster one, e.g.
        one that packs the rows for its machine's GEMM once per batch)."""
        ids = allowed.any(dim=0).nonzero().squeeze(1)
        rows = weight.index_select(0, ids).contiguous()
        bias = None if bias is None else bias.index_select(0, ids)
        project = (product or linear_product)(rows, bias)
        return cls(ids, project, allowed[:, ids], weight.size(0))

    def keep(self, sources: Tensor) -> OutputSubset:
        """The sources `sources` (N',) long only, in that order (search drops finished ones)."""
        return OutputSubset(self.ids, self.project, self.allowed[sources], self.vocab_size)

    def log_probs(self, hidden: Tensor, sources: Tensor) -> Tensor:
        """hidden (B, D) and the source of each row `sources` (B,) long -> (B, V) float32
        log-probs normalised over the row's source's ids, -inf elsewhere: the full projection's
        log-probs with every other id's logit at -inf."""
        logits = self.project(hidden).float()
        logits.masked_fill_(~self.allowed[sources], float("-inf"))
        out = logits.new_full((hidden.size(0), self.vocab_size), float("-inf"))
        return out.index_copy_(1, self.ids, torch.log_softmax(logits, dim=-1))


# (rows (V', D), bias (V',) or None) -> the function computing x (B, D) -> (B, V') logits.
Product = Callable[[Tensor, Tensor | None], Callable[[Tensor], Tensor]]


def linear_product(rows: Tensor, bias: Tensor | None) -> Callable[[Tensor], Tensor]:
    """`F.linear` with `rows` and `bias`, in the input's dtype."""
    return lambda x: F.linear(x, rows.to(x.dtype), None if bias is None else bias.to(x.dtype))
