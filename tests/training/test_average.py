"""`tmt average`: never writes over a run's own checkpoints or an input, checks N, says when
fewer checkpoints exist than asked for, and leaves an existing output whole when it fails."""

from __future__ import annotations

import os

import pytest
import torch

from transformer_mt import artifacts, run_layout
from transformer_mt.artifacts import Checkpoint, TrainingState
from transformer_mt.cli import main
from transformer_mt.errors import TmtError
from transformer_mt.training import checkpoints

from ..conftest import save_tiny_checkpoint


def state(value: float, step: int) -> Checkpoint:
    """A checkpoint a run can resume from (its training state is empty but complete)."""
    return Checkpoint(
        model={"w": torch.full((2, 3), value), "count": torch.tensor(step)},
        config={},
        tokenizers={"src": b"s", "tgt": b"t"},
        step=step,
        training=TrainingState({"state": {}}, {}, [], {"epoch": 0, "batch_index": 0}, None, 0, {}),
    )


@pytest.fixture
def run(tmp_path):
    """A run directory with last.pt, best.pt and two periodic checkpoints (w = 1 and 3)."""
    directory = tmp_path / "run" / "checkpoints"
    for step, value in [(100, 1.0), (200, 3.0)]:
        artifacts.save_checkpoint(state(value, step), directory / run_layout.periodic_name(step))
    artifacts.save_checkpoint(state(3.0, 200), directory / "last.pt")
    artifacts.save_checkpoint(state(1.0, 100), directory / "best.pt")
    return tmp_path / "run"


