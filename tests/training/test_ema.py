"""The exponential moving average of the weights (train.ema_decay)."""

import pytest
import torch

from transformer_mt.training.ema import WeightAverage


def moved_once(decay: float) -> tuple[torch.nn.Linear, WeightAverage, torch.Tensor]:
    """A model, its average with `decay`, and its first weights, after one update that moved
    the weights by 2."""
    model = torch.nn.Linear(2, 2)
    ema = WeightAverage(model, decay=decay)
    start = model.weight.detach().clone()
    with torch.no_grad():
        model.weight.add_(2.0)
    ema.update(model)
    return model, ema, start


@pytest.mark.parametrize("decay", [0.5, 0.9])
def test_each_update_moves_the_average_by_one_minus_decay(decay):
    """With 0.9, `decay` and `1 - decay` differ: the average keeps 90% of itself and takes
    10% of the new weights."""
    _, ema, start = moved_once(decay)
    torch.testing.assert_close(ema.shadow["weight"], start + 2.0 * (1.0 - decay))


def test_ema_tracks_weights_and_restores_after_use():
    model, ema, start = moved_once(0.5)
    with ema.applied_to(model):
        torch.testing.assert_close(model.weight.detach(), start + 1.0)
    torch.testing.assert_close(model.weight.detach(), start + 2.0)
    restored = WeightAverage(model, decay=0.5)
    restored.load_state_dict(ema.state_dict(model))
    assert torch.equal(restored.shadow["weight"], ema.shadow["weight"])
