"""The output projection restricted to some target ids (a shortlist, vocabulary selection):
at a search step only those ids are scored, the others get log-probability -inf.

Most of a small decoder's step goes to the projection onto the whole vocabulary (a quarter
to a fifth of it at 8,000 ids and d_model 192-256, docs/distillation.md); a batch of source
sentences can only produce a few hundred of those ids in practice, so scoring those alone does
the same search on a much smaller product. Which ids a batch may produce is the shortlist's
question (`transformer_mt.shortlist`), not the model's.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor


@dataclass(frozen=True)
class OutputSubset:
    """The output projection's rows for target ids `ids` (V',) long, sorted and unique."""

    ids: Tensor
    weight: Tensor  # (V', D) the projection's rows for `ids`
    bias: Tensor | None  # (V',) or None
    vocab_size: int  # V: the width of the log-probs handed to search

    @classmethod
    def of(cls, ids: Tensor, weight: Tensor, bias: Tensor | None) -> OutputSubset:
        """The rows `ids` of a full projection `weight` (V, D) and `bias` (V,) or None,
        copied once so that every step reads them contiguously."""
        rows = weight.index_select(0, ids).contiguous()
        return cls(ids, rows, None if bias is None else bias.index_select(0, ids), weight.size(0))

    def log_probs(self, hidden: Tensor) -> Tensor:
        """hidden (B, D) -> (B, V) float32 log-probs normalised over `ids`, -inf elsewhere:
        the full projection's log-probs with every other id's logit at -inf."""
        logits = F.linear(hidden, self.weight.to(hidden.dtype), self.bias).float()
        out = logits.new_full((hidden.size(0), self.vocab_size), float("-inf"))
        return out.index_copy_(1, self.ids, torch.log_softmax(logits, dim=-1))