@pytest.mark.parametrize("name", ["last.pt", "best.pt", "step_00000200.pt", "step_00000300.pt"])
def test_refuses_the_runs_own_checkpoint_names(run, capsys, name):
    out = run / "checkpoints" / name
    before = out.read_bytes() if out.exists() else None
    assert main(["average", str(run), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert (
        err.startswith(f"error: {out}: is a training checkpoint of {run}") and err.count("\n") == 1
    )
    assert "which training reads back; write elsewhere" in err
    assert (out.read_bytes() if out.exists() else None) == before
    assert artifacts.load_checkpoint(run / "checkpoints" / "last.pt").training is not None


def test_refuses_an_input_file_even_through_a_link(tmp_path):
    a, b = tmp_path / "a.pt", tmp_path / "b.pt"
    artifacts.save_checkpoint(state(1.0, 1), a)
    artifacts.save_checkpoint(state(2.0, 2), b)
    link = tmp_path / "link.pt"
    link.symlink_to(a)
    before = a.read_bytes()
    for out in (a, link):
        with pytest.raises(TmtError, match=f"{out}: is the input checkpoint itself"):
            checkpoints.resolve_average_inputs(
                [a, b], last=1, out=out
            )  # also an input --last drops
    assert a.read_bytes() == before
    with pytest.raises(TmtError, match="is a directory"):
        checkpoints.resolve_average_inputs([a, b], last=None, out=tmp_path)


@pytest.mark.parametrize("last", [0, -1])
def test_count_below_one_is_refused(run, tmp_path, capsys, last):
    out = tmp_path / "avg.pt"
    assert main(["average", str(run), "--last", str(last), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert (
        err == f"error: cannot average the newest {last} checkpoints: the count must be 1 or more\n"
    )
    assert not out.exists()


def test_fewer_checkpoints_than_asked_averages_them_with_a_warning(run, tmp_path, capsys):
    out = tmp_path / "avg.pt"
    assert main(["average", str(run), "--last", "5", "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "warning: averaging 2 checkpoints: only 2 of the 5 asked for exist" in err
    averaged = artifacts.load_checkpoint(out)
    assert torch.equal(averaged.model["w"], torch.full((2, 3), 2.0))
    assert [p.rsplit("/", 1)[-1] for p in averaged.averaged_from] == [
        "step_00000100.pt",
        "step_00000200.pt",
    ]
    assert main(["average", str(run), "--last", "2", "--out", str(out)]) == 0
    assert "warning" not in capsys.readouterr().err


def test_last_takes_the_newest_checkpoints(run, tmp_path):
    out = tmp_path / "avg.pt"
    assert main(["average", str(run), "--last", "1", "--out", str(out)]) == 0
    averaged = artifacts.load_checkpoint(out)
    assert torch.equal(averaged.model["w"], torch.full((2, 3), 3.0))
    assert [p.rsplit("/", 1)[-1] for p in averaged.averaged_from] == ["step_00000200.pt"]


def test_failed_write_leaves_the_existing_output_whole(run, tmp_path, monkeypatch, capsys):
    out = tmp_path / "avg.pt"
    assert main(["average", str(run), "--last", "1", "--out", str(out)]) == 0
    before = out.read_bytes()
    capsys.readouterr()

    def full_disk(obj, f):
        f.write(b"partial")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(torch, "save", full_disk)
    assert main(["average", str(run), "--last", "2", "--out", str(out)]) == 1  # the machine's
    err = capsys.readouterr().err
    assert err.startswith(f"error: {out}: ") and err.count("\n") == 1
    assert "No space left on device" in err
    assert out.read_bytes() == before
    assert set(os.listdir(tmp_path)) == {"run", "avg.pt"}  # no temporary left behind


def test_checkpoints_of_another_model_are_refused_in_one_line(tmp_path, capsys):
    """Sinusoidal and rotary positions: the same parameters, different models."""
    one = save_tiny_checkpoint(tmp_path / "one")
    other = save_tiny_checkpoint(tmp_path / "other", positions="rope")
    out = tmp_path / "avg.pt"
    assert main(["average", str(one), str(other), "--out", str(out)]) == 2
    assert capsys.readouterr().err == (
        f"error: {other}: another model than {one} (differs in model.positions); average "
        "checkpoints of one model\n"
    )
    assert not out.exists() and sorted(os.listdir(tmp_path)) == ["one", "other"]


def test_a_directory_without_checkpoints_beside_others_is_refused(run, tmp_path, capsys):
    """Not left out in silence: the user meant to average two runs."""
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["average", str(run), str(empty), "--out", str(tmp_path / "avg.pt")]) == 2
    assert capsys.readouterr().err == (
        f"error: {empty}: no periodic checkpoints (step_*.pt) in it\n"
    )


def test_a_checkpoint_given_twice_is_refused(run, tmp_path, capsys):
    step = run / "checkpoints" / run_layout.periodic_name(100)
    assert main(["average", str(run), str(step), "--out", str(tmp_path / "avg.pt")]) == 2
    assert capsys.readouterr().err == (
        f"error: {step}: given twice (also as {step}); average each once\n"
    )


def test_a_hard_link_to_a_checkpoint_given_is_the_same_checkpoint(run, tmp_path, capsys):
    step = run / "checkpoints" / run_layout.periodic_name(100)
    link = tmp_path / "another_name.pt"
    os.link(step, link)
    assert main(["average", str(step), str(link), "--out", str(tmp_path / "avg.pt")]) == 2
    assert capsys.readouterr().err == (
        f"error: {link}: given twice (also as {step}); average each once\n"
    )


def test_an_output_name_ending_in_a_slash_is_a_folder(run, tmp_path, capsys):
    out = f"{tmp_path / 'new'}/"
    assert main(["average", str(run), "--out", out]) == 2
    assert capsys.readouterr().err == (
        f"error: {out}: names a directory, not a file; give a file name to write\n"
    )
    assert not (tmp_path / "new").exists()


def test_weights_of_another_kind_are_refused(tmp_path, capsys):
    """An integer tensor where the other checkpoint has a float one: the sum would take it."""
    floats, integers = tmp_path / "f.pt", tmp_path / "i.pt"
    artifacts.save_checkpoint(state(1.0, 1), floats)
    odd = state(2.0, 2)
    odd.model["w"] = torch.full((2, 3), 2)
    artifacts.save_checkpoint(odd, integers)
    assert main(["average", str(floats), str(integers), "--out", str(tmp_path / "a.pt")]) == 2
    assert capsys.readouterr().err == (
        f"error: {integers}: w is int64 and float32 in {floats}; cannot average\n"
    )


def test_a_copy_of_a_checkpoint_given_beside_it_is_refused(run, tmp_path, capsys):
    """best.pt is a copy of a step file: averaged with it, that step counted twice."""
    directory = run / "checkpoints"
    step = directory / run_layout.periodic_name(100)
    args = ["average", str(directory / "step_00000200.pt"), str(step), str(directory / "best.pt")]
    assert main([*args, "--out", str(tmp_path / "avg.pt")]) == 2
    assert capsys.readouterr().err == (
        f"error: {directory / 'best.pt'}: the same weights as {step} (a copy, as best.pt and "
        "last.pt are of a step_*.pt), which would count twice; average each once\n"
    )
    assert not (tmp_path / "avg.pt").exists()
    other = state(5.0, 100)  # the same step, other weights: not a copy
    artifacts.save_checkpoint(other, tmp_path / "other.pt")
    assert main([*args[:3], str(tmp_path / "other.pt"), "--out", str(tmp_path / "avg.pt")]) == 0
