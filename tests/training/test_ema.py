"""The exponential moving average of the weights (train.ema_decay)."""

import torch

from transformer_mt.training.ema import WeightAverage


def test_ema_tracks_weights_and_restores_after_use():
    model = torch.nn.Linear(2, 2)
    ema = WeightAverage(model, decay=0.5)
    start = model.weight.detach().clone()
    with torch.no_grad():
        model.weight.add_(2.0)
    ema.update(model)
    torch.testing.assert_close(ema.shadow["weight"], start + 1.0)
    with ema.applied_to(model):
        torch.testing.assert_close(model.weight.detach(), start + 1.0)
    torch.testing.assert_close(model.weight.detach(), start + 2.0)
    restored = WeightAverage(model, decay=0.5)
    restored.load_state_dict(ema.state_dict(model))
    assert torch.equal(restored.shadow["weight"], ema.shadow["weight"])


def test_each_update_moves_the_average_by_one_minus_decay():
    """With a decay other than 0.5, `decay` and `1 - decay` differ: the average keeps 90% of
    itself and takes 10% of the new weights."""
    model = torch.nn.Linear(2, 2)
    ema = WeightAverage(model, decay=0.9)
    start = model.weight.detach().clone()
    with torch.no_grad():
        model.weight.add_(2.0)
    ema.update(model)
    torch.testing.assert_close(ema.shadow["weight"], start + 0.2)
