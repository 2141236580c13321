import os

import pytest
import torch

from transformer_mt.errors import TmtError
from transformer_mt.training import checkpoint as ckpt
from transformer_mt.training.ema import WeightAverage


def state(value: float, step: int = 1) -> dict:
    return {
        "model": {"w": torch.full((2, 3), value), "count": torch.tensor(step)},
        "config": {},
        "step": step,
        "tokenizers": {"src": b"s", "tgt": b"t"},
        "optimizer": {"state": {}},
    }


def test_save_then_load_round_trips(tmp_path):
    path = tmp_path / "sub" / "a.pt"
    ckpt.save_checkpoint(state(1.0), path)
    loaded = ckpt.load_checkpoint(path)
    assert torch.equal(loaded["model"]["w"], torch.ones(2, 3))
    assert loaded["tokenizers"]["src"] == b"s"
    assert os.listdir(path.parent) == ["a.pt"]  # no temporary left behind


@pytest.mark.parametrize("target", ["save", "replace"])
def test_crash_during_save_keeps_previous_checkpoint(tmp_path, monkeypatch, target):
    path = tmp_path / "last.pt"
    ckpt.save_checkpoint(state(1.0), path)

    def crash(*args, **kwargs):
        raise OSError("disk on fire")

    if target == "save":

        def partial_then_crash(obj, f, *args, **kwargs):
            f.write(b"half a checkpoint")  # a torn write into the temporary file
            raise OSError("disk on fire")

        monkeypatch.setattr(ckpt.torch, "save", partial_then_crash)
    else:
        monkeypatch.setattr(ckpt.os, "replace", crash)
    with pytest.raises(OSError, match="disk on fire"):
        ckpt.save_checkpoint(state(2.0), path)
    monkeypatch.undo()
    assert torch.equal(ckpt.load_checkpoint(path)["model"]["w"], torch.ones(2, 3))
    assert os.listdir(tmp_path) == ["last.pt"]


def test_load_errors_are_friendly(tmp_path):
    with pytest.raises(TmtError, match="checkpoint not found"):
        ckpt.load_checkpoint(tmp_path / "missing.pt")
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"not a zip file at all")
    with pytest.raises(TmtError, match="not a readable checkpoint"):
        ckpt.load_checkpoint(bad)
    truncated = tmp_path / "truncated.pt"
    ckpt.save_checkpoint(state(1.0), truncated)
    truncated.write_bytes(truncated.read_bytes()[:100])
    with pytest.raises(TmtError, match="not a readable checkpoint"):
        ckpt.load_checkpoint(truncated)
    foreign = tmp_path / "foreign.pt"
    torch.save({"weights": torch.ones(1)}, foreign)
    with pytest.raises(TmtError, match="not a transformer_mt checkpoint"):
        ckpt.load_checkpoint(foreign)


def test_link_makes_independent_names(tmp_path):
    a, b = tmp_path / "a.pt", tmp_path / "b.pt"
    ckpt.save_checkpoint(state(1.0), a)
    ckpt.link_checkpoint(a, b)
    ckpt.save_checkpoint(state(5.0), a)  # replacing one name leaves the other alone
    assert torch.equal(ckpt.load_checkpoint(b)["model"]["w"], torch.ones(2, 3))


def test_periodic_listing_pruning_and_average(tmp_path):
    run = tmp_path / "run"
    for step, value in [(100, 1.0), (200, 2.0), (300, 6.0), (1000, 7.0)]:
        ckpt.save_checkpoint(state(value, step), run / "checkpoints" / ckpt.periodic_name(step))
    ckpt.save_checkpoint(state(99.0), run / "checkpoints" / "best.pt")
    names = [p.name for p in ckpt.periodic_checkpoints(run)]
    assert names == ["step_00000100.pt", "step_00000200.pt", "step_00000300.pt", "step_00001000.pt"]

    paths = ckpt.resolve_average_inputs([run], last=3)
    averaged = ckpt.average_checkpoints(paths)
    assert torch.equal(averaged["model"]["w"], torch.full((2, 3), 5.0))
    assert torch.equal(averaged["model"]["count"], torch.tensor(1000))  # ints from the newest
    assert averaged["step"] == 1000 and "optimizer" not in averaged

    deleted = ckpt.prune_checkpoints(run / "checkpoints", keep_last=2)
    assert [p.name for p in deleted] == ["step_00000100.pt", "step_00000200.pt"]
    assert (run / "checkpoints" / "best.pt").exists()
    with pytest.raises(TmtError, match="no such checkpoint"):
        ckpt.resolve_average_inputs([tmp_path / "nope"], last=2)
    with pytest.raises(TmtError, match="no periodic checkpoints"):
        ckpt.resolve_average_inputs([tmp_path], last=2)


def test_average_refuses_different_parameter_sets(tmp_path):
    a, b = tmp_path / "a.pt", tmp_path / "b.pt"
    ckpt.save_checkpoint(state(1.0), a)
    other = state(1.0)
    other["model"]["extra"] = torch.ones(1)
    ckpt.save_checkpoint(other, b)
    with pytest.raises(TmtError, match="parameters differ"):
        ckpt.average_checkpoints([a, b])


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
