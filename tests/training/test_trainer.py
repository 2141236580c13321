"""End-to-end training on a tiny corpus: run directory, exact resume, signals, non-finite loss,
checkpoint files that survive damage."""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from transformer_mt import artifacts, run_layout
from transformer_mt.artifacts import (
    load_checkpoint,
    load_for_inference,
    rank_position,
    stored_position,
)
from transformer_mt.checkpoint_average import average_checkpoints
from transformer_mt.cli import main
from transformer_mt.errors import TmtError
from transformer_mt.training import update as update_module
from transformer_mt.training.metrics import read_metrics
from transformer_mt.training.run import run_training
from transformer_mt.training.signals import StopRequests

from ..test_artifacts import LEGACY_TRAINER_KEYS
from .conftest import write_config, write_corpus

REPO = Path(__file__).resolve().parents[2]


def assert_same_training_state(a: dict, b: dict) -> None:
    assert a.step == b.step
    assert a.training.data_position == b.training.data_position
    assert a.model.keys() == b.model.keys()
    for name in a.model:
        assert torch.equal(a.model[name], b.model[name]), name
    opt_a, opt_b = a.training.optimizer, b.training.optimizer
    assert opt_a["param_groups"] == opt_b["param_groups"]
    for key, state in opt_a["state"].items():
        for name, value in state.items():
            assert torch.equal(value, opt_b["state"][key][name]), (key, name)


def test_cli_run_directory_loss_falls_and_translates(tiny_experiment, tmp_path):
    run_dir = tmp_path / "run"
    args = ["train", "--config", str(tiny_experiment), "--run-dir", str(run_dir)]
    assert main([*args, "--set", "train.max_steps=40", "train.valid_every=20"]) == 0
    names = {p.name for p in run_dir.iterdir()}
    assert {"config.yaml", "metrics.jsonl", "checkpoints"} <= names
    assert any(n.startswith("spm-") and n.endswith(".model") for n in names)
    ckpts = {p.name for p in (run_dir / "checkpoints").iterdir()}
    assert {"best.pt", "last.pt", "step_00000020.pt", "step_00000040.pt"} <= ckpts
    rows = read_metrics(run_dir / "metrics.jsonl")
    train = [r["loss"] for r in rows if r["kind"] == "train"]
    assert len(train) == 40 and sum(train[-5:]) / 5 < train[0] - 1.0  # the loss falls
    # The share of each row's time spent waiting for batches, measured: how small it is
    # depends on the machine's load (under 0.5 on a quiet one), so only its range is checked.
    assert all(0 < r["data_wait"] < 1 for r in rows if r["kind"] == "train")
    valid = [r for r in rows if r["kind"] == "valid"]
    assert [r["step"] for r in valid] == [20, 40] and valid[-1]["bleu"] is not None

    bundle = load_for_inference(run_dir / "checkpoints" / "best.pt", "cpu")
    assert not bundle.model.training and bundle.config.model.d_model == 32
    assert bundle.src_tokenizer.encode("der hund")

    out = tmp_path / "avg.pt"
    assert main(["average", str(run_dir), "--last", "2", "--out", str(out)]) == 0
    assert load_checkpoint(out).averaged_from[-1].endswith("step_00000040.pt")
    load_for_inference(out)
    assert main(["plot", str(run_dir), "--out", str(tmp_path / "curves.png")]) == 0
    assert (tmp_path / "curves.png").stat().st_size > 1000


