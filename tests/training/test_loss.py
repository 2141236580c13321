import math

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

from transformer_mt.training import loss as loss_module
from transformer_mt.training.loss import (
    fused_label_smoothed_loss,
    label_smoothed_loss,
    perplexity,
)

PAD = 0


def test_matches_hand_computation():
    # one token, V = 3, logits chosen so the probabilities are easy to write down
    logits = torch.log(torch.tensor([[[0.5, 0.25, 0.25]]]))
    target = torch.tensor([[1]])
    eps = 0.1
    sums = label_smoothed_loss(logits, target, eps, pad_id=PAD)
    nll = -math.log(0.25)
    uniform = -(math.log(0.5) + 2 * math.log(0.25)) / 3
    assert sums.n_tokens == 1
    assert sums.nll.item() == pytest.approx(nll)
    assert sums.loss.item() == pytest.approx((1 - eps) * nll + eps * uniform)


@pytest.mark.parametrize("eps", [0.0, 0.1, 0.3])
def test_matches_torch_cross_entropy_ignoring_pad(eps):
    logits = torch.randn(3, 5, 11)
    target = torch.randint(1, 11, (3, 5))
    target[0, 3:] = PAD
    target[2, 1:] = PAD
    sums = label_smoothed_loss(logits, target, eps, pad_id=PAD)
    ref = F.cross_entropy(
        logits.reshape(-1, 11),
        target.reshape(-1),
        ignore_index=PAD,
        label_smoothing=eps,
        reduction="sum",
    )
    nll = F.cross_entropy(
        logits.reshape(-1, 11), target.reshape(-1), ignore_index=PAD, reduction="sum"
    )
    assert sums.n_tokens == int(target.ne(PAD).sum())
    torch.testing.assert_close(sums.loss, ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(sums.nll, nll, rtol=1e-5, atol=1e-5)


def test_pad_positions_do_not_change_loss_or_gradient():
    logits = torch.randn(2, 4, 7, requires_grad=True)
    target = torch.tensor([[3, 4, 0, 0], [5, 6, 2, 0]])
    label_smoothed_loss(logits, target, 0.1, PAD).loss.backward()
    assert torch.all(logits.grad[0, 2:] == 0) and torch.all(logits.grad[1, 3] == 0)


def test_perplexity_is_capped():
    assert perplexity(0.0) == 1.0
    assert math.isfinite(perplexity(1e6))


@pytest.mark.parametrize(
    ("dtype", "tol"), [(torch.float32, 1e-5), (torch.bfloat16, 1e-2), (torch.float64, 1e-10)]
)
@pytest.mark.parametrize("eps", [0.0, 0.1, 0.3])
@pytest.mark.parametrize("chunk_rows", [None, 1, 4])  # None: one block; 4: 18 rows, last short
def test_fused_loss_equals_plain_loss_and_its_gradient(dtype, tol, eps, chunk_rows, monkeypatch):
    if chunk_rows is not None:
        monkeypatch.setattr(loss_module, "CHUNK_ELEMENTS", chunk_rows * 50)
    torch.manual_seed(0)
    base = torch.randn(3, 6, 50, dtype=torch.float64) * 4
    target = torch.randint(1, 50, (3, 6))
    target[0, 4:] = PAD
    target[2, 1:] = PAD
    plain_logits = base.to(dtype).requires_grad_()
    fused_logits = base.to(dtype).requires_grad_()
    plain = label_smoothed_loss(plain_logits, target, eps, PAD)
    fused = fused_label_smoothed_loss(fused_logits, target, eps, PAD)
    assert fused.n_tokens == plain.n_tokens == int(target.ne(PAD).sum())
    assert fused.loss.dtype == plain.loss.dtype
    assert_close(fused.loss, plain.loss, rtol=1e-6, atol=1e-6 * plain.loss.abs().item())
    assert_close(fused.nll, plain.nll, rtol=1e-6, atol=1e-6 * plain.nll.abs().item())
    (plain.loss * 0.37).backward()
    (fused.loss * 0.37).backward()
    assert fused_logits.grad.dtype == dtype
    assert_close(fused_logits.grad, plain_logits.grad, rtol=tol, atol=tol * 0.37)
    assert torch.all(fused_logits.grad[2, 1:] == 0)  # padding rows get no gradient


def test_fused_loss_without_gradient_matches():
    logits = torch.randn(2, 5, 9)
    target = torch.randint(1, 9, (2, 5))
    with torch.no_grad():
        fused = fused_label_smoothed_loss(logits, target, 0.1, PAD)
    torch.testing.assert_close(fused.loss, label_smoothed_loss(logits, target, 0.1, PAD).loss)


def test_fused_loss_second_backward_fails_rather_than_scaling_twice():
    # The backward scales its saved gradient in place; autograd's version check must refuse a
    # second pass over it instead of returning the gradient scaled twice.
    logits = torch.randn(2, 5, 9, requires_grad=True)
    target = torch.randint(1, 9, (2, 5))
    fused = fused_label_smoothed_loss(logits, target, 0.1, PAD)
    fused.loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        fused.loss.backward()
