import math

import pytest

from transformer_mt.config import TrainConfig
from transformer_mt.training.schedule import inverse_sqrt_lr, learning_rate, linear_lr, noam_lr


def test_noam_known_values():
    # paper: d_model 512, warmup 4000; peak at the end of warm-up
    peak = 512**-0.5 * 4000**-0.5
    assert noam_lr(4000, 512, 4000) == pytest.approx(peak)
    assert noam_lr(1, 512, 4000) == pytest.approx(512**-0.5 * 4000**-1.5)
    assert noam_lr(2000, 512, 4000) == pytest.approx(peak / 2)  # linear warm-up
    assert noam_lr(16000, 512, 4000) == pytest.approx(peak / 2)  # inverse sqrt decay
    assert noam_lr(4000, 512, 4000, noam_scale=2.0) == pytest.approx(2 * peak)
    assert noam_lr(0, 512, 4000) == noam_lr(1, 512, 4000)  # never zero or infinite


def test_inverse_sqrt_known_values():
    lr, init = 5e-4, 1e-7
    assert inverse_sqrt_lr(4000, lr, 4000, init) == pytest.approx(lr)
    assert inverse_sqrt_lr(2000, lr, 4000, init) == pytest.approx(init + (lr - init) / 2)
    assert inverse_sqrt_lr(16000, lr, 4000, init) == pytest.approx(lr / 2)
    assert inverse_sqrt_lr(1, lr, 0, init) == pytest.approx(lr)
    assert inverse_sqrt_lr(4, lr, 0, init) == pytest.approx(lr / 2)


def test_linear_known_values():
    lr, init = 1e-3, 1e-7
    assert linear_lr(50, lr, 100, init, 1100) == pytest.approx(init + (lr - init) / 2)
    assert linear_lr(100, lr, 100, init, 1100) == pytest.approx(lr)
    assert linear_lr(600, lr, 100, init, 1100) == pytest.approx(lr / 2)
    assert linear_lr(1100, lr, 100, init, 1100) == 0.0
    assert linear_lr(1200, lr, 100, init, 1100) == 0.0  # never negative past the end


def test_schedule_is_continuous_and_peaks_at_warmup():
    values = [inverse_sqrt_lr(s, 1e-3, 100, 0.0) for s in range(1, 400)]
    assert max(values) == pytest.approx(1e-3)
    assert values.index(max(values)) == 99
    assert all(math.isfinite(v) and v > 0 for v in values)


def test_learning_rate_dispatches_on_config():
    cfg = TrainConfig(schedule="noam", warmup_steps=10, max_steps=100, noam_scale=2.0)
    assert learning_rate(10, cfg, 64) == pytest.approx(2.0 * 64**-0.5 * 10**-0.5)
    cfg = TrainConfig(schedule="inverse_sqrt", lr=1e-3, warmup_steps=10, max_steps=100)
    assert learning_rate(40, cfg, 64) == pytest.approx(5e-4)
    cfg = TrainConfig(schedule="linear", lr=1e-3, warmup_steps=10, max_steps=110)
    assert learning_rate(60, cfg, 64) == pytest.approx(5e-4)