@pytest.mark.parametrize("tokenizer", ["", "bpe_dropout: 0.1"])
def test_interrupted_and_resumed_run_matches_uninterrupted(tmp_path, tokenizer):
    """Stop at step 6 and resume to 10 (as after SIGINT/SIGTERM); restart from the step-4
    checkpoint (as after SIGKILL). Dropout, accumulation and epoch ends are all in play, and
    with BPE-dropout a new segmentation of the corpus every epoch."""
    write_corpus(tmp_path, n_train=120)
    config = str(write_config(tmp_path, train="update_freq: 2, keep_last: 10", tokenizer=tokenizer))
    full, part = tmp_path / "full", tmp_path / "part"
    assert run_training(config, str(full), []) == 0
    assert run_training(config, str(part), ["train.max_steps=6"]) == 0
    assert load_checkpoint(part / "checkpoints/last.pt").step == 6
    assert run_training(config, str(part), []) == 0
    expected = load_checkpoint(full / "checkpoints/last.pt")
    assert expected.training.data_position["epoch"] >= 1  # the run crossed an epoch boundary
    assert_same_training_state(load_checkpoint(part / "checkpoints/last.pt"), expected)

    killed = tmp_path / "killed" / "checkpoints"
    killed.mkdir(parents=True)
    shutil.copyfile(full / "checkpoints/step_00000004.pt", killed / "last.pt")
    assert run_training(config, str(killed.parent), []) == 0
    assert_same_training_state(load_checkpoint(killed / "last.pt"), expected)
    steps = [r["step"] for r in read_metrics(part / "metrics.jsonl") if r["kind"] == "train"]
    assert steps == list(range(1, 11))  # rows after the resume point are not duplicated


@pytest.mark.parametrize("workers", [0, 1])
def test_a_streamed_run_resumes_exactly(tmp_path, workers):
    """The test above with `data.streaming: true`, through `tmt train`: 120 pairs in shuffle
    buffers of 32, tokenized in the training process or in a worker. Resumed mid-chunk and
    after an epoch end, the run ends where an uninterrupted one does."""
    write_corpus(tmp_path, n_train=120)
    config = str(write_config(tmp_path, train="update_freq: 2, keep_last: 10"))
    streaming = ["data.streaming=true", "data.shuffle_buffer=32", f"data.workers={workers}"]
    full, part = tmp_path / "full", tmp_path / "part"
    assert main(["train", "--config", config, "--run-dir", str(full), "--set", *streaming]) == 0
    assert run_training(config, str(part), [*streaming, "train.max_steps=6"]) == 0
    assert run_training(config, str(part), streaming) == 0
    expected = load_checkpoint(full / "checkpoints/last.pt")
    assert expected.training.data_position["epoch"] >= 1
    assert set(expected.training.data_position) == {"epoch", "chunk", "batch_index", "world_size"}
    assert_same_training_state(load_checkpoint(part / "checkpoints/last.pt"), expected)

    killed = tmp_path / "killed" / "checkpoints"
    killed.mkdir(parents=True)
    shutil.copyfile(full / "checkpoints/step_00000004.pt", killed / "last.pt")
    assert run_training(config, str(killed.parent), streaming) == 0
    assert_same_training_state(load_checkpoint(killed / "last.pt"), expected)


def test_a_streamed_run_stops_at_the_end_of_its_epochs(tmp_path):
    write_corpus(tmp_path, n_train=60)
    config = str(write_config(tmp_path, train="max_steps: 1000, max_epochs: 1"))
    streaming = ["data.streaming=true", "data.shuffle_buffer=16"]
    assert run_training(config, str(tmp_path / "run"), streaming) == 0
    last = load_checkpoint(tmp_path / "run/checkpoints/last.pt")
    position = {"epoch": 1, "chunk": 0, "batch_index": 0, "world_size": 1}
    assert last.training.data_position == position  # at the next epoch's first batch
    assert 1 < last.step < 1000


def test_each_rank_gets_its_own_data_position_back():
    one = {"epoch": 1, "chunk": 2, "batch_index": 3, "world_size": 2}
    other = {"epoch": 1, "chunk": 0, "batch_index": 7, "world_size": 2}
    assert stored_position([one]) == one  # one process: the position itself
    stored = stored_position([one, other])
    assert [rank_position(stored, rank, 2) for rank in range(2)] == [one, other]
    # Another rank count: the position of the rank furthest behind, which the cursor maps.
    assert rank_position(stored, 0, 3) == rank_position(stored, 2, 3) == other
    assert rank_position({"epoch": 1, "batch_index": 3}, 1, 2) == {"epoch": 1, "batch_index": 3}


