"""Early stopping counts a validation that only equals the best as one that did not beat it."""

from transformer_mt.training.early_stopping import EarlyStopping


def test_a_tie_with_the_best_is_not_an_improvement():
    stopping = EarlyStopping(patience=2)
    assert stopping.record(30.0)
    assert not stopping.record(30.0)
    assert (stopping.best_score, stopping.bad_validations) == (30.0, 1)
    assert not stopping.record(29.0) and stopping.exhausted
    assert stopping.record(30.5) and stopping.bad_validations == 0 and not stopping.exhausted


def test_patience_zero_never_stops():
    stopping = EarlyStopping(patience=0)
    for score in (3.0, 2.0, 1.0, 0.0):
        stopping.record(score)
    assert stopping.bad_validations == 3 and not stopping.exhausted
