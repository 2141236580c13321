"""Label-smoothed cross-entropy over non-pad target tokens (Vaswani et al., 2017, section 5.4).

With smoothing epsilon and vocabulary size V, the target distribution puts 1 - epsilon on the
reference token and spreads epsilon uniformly over all V classes (the `F.cross_entropy`
`label_smoothing` convention, so the two agree exactly):

    loss_t = (1 - epsilon) * -log p(y_t) + epsilon * mean_v -log p(v)

`label_smoothed_loss` is the plain autograd formula; `fused_label_smoothed_loss`, which the
trainer calls, computes the same sums and their gradient in one pass over the logits (see there).
Both return *sums* over non-pad tokens, not means: the trainer divides by the
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
        n_tokens: number of non-pad target tokens, a () int64 tensor on the logits' device
            (counted without waiting for the device).
    """

    loss: torch.Tensor
    nll: torch.Tensor
    n_tokens: torch.Tensor


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
        n_tokens=keep.sum(),
    )


def fused_label_smoothed_loss(
    logits: torch.Tensor, tgt_out_ids: torch.Tensor, epsilon: float, pad_id: int
) -> LossSums:
    """`label_smoothed_loss` with the gradient computed in the forward pass.

    The gradient of loss_t with respect to the logits is known in closed form,

        d loss_t / d z = softmax(z) - (1 - epsilon) * onehot(y_t) - epsilon / V,

    so the forward pass turns a float32 copy of the logits into that gradient in place, a block
    of rows at a time (CHUNK_ELEMENTS), and keeps it in the logits' dtype; the backward pass
    only scales it. That replaces autograd's log-softmax output, the scatter of the gather's
    backward and the sum of three (N, V) gradients, and halves what the loss holds until the
    backward under bf16 (measured in docs/results.md). `label_smoothed_loss` is its tested
    twin.
    """
    loss, nll, n_tokens = _FusedLabelSmoothedLoss.apply(logits, tgt_out_ids, epsilon, pad_id)
    return LossSums(loss=loss, nll=nll, n_tokens=n_tokens)


# Rows of the logits the fused loss converts to float32 at a time on a CPU: CHUNK_ELEMENTS / V
# of them. The passes over each block then run in cache (8 MiB in float32), and glibc serves a
# block this size from its heap instead of mapping, and page-faulting, fresh memory every step.
# A GPU takes all rows at once: blocks would only multiply its kernel launches (32 blocks of
# about ten kernels each at 8,192 tokens), and each row's figures are the same either way.
CHUNK_ELEMENTS = 2**21


class _FusedLabelSmoothedLoss(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: torch.autograd.function.FunctionCtx,
        logits: torch.Tensor,
        targets: torch.Tensor,
        epsilon: float,
        pad_id: int,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        vocab_size = logits.shape[-1]
        flat = logits.reshape(-1, vocab_size)  # (N, V)
        y = targets.reshape(-1, 1)  # (N, 1)
        keep = y.ne(pad_id)  # (N, 1)
        grad = torch.empty_like(flat) if ctx.needs_input_grad[0] else None
        nll = torch.empty(y.shape, dtype=torch.float32, device=y.device)
        smooth = torch.empty_like(nll)
        rows = max(1, flat.shape[0] if flat.is_cuda else CHUNK_ELEMENTS // vocab_size)
        for start in range(0, flat.shape[0], rows):
            part = slice(start, start + rows)
            z = flat[part].to(torch.float32, copy=True)  # (n, V), ours to modify
            exp_sum = _chunk_sums(z, y[part], keep[part], nll[part], smooth[part])
            if grad is not None:
                _chunk_gradient(z, exp_sum, y[part], keep[part], epsilon)
                grad[part] = z
        loss = ((1.0 - epsilon) * nll + epsilon * smooth).sum()
        if grad is not None:
            ctx.save_for_backward(grad.view(logits.shape))
        nll_sum, n_tokens = nll.sum(), keep.sum()
        ctx.mark_non_differentiable(nll_sum, n_tokens)
        return loss, nll_sum, n_tokens

    @staticmethod
    def backward(
        ctx: torch.autograd.function.FunctionCtx, grad_loss: torch.Tensor, *_: torch.Tensor
    ) -> tuple[torch.Tensor, None, None, None]:
        (grad,) = ctx.saved_tensors
        # Scaled in place: the gradient is ours, made for this one backward, and a fresh
        # (B, T, V) result costs its page faults at every update. A second backward through
        # the same graph (retain_graph) fails autograd's version check rather than reading it
        # scaled twice. A 0-dim float32 factor keeps grad's dtype and is applied in float32.
        return grad.mul_(grad_loss), None, None, None


def _chunk_sums(
    z: torch.Tensor, y: torch.Tensor, keep: torch.Tensor, nll: torch.Tensor, smooth: torch.Tensor
) -> torch.Tensor:
    """Write -log p(y) and mean_v -log p(v) of rows z (n, V) into nll and smooth (n, 1), zero on
    padding rows; leave exp(z - max) in z and return its row sums (n, 1)."""
    picked = z.gather(1, y)  # (n, 1) z_y
    mean = z.mean(dim=1, keepdim=True)
    top = z.amax(dim=1, keepdim=True)
    exp_sum = z.sub_(top).exp_().sum(dim=1, keepdim=True)
    log_sum = top + exp_sum.log()  # log-sum-exp: -log p(y) = lse - z_y, mean -log p = lse - mean
    nll.copy_(torch.where(keep, log_sum - picked, 0.0))
    smooth.copy_(torch.where(keep, log_sum - mean, 0.0))
    return exp_sum


def _chunk_gradient(
    z: torch.Tensor, exp_sum: torch.Tensor, y: torch.Tensor, keep: torch.Tensor, epsilon: float
) -> None:
    """Turn `_chunk_sums`' exp(z - max) rows (n, V) into d loss_t / d z in place; zero on
    padding rows."""
    vocab_size = z.shape[-1]
    z.mul_(keep / exp_sum).sub_(keep * (epsilon / vocab_size))
    z.scatter_add_(1, y, keep * -(1.0 - epsilon))


def perplexity(nll_per_token: float) -> float:
    """exp of the mean NLL in nats, capped so a diverging run logs a number, not an overflow."""
    return math.exp(min(nll_per_token, 100.0))
