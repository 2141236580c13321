"""model/dropout.py against torch.nn.Dropout's contract: keep rate, scale, gradient, modes."""

import pytest
import torch
from torch.testing import assert_close

from transformer_mt.model.dropout import Dropout, dropout


@pytest.mark.parametrize("p", [0.1, 0.3])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_keep_rate_and_scale_match_torch_dropout(p, dtype):
    torch.manual_seed(0)
    x = torch.rand(64, 33, 100, dtype=dtype) + 1.0  # no zeros of its own; odd size: a last,
    y = dropout(x, p, training=True)  # partly used 64-bit draw
    kept = y != 0
    n = x.numel()
    rate = kept.double().mean().item()
    assert abs(rate - (1 - p)) < 4 * ((p * (1 - p) / n) ** 0.5)  # 4 standard deviations
    # Every one of the four 16-bit lanes of a draw keeps at the same rate (a biased top bit
    # would show in one of them).
    for lane in range(4):
        lane_rate = kept.reshape(-1)[lane::4].double().mean().item()
        assert abs(lane_rate - (1 - p)) < 4 * ((p * (1 - p) / (n / 4)) ** 0.5)
    # Kept elements are scaled by 1 / (1 - p) in the input's dtype, as by torch.nn.Dropout on
    # the CPU; the two agree to the dtype's rounding.
    tol = 1e-5 if dtype == torch.float32 else 1e-2
    reference = torch.nn.functional.dropout(x, p, training=True)
    ours, theirs = (out[out != 0].float() / x[out != 0].float() for out in (y, reference))
    assert_close(ours, torch.full_like(ours, 1 / (1 - p)), rtol=tol, atol=0)
    assert_close(theirs, torch.full_like(theirs, 1 / (1 - p)), rtol=tol, atol=0)


def test_gradient_is_the_mask_times_the_scale():
    torch.manual_seed(1)
    x = torch.randn(7, 9, requires_grad=True)
    y = dropout(x, 0.25, training=True)
    y.sum().backward()
    scale = 65536 / (65536 - round(0.25 * 65536))
    assert_close(x.grad, (y != 0).float() * scale)
    assert_close(y, x.detach() * x.grad)


def test_eval_mode_and_zero_p_are_identity():
    x = torch.randn(5, 6)
    module = Dropout(0.5).eval()
    assert module(x) is x
    assert dropout(x, 0.0, training=True) is x


def test_masks_follow_the_global_seed():
    x = torch.randn(11, 13)
    module = Dropout(0.3).train()
    torch.manual_seed(5)
    first = module(x)
    torch.manual_seed(5)
    assert torch.equal(module(x), first)
    assert not torch.equal(module(x), first)


def test_a_rate_within_reach_of_one_keeps_one_level():
    """p = 0.9999999 rounds to all 65536 levels: one is kept (it divided by zero)."""
    torch.manual_seed(0)
    y = dropout(torch.ones(1 << 20), 0.9999999, training=True)
    assert torch.isfinite(y).all() and 0 < int((y != 0).sum()) < 64
    assert set(y.unique().tolist()) <= {0.0, 65536.0}
