"""A full disk while training saves a checkpoint: one line, exit 1, nothing half-written, the
previous checkpoints whole, and the run resumes once there is room."""

from __future__ import annotations

import errno
import os
import re
import shutil
from contextlib import contextmanager

import pytest

from transformer_mt import artifacts
from transformer_mt.artifacts import load_checkpoint
from transformer_mt.cli import main
from transformer_mt.training import metrics as metrics_module
from transformer_mt.training.metrics import read_metrics

NO_SPACE = os.strerror(errno.ENOSPC)


class FullDisk:
    """A file that takes `room` bytes (or characters), then fails as a full disk does."""

    def __init__(self, f, room: int) -> None:
        self.f, self.room = f, room

    def write(self, data) -> int:
        if len(data) > self.room:
            self.f.write(data[: self.room])
            self.room = 0
            raise OSError(errno.ENOSPC, NO_SPACE)
        self.room -= len(data)
        return self.f.write(data)

    def flush(self) -> None:
        self.f.flush()

    def close(self) -> None:
        self.f.close()


def fill_the_disk(monkeypatch, how: str) -> None:
    """From now on the first write of a checkpoint ("save") or the copy to last.pt fails."""
    if how == "save":
        atomic_open = artifacts.atomic_open

        @contextmanager
        def full_disk_open(path, mode="w", durable=False):
            with atomic_open(path, mode, durable) as f:
                yield FullDisk(f, room=5000)

        monkeypatch.setattr(artifacts, "atomic_open", full_disk_open)
    else:
        copyfile = shutil.copyfile

        def full_disk_copy(src, dst):
            if ".last.pt" not in str(dst):
                return copyfile(src, dst)
            with open(dst, "wb") as f:
                f.write(b"half a checkpoint")
            raise OSError(errno.ENOSPC, NO_SPACE, str(src), None, str(dst))

        monkeypatch.setattr(artifacts.shutil, "copyfile", full_disk_copy)


@pytest.mark.parametrize("how", ["save", "copy"])
def test_a_full_disk_while_saving_is_one_line_and_keeps_the_checkpoints(
    tiny_experiment, tmp_path, monkeypatch, capsys, how
):
    run_dir = tmp_path / "run"
    checkpoints = run_dir / "checkpoints"
    args = ["train", "--config", str(tiny_experiment), "--run-dir", str(run_dir), "--set"]
    assert main([*args, "train.max_steps=4"]) == 0
    capsys.readouterr()
    fill_the_disk(monkeypatch, how)
    assert main([*args, "train.max_steps=8"]) == 1  # the machine's failure, not the user's
    err = capsys.readouterr().err
    failed = "last.pt" if how == "copy" else "(best.pt|step_00000008.pt)"
    assert re.fullmatch(rf"error: {re.escape(str(checkpoints))}/{failed}: .*{NO_SPACE}.*\n", err)
    assert load_checkpoint(checkpoints / "last.pt").step == 4  # the previous save, whole
    assert not [p.name for p in checkpoints.iterdir() if p.name.startswith(".")]
    monkeypatch.undo()  # room again: the run goes on from step 4
    assert main([*args, "train.max_steps=8"]) == 0
    assert load_checkpoint(checkpoints / "last.pt").step == 8


def test_a_full_disk_while_logging_metrics_names_the_log(
    tiny_experiment, tmp_path, monkeypatch, capsys
):
    run_dir = tmp_path / "run"
    args = ["train", "--config", str(tiny_experiment), "--run-dir", str(run_dir), "--set"]
    assert main([*args, "train.max_steps=4"]) == 0
    capsys.readouterr()

    def full_disk_open(path, mode, encoding):
        return FullDisk(open(path, mode, encoding=encoding), room=300)

    monkeypatch.setattr(metrics_module, "open", full_disk_open, raising=False)
    assert main([*args, "train.max_steps=8"]) == 1
    metrics = run_dir / "metrics.jsonl"
    assert capsys.readouterr().err == f"error: {metrics}: {NO_SPACE}\n"
    assert load_checkpoint(run_dir / "checkpoints/last.pt").step == 4
    monkeypatch.undo()
    assert main([*args, "train.max_steps=8"]) == 0  # the torn last row is dropped on resuming
    assert [row["step"] for row in read_metrics(metrics) if row["kind"] == "train"] == [
        *range(1, 9)
    ]