def test_a_checkpoint_in_the_old_trainer_layout_resumes_exactly(tmp_path):
    """last.pt rewritten key by key in the layout of the trainer's checkpoints before
    artifacts.py owned the format: the resumed run ends where an uninterrupted one does."""
    write_corpus(tmp_path, n_train=60)
    config = str(write_config(tmp_path, train="max_steps: 8"))
    full, part = tmp_path / "full", tmp_path / "part"
    assert run_training(config, str(full), []) == 0
    assert run_training(config, str(part), ["train.max_steps=4"]) == 0
    last = part / "checkpoints/last.pt"
    written = torch.load(last, weights_only=True)
    # the same keys in the same order, then the checksums that the old layout lacks
    assert tuple(written) == (
        *LEGACY_TRAINER_KEYS,
        "scored_on",
        "specials",
        "workdir",
        artifacts.CHECKSUMS_KEY,
    )
    torch.save({key: written[key] for key in LEGACY_TRAINER_KEYS}, last)
    assert run_training(config, str(part), []) == 0
    assert_same_training_state(load_checkpoint(last), load_checkpoint(full / "checkpoints/last.pt"))


def test_sigterm_saves_and_exits_143(tiny_experiment, tmp_path):
    run_dir = tmp_path / "run"
    cmd = [sys.executable, "-m", "transformer_mt", "train", "--config", str(tiny_experiment)]
    cmd += ["--run-dir", str(run_dir), "--set", "train.max_steps=100000", "train.valid_every=1000"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True)
    metrics = run_dir / "metrics.jsonl"
    deadline = time.monotonic() + 60
    while not (metrics.exists() and metrics.stat().st_size > 0):
        assert proc.poll() is None, proc.stderr.read()
        assert time.monotonic() < deadline, "training did not start"
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 143, stderr  # 128 + SIGTERM: `tmt train && ...` stops
    assert "SIGTERM: saved" in stderr
    state = load_checkpoint(run_dir / "checkpoints/last.pt")
    assert 1 <= state.step < 100000
    assert [r["step"] for r in read_metrics(metrics)][-1] <= state.step


def test_stop_exit_codes_are_the_shells():
    stop = StopRequests()
    stop.signum = signal.SIGINT
    assert (stop.name, stop.exit_code) == ("SIGINT", 130)
    stop.signum = signal.SIGTERM
    assert (stop.name, stop.exit_code) == ("SIGTERM", 143)
    stop.signum = signal.SIGHUP
    assert (stop.name, stop.exit_code) == ("SIGHUP", 129)


def test_a_caught_signal_is_acknowledged_at_once(caplog):
    """Seen only when the step or validation ended (minutes, for a long validation), a Ctrl-C
    had looked ignored, and a second one stops without saving."""
    # A background job of a shell without job control starts with SIGINT ignored, which
    # `caught` leaves alone (as under nohup): the tests may run as one.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        stop = StopRequests()
        with caplog.at_level("WARNING"), stop.caught():
            signal.raise_signal(signal.SIGINT)  # in this thread: handled before the next line
            assert stop.caught_one()
    finally:
        signal.signal(signal.SIGINT, previous)
    assert [r.getMessage() for r in caplog.records] == [
        "SIGINT: stopping once the update or validation in progress ends, last.pt saved; "
        "a second signal stops at once without saving"
    ]


def test_a_closed_terminal_stops_a_run_but_not_one_started_under_nohup():
    """SIGHUP (a closed terminal or a dropped SSH connection) is caught as SIGTERM is, so that
    the run saves; ignored when training starts (`nohup`), it stays ignored."""
    previous = signal.signal(signal.SIGHUP, signal.SIG_DFL)  # the tests may run under nohup
    try:
        stop = StopRequests()
        with stop.caught():
            os.kill(os.getpid(), signal.SIGHUP)
            assert stop.caught_one() and stop.exit_code == 129
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        stop = StopRequests()
        with stop.caught():
            assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
            assert signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
            os.kill(os.getpid(), signal.SIGHUP)
        assert not stop.caught_one()
    finally:
        signal.signal(signal.SIGHUP, previous)


