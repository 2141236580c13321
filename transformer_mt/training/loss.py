"""Label-smoothed cross-entropy over non-pad target tokens (Vaswani et al., 2017, section 5.4).

With smoothing epsilon and vocabulary size V, the target distribution puts 1 - epsilon on the
reference token and spreads epsilon uniformly over all V classes (the `F.cross_entropy`
`label_smoothing` convention, so the two agree exactly):

    loss_t = (1 - epsilon) * -log p(y_t) + epsilon * mean_v -log p(v)

The functions here return *sums* over non-pad tokens, not means: the trainer divides by the
token count of the whole accumulated update (all micro-batches, all ranks), so an update's
gradient does not depend on how its tokens were split into batches.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass
class LossSums:
    """Summed losses of one batch; divide by `n_tokens` (or a larger total) for means.

    Attributes:
        loss: label-smoothed loss summed over non-pad tokens, a scalar tensor (differentiable).
        nll: negative log-likelihood of the references summed over the same tokens (detached).
        n_tokens: number of non-pad target tokens.
    """

    loss: torch.Tensor
    nll: torch.Tensor
    n_tokens: int


def label_smoothed_loss(
    logits: torch.Tensor, tgt_out_ids: torch.Tensor, epsilon: float, pad_id: int
) -> LossSums:
    """Sum the label-smoothed loss and the NLL over target positions that are not padding.

    Args:
        logits: (B, T, V) any float dtype; computed in float32 for a stable log-softmax.
        tgt_out_ids: (B, T) long, the references (decoder input shifted left, ending with EOS).
        epsilon: label smoothing in [0, 1).
        pad_id: positions holding this id contribute nothing.

    Returns:
        LossSums with sums over the non-pad positions.
    """
    log_probs = F.log_softmax(logits.float(), dim=-1)  # (B, T, V)
    keep = tgt_out_ids.ne(pad_id)  # (B, T) True at real target tokens
    nll = -log_probs.gather(-1, tgt_out_ids.unsqueeze(-1)).squeeze(-1)  # (B, T)
    smooth = -log_probs.mean(dim=-1)  # (B, T) cross-entropy against the uniform distribution
    per_token = (1.0 - epsilon) * nll + epsilon * smooth
    zero = per_token.new_zeros(())
    return LossSums(
        loss=torch.where(keep, per_token, zero).sum(),
        nll=torch.where(keep, nll, zero).sum().detach(),
        n_tokens=int(keep.sum()),
    )


def perplexity(nll_per_token: float) -> float:
    """exp of the mean NLL in nats, capped so a diverging run logs a number, not an overflow."""
    return math.exp(min(nll_per_token, 100.0))