def test_checkpoint_names_are_independent_files(tmp_path):
    write_corpus(tmp_path, n_train=60)
    config = str(write_config(tmp_path, train="max_steps: 4, valid_every: 4"))
    assert run_training(config, str(tmp_path / "run"), []) == 0
    names = [tmp_path / "run/checkpoints" / n for n in ("step_00000004.pt", "best.pt", "last.pt")]
    assert len({os.stat(p).st_ino for p in names}) == 3
    with open(names[1], "r+b") as f:  # best.pt damaged in place
        f.truncate(1000)
    for path in (names[0], names[2]):
        assert load_checkpoint(path).step == 4
    with pytest.raises(TmtError, match="best.pt: not a readable checkpoint"):
        load_checkpoint(names[1])


@pytest.mark.parametrize("damage", ["missing", "corrupt"])
def test_resume_without_a_readable_last_pt_uses_the_newest_periodic_file(tmp_path, caplog, damage):
    """The run continues from step_8 (not from step 0), keeps its periodic files, and ends
    bitwise where an uninterrupted run ends."""
    write_corpus(tmp_path, n_train=60)
    config = str(write_config(tmp_path, train="max_steps: 12, keep_last: 2"))
    assert run_training(config, str(tmp_path / "full"), []) == 0
    run = tmp_path / "run"
    assert run_training(config, str(run), ["train.max_steps=8"]) == 0
    before = read_metrics(run / "metrics.jsonl")
    last = run / "checkpoints/last.pt"
    if damage == "missing":
        last.unlink()
    else:
        last.write_bytes(last.read_bytes()[: last.stat().st_size // 2])
    with caplog.at_level(logging.WARNING):
        assert run_training(config, str(run), []) == 0
    warning = next(r.getMessage() for r in caplog.records if "resuming from" in r.getMessage())
    assert "step_00000008.pt" in warning
    assert ("last.pt is missing" if damage == "missing" else "not a readable") in warning
    after = read_metrics(run / "metrics.jsonl")
    assert after[: len(before)] == before  # steps 1-8 were not trained again
    assert [r["step"] for r in after if r["kind"] == "train"] == list(range(1, 13))
    assert [p.name for p in run_layout.periodic_checkpoints(run)] == [
        "step_00000008.pt",
        "step_00000012.pt",
    ]
    assert_same_training_state(
        load_checkpoint(last), load_checkpoint(tmp_path / "full/checkpoints/last.pt")
    )


def test_resume_from_an_averaged_last_pt_is_refused_in_one_line(tmp_path, capsys):
    write_corpus(tmp_path, n_train=60)
    config = str(write_config(tmp_path, train="max_steps: 8"))
    run = tmp_path / "run"
    args = ["train", "--config", config, "--run-dir", str(run)]
    assert main(args) == 0
    last = run / "checkpoints/last.pt"
    averaged = average_checkpoints(run_layout.periodic_checkpoints(run))
    artifacts.save_checkpoint(averaged, last)  # what `tmt average --out .../last.pt` once did
    capsys.readouterr()
    assert main([*args, "--set", "train.max_steps=12"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith(f"error: {last}: an averaged checkpoint")
    assert "cannot resume training" in err[-1] and "Traceback" not in "".join(err)
    assert load_checkpoint(last).averaged_from  # left as the user made it


@pytest.mark.parametrize("policy", ["stop", "skip"])
def test_nonfinite_loss_stops_or_skips(tmp_path, monkeypatch, policy):
    write_corpus(tmp_path, n_train=60)
    config = str(write_config(tmp_path, train=f"nonfinite_loss: {policy}, max_steps: 4"))
    real = update_module.fused_label_smoothed_loss
    calls = {"n": 0}

    def poisoned(*args, **kwargs):
        sums = real(*args, **kwargs)
        calls["n"] += 1
        if calls["n"] == 2:
            sums.loss = sums.loss * float("nan")
        return sums

    monkeypatch.setattr(update_module, "fused_label_smoothed_loss", poisoned)
    if policy == "stop":
        with pytest.raises(TmtError, match="step 2: loss nan .* is not finite"):
            run_training(config, str(tmp_path / "run"), [])
        return
    assert run_training(config, str(tmp_path / "run"), []) == 0
    state = load_checkpoint(tmp_path / "run/checkpoints/last.pt")
    assert state.training.stats["skipped_updates"] == 1 and state.step == 4
    assert all(torch.isfinite(t).all() for t in state.model.values())


def test_refuses_foreign_directory_and_other_model(tiny_experiment, tmp_path):
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "thesis.tex").write_text("precious")
    with pytest.raises(TmtError, match="not empty and holds no run"):
        run_training(str(tiny_experiment), str(foreign), [])
    run_dir = tmp_path / "run"
    assert run_training(str(tiny_experiment), str(run_dir), ["train.max_steps=4"]) == 0
    with pytest.raises(TmtError, match=r"another model or corpus \(model.d_ff differ"):
        run_training(str(tiny_experiment), str(run_dir), ["model.d_ff=32"])
    assert json.loads((run_dir / "metrics.jsonl").read_text().splitlines()[0])["step"] == 1


def test_a_run_files_temporary_is_no_foreign_file(tiny_experiment, tmp_path):
    """Rank 0 writes the tokenizer (under a temporary name) while the other ranks look at the
    directory: they had refused it as another's, and the DDP run failed to start."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / ".spm-joint-0123456789abcdef.model.tmp4242").write_bytes(b"half a model")
    assert run_training(str(tiny_experiment), str(run_dir), ["train.max_steps=4"]) == 0
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / ".notes.txt.tmp17").write_text("not a run's")
    with pytest.raises(TmtError, match=r"holds no run \(\.notes\.txt\.tmp17\)"):
        run_training(str(tiny_experiment), str(tmp_path / "other"), [])


def test_max_minutes_stops_the_run_and_counts_resumed_time(tiny_experiment, tmp_path):
    run_dir = tmp_path / "run"
    args = ["train", "--config", str(tiny_experiment), "--run-dir", str(run_dir), "--set"]
    # No validation inside the run: its checkpoint would record the time of that save, and
    # the run could then stop at the next check, with less than the budget recorded.
    args.append("train.valid_every=100000")
    assert main([*args, "train.max_steps=1000", "train.max_minutes=0.002"]) == 0  # 0.12 s
    state = load_checkpoint(run_dir / "checkpoints" / "last.pt")
    assert 0 < state.step < 1000
    assert state.training.stats["elapsed_seconds"] >= 0.12
    # Resuming: the time already spent counts, so the run stops at once.
    assert main([*args, "train.max_steps=1000", "train.max_minutes=0.002"]) == 0
    assert load_checkpoint(run_dir / "checkpoints" / "last.pt").step == state.step


def test_resume_accepts_config_fields_added_since_the_run_started(tiny_experiment, tmp_path):
    """A checkpoint written before a new ModelConfig field existed still resumes."""
    run_dir = tmp_path / "run"
    args = ["train", "--config", str(tiny_experiment), "--run-dir", str(run_dir)]
    assert main([*args, "--set", "train.max_steps=4"]) == 0
    last = run_dir / "checkpoints" / "last.pt"
    state = load_checkpoint(last)
    del state.config["model"]["layer_norm_eps"]  # as if written by an older version
    artifacts.save_checkpoint(state, last)
    assert main([*args, "--set", "train.max_steps=6"]) == 0
    assert load_checkpoint(last).step == 6
