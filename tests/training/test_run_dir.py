"""The run directory: one training process at a time, a path that must be a directory, and the
history of settings changed on resume."""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from transformer_mt import run_lock as lock_module
from transformer_mt.artifacts import load_checkpoint
from transformer_mt.cli import main
from transformer_mt.errors import TmtError
from transformer_mt.run_layout import LOCK_NAME
from transformer_mt.run_lock import lock_run_dir
from transformer_mt.training.run import _run_dir_lock, run_training

from .conftest import write_corpus

REPO = Path(__file__).resolve().parents[2]
HOLDER = """\
import sys
from pathlib import Path
from transformer_mt.run_lock import lock_run_dir
with lock_run_dir(Path(sys.argv[1])):
    print("locked", flush=True)
    sys.stdin.readline()
"""


@pytest.fixture
def holder(tmp_path):
    """Start a process that holds the lock of a run directory until its stdin closes."""
    started = []

    def start(run_dir: Path) -> subprocess.Popen:
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        proc = subprocess.Popen(
            [sys.executable, "-c", HOLDER, str(run_dir)],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        started.append(proc)
        assert proc.stdout.readline() == "locked\n"
        return proc

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)


def test_second_training_run_is_refused_naming_the_holder(
    tiny_experiment, tmp_path, holder, capsys
):
    run_dir = tmp_path / "run"
    proc = holder(run_dir)
    with (
        pytest.raises(TmtError, match=rf"another training run is using it \(pid {proc.pid} on "),
        lock_run_dir(run_dir),
    ):
        pytest.fail("the lock was granted twice")
    args = ["train", "--config", str(tiny_experiment), "--run-dir", str(run_dir)]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {run_dir}: another training run") and err.count("\n") == 1
    assert f"pid {proc.pid} on " in err
    assert sorted(p.name for p in run_dir.iterdir()) == [LOCK_NAME]  # nothing written

    proc.stdin.close()  # the holder finishes and removes its lock file
    assert proc.wait(timeout=10) == 0
    assert not (run_dir / LOCK_NAME).exists()
    assert main([*args, "--set", "train.max_steps=4"]) == 0
    assert not (run_dir / LOCK_NAME).exists()


def test_lock_of_a_killed_process_is_taken_over(tmp_path, holder):
    run_dir = tmp_path / "run"
    proc = holder(run_dir)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    lock_file = run_dir / LOCK_NAME
    assert lock_file.read_text().startswith(f"pid {proc.pid} on ")  # left behind
    with lock_run_dir(run_dir):
        assert lock_file.read_text().startswith(f"pid {os.getpid()} on ")
    assert not lock_file.exists()


def test_lock_file_removed_between_open_and_lock_is_not_trusted(tmp_path, monkeypatch):
    """A holder that finished and deleted the file while we opened it: lock the new file."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    real_flock = lock_module.fcntl.flock
    calls = []

    def flock_after_holder_left(fd, operation):
        if not calls:
            (run_dir / LOCK_NAME).unlink()
        calls.append(fd)
        real_flock(fd, operation)

    monkeypatch.setattr(lock_module.fcntl, "flock", flock_after_holder_left)
    with lock_run_dir(run_dir):
        assert len(calls) == 2  # the orphaned descriptor was dropped and a new file locked
        assert (run_dir / LOCK_NAME).read_text().startswith(f"pid {os.getpid()} on ")


class OtherRank:
    """A rank other than 0 of a torchrun job; `broadcast` hands back rank 0's decision."""

    is_main = False

    def __init__(self, rank0_refusal: str | None):
        self.rank0_refusal = rank0_refusal

    def broadcast(self, obj):
        assert obj is None  # this rank has no say
        return self.rank0_refusal


def test_only_rank_0_locks_and_every_rank_learns_a_refusal(tmp_path):
    run_dir = tmp_path / "run"
    with _run_dir_lock(run_dir, OtherRank(None)):
        assert not run_dir.exists()  # rank 0 made and locked it; this rank touched nothing
    refusal = OtherRank("run: another training run is using it (pid 7)")
    with (
        pytest.raises(TmtError, match="another training run is using it"),
        _run_dir_lock(run_dir, refusal),
    ):
        pytest.fail("a refused rank must not train")


@pytest.mark.slow
def test_torchrun_ranks_are_refused_together_then_train(tiny_experiment, tmp_path, holder):
    """Real torchrun, two CPU ranks: both report a held lock and exit, none waits on rank 0;
    once free, rank 0 alone takes the lock and the job trains."""
    run_dir = tmp_path / "run"
    proc = holder(run_dir)
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    cmd += ["-m", "transformer_mt", "train", "--config", str(tiny_experiment)]
    cmd += ["--run-dir", str(run_dir), "--set", "train.max_steps=4"]
    refused = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert refused.returncode != 0
    assert refused.stderr.count(f"another training run is using it (pid {proc.pid} ") == 2
    proc.stdin.close()
    proc.wait(timeout=10)
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert load_checkpoint(run_dir / "checkpoints/last.pt").step == 4
    assert not (run_dir / LOCK_NAME).exists()


@pytest.mark.parametrize("inside", [False, True])
def test_run_dir_that_is_a_file_is_one_line_error(tiny_experiment, tmp_path, capsys, inside):
    notes = tmp_path / "notes.txt"
    notes.write_text("precious")
    run_dir = notes / "run" if inside else notes
    args = ["train", "--config", str(tiny_experiment), "--run-dir", str(run_dir)]
    assert main(args) == 2
    err = capsys.readouterr().err
    reason = "cannot create the run directory" if inside else "is a file, not a run directory"
    assert err.startswith(f"error: {run_dir}: {reason}") and err.count("\n") == 1
    assert notes.read_text() == "precious"


def test_resume_with_changed_settings_keeps_the_config_history(tiny_experiment, tmp_path, caplog):
    run_dir = tmp_path / "run"
    history_file = run_dir / "config_history.yaml"
    assert run_training(str(tiny_experiment), str(run_dir), ["train.max_steps=4"]) == 0
    assert not history_file.exists()  # config.yaml is the original until something changes
    changed = ["train.max_steps=6", "train.lr=1e-3"]
    assert run_training(str(tiny_experiment), str(run_dir), changed) == 0
    assert "resuming with changed settings: train.lr, train.max_steps" in caplog.text

    history = yaml.safe_load(history_file.read_text())
    assert history["original"]["train"]["lr"] == 0.003
    assert history["original"]["train"]["max_steps"] == 4
    first = {"step": 4, "changes": {"train.lr": [0.003, 0.001], "train.max_steps": [4, 6]}}
    assert history["changes"] == [first]
    current = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert current["train"]["lr"] == 0.001 and current["train"]["max_steps"] == 6

    # The changed run dies before its first save: it resumes from step 4 with the old settings,
    # which the history records as a change back although the checkpoint never saw 1e-3.
    ckpts = run_dir / "checkpoints"
    for later in set(ckpts.glob("step_*.pt")) - {ckpts / "step_00000004.pt"}:
        later.unlink()
    (ckpts / "last.pt").write_bytes((ckpts / "step_00000004.pt").read_bytes())
    assert load_checkpoint(ckpts / "last.pt").config["train"]["lr"] == 0.003
    assert run_training(str(tiny_experiment), str(run_dir), ["train.max_steps=6"]) == 0
    history = yaml.safe_load(history_file.read_text())
    assert history["changes"] == [first, {"step": 4, "changes": {"train.lr": [0.001, 0.003]}}]
    assert history_file.read_text().startswith("# Settings changed on resuming this run.")
    assert run_training(str(tiny_experiment), str(run_dir), ["train.max_steps=6"]) == 0
    assert len(yaml.safe_load(history_file.read_text())["changes"]) == 2  # nothing changed
    shutil.rmtree(ckpts)  # a fresh run in the same directory starts without the old history
    assert run_training(str(tiny_experiment), str(run_dir), ["train.max_steps=4"]) == 0
    assert not history_file.exists()


def run_files(run_dir: Path) -> dict[str, bytes]:
    """Every file of a run directory (the checkpoints included) by relative path, but its
    log, which a refused run appends its refusal to."""
    return {
        str(p.relative_to(run_dir)): p.read_bytes()
        for p in run_dir.rglob("*")
        if p.is_file() and p.name != "train.log"
    }


@pytest.mark.parametrize(
    ("changes", "keys"),
    [
        (["data.src_lang=en", "data.tgt_lang=de"], "data.src_lang, data.tgt_lang"),
        (["data.train=OTHER/train.tsv"], "data.train"),
        (["data.streaming=true"], "data.streaming"),
        (["tokenizer.vocab_size=50", "model.n_layers=1"], "model.n_layers, tokenizer.vocab_size"),
    ],
)
def test_resume_as_another_model_or_on_another_corpus_is_refused(
    tiny_experiment, tmp_path, capsys, changes, keys
):
    """Swapped languages would train the reverse direction on top; another corpus or a
    toggled data.streaming met the stored data position with an IndexError or KeyError."""
    other = tmp_path / "other"
    other.mkdir()
    write_corpus(other, seed=1)
    run_dir = tmp_path / "run"
    args = ["train", "--config", str(tiny_experiment), "--run-dir", str(run_dir), "--set"]
    assert main([*args, "train.max_steps=4"]) == 0
    before = run_files(run_dir)
    capsys.readouterr()
    changes = [change.replace("OTHER", str(other)) for change in changes]
    assert main([*args, "train.max_steps=8", *changes]) == 2
    assert capsys.readouterr().err == (
        f"error: {run_dir} holds a run of another model or corpus ({keys} differ); resume it "
        "with its own config.yaml or choose another run directory\n"
    )
    assert run_files(run_dir) == before  # checkpoints, metrics, config: as they were


def test_resume_on_a_corpus_replaced_under_its_name_is_refused(tiny_experiment, tmp_path, capsys):
    """The same data.train path holding another text: its batches are not the ones the stored
    position counts, so the run would not go on where it stopped."""
    run_dir = tmp_path / "run"
    args = ["train", "--config", str(tiny_experiment), "--run-dir", str(run_dir), "--set"]
    assert main([*args, "train.max_steps=4"]) == 0
    before = run_files(run_dir)
    write_corpus(tmp_path, seed=1)  # train.tsv and valid.tsv replaced in place
    capsys.readouterr()
    assert main([*args, "train.max_steps=8"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        f"error: {tmp_path / 'train.tsv'}: its text is not the text the saved position counts in "
        "(corpus key "
    )
    assert "Resume with the text the run was trained on, or start another run directory" in err
    assert err.count("\n") == 1
    assert run_files(run_dir) == before

    write_corpus(tmp_path, seed=0)  # the original text back: the run goes on
    assert main([*args, "train.max_steps=8"]) == 0
    assert load_checkpoint(run_dir / "checkpoints/last.pt").step == 8


def test_the_same_command_after_a_patience_stop_trains_no_further(tiny_experiment, tmp_path):
    """As after max_steps: it had resumed, trained on to the next patience stop, replaced
    best.pt and last.pt and pruned step files, again at every rerun."""
    run_dir = tmp_path / "run"
    stopping = [
        *("train.max_steps=60", "train.valid_every=2", "train.patience=1"),
        *("train.valid_bleu=false", "train.lr=0.5", "train.warmup_steps=1"),
    ]
    assert run_training(str(tiny_experiment), str(run_dir), stopping) == 0
    step = load_checkpoint(run_dir / "checkpoints/last.pt").step
    assert step < 60  # stopped by patience
    before = run_files(run_dir)
    assert run_training(str(tiny_experiment), str(run_dir), stopping) == 0
    assert run_files(run_dir) == before
    patient = [*stopping[:2], "train.patience=50", *stopping[3:]]
    assert run_training(str(tiny_experiment), str(run_dir), patient) == 0  # more patience
    assert load_checkpoint(run_dir / "checkpoints/last.pt").step > step


def test_resume_with_larger_batches_trains_on(tiny_experiment, tmp_path, caplog):
    """How the run trains may change, dropout too (off at inference: the same model); fewer
    batches an epoch than the stored position counts start the next epoch."""
    run_dir = tmp_path / "run"
    assert run_training(str(tiny_experiment), str(run_dir), ["train.max_steps=4"]) == 0
    larger = ["train.max_steps=6", "train.max_tokens=2000", "model.dropout=0.2"]
    assert run_training(str(tiny_experiment), str(run_dir), larger) == 0
    changed = "model.dropout, train.max_steps, train.max_tokens"
    assert f"resuming with changed settings: {changed}" in caplog.text
    assert "data position batch 4 of epoch 0 is past the" in caplog.text
    assert load_checkpoint(run_dir / "checkpoints/last.pt").step == 6


def test_a_resume_that_scores_validation_otherwise_starts_the_best_score_again(
    tiny_experiment, tmp_path, caplog
):
    """The checkpoint's best score was BLEU; without BLEU a score is minus the NLL, which
    never beat it: best.pt stayed at the old step and patience stopped a run still learning."""
    run_dir = tmp_path / "run"
    assert run_training(str(tiny_experiment), str(run_dir), ["train.max_steps=8"]) == 0
    assert load_checkpoint(run_dir / "checkpoints/best.pt").training.best_score > 0  # BLEU
    changed = ["train.max_steps=12", "train.valid_bleu=false", "train.patience=1"]
    assert run_training(str(tiny_experiment), str(run_dir), changed) == 0
    assert "validation scores are measured anew (train.valid_bleu changed)" in caplog.text
    best = load_checkpoint(run_dir / "checkpoints/best.pt")
    assert best.step == 12 and best.training.best_score < 0  # minus the NLL of step 12


def test_a_resume_on_validation_text_replaced_under_its_name_starts_the_best_score_again(
    tiny_experiment, tmp_path, caplog
):
    """The same data.valid path holding other sentences: the saved best score was measured on
    the old ones, so it is not compared with the new scores (which could never beat it, or
    always would)."""
    run_dir = tmp_path / "run"
    quiet = ["train.valid_bleu=false"]  # scores are minus the NLL: one per validation
    assert run_training(str(tiny_experiment), str(run_dir), ["train.max_steps=8", *quiet]) == 0
    assert load_checkpoint(run_dir / "checkpoints/last.pt").training.scored_on is not None
    valid = tmp_path / "valid.tsv"
    lines = valid.read_text(encoding="utf-8").splitlines(keepends=True)
    valid.write_text("".join(lines[:5]), encoding="utf-8")  # another validation set
    caplog.clear()
    assert run_training(str(tiny_experiment), str(run_dir), ["train.max_steps=12", *quiet]) == 0
    assert (
        f"{valid}: not the validation text the saved best score was measured on (corpus key "
        in caplog.text
    )
    best = load_checkpoint(run_dir / "checkpoints/best.pt")
    assert best.step == 12  # the first validation on the new text is the best so far

    caplog.clear()  # the same text again: the score measured on it stands
    assert run_training(str(tiny_experiment), str(run_dir), ["train.max_steps=16", *quiet]) == 0
    assert "not the validation text" not in caplog.text


def test_a_run_stopped_before_its_first_checkpoint_is_still_its_directorys(
    tiny_experiment, tmp_path, capsys
):
    """Its config.yaml and metrics say whose directory it is: another model is refused, the
    same one starts afresh."""
    run_dir = tmp_path / "run"
    args = ["train", "--config", str(tiny_experiment), "--run-dir", str(run_dir), "--set"]
    assert main([*args, "train.max_steps=4"]) == 0
    shutil.rmtree(run_dir / "checkpoints")  # as if killed before its first save
    before = run_files(run_dir)
    capsys.readouterr()
    assert main([*args, "train.max_steps=4", "model.n_layers=1"]) == 2
    assert capsys.readouterr().err == (
        f"error: {run_dir} holds a run of another model or corpus (model.n_layers differ); "
        "resume it with its own config.yaml or choose another run directory\n"
    )
    assert run_files(run_dir) == before
    assert main([*args, "train.max_steps=4", "train.lr=1e-3"]) == 0
    assert load_checkpoint(run_dir / "checkpoints/last.pt").step == 4


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("train.lr:", "lr:", "not a config history (each change needs a step"),
        ("step: 4", "step: abc", "not a config history (each change needs a step"),
        ("train.lr:", "train.nosuch:", "train.nosuch: unknown key"),
    ],
)
def test_a_config_history_edited_by_hand_is_refused_before_anything_is_written(
    tiny_experiment, tmp_path, capsys, old, new, message
):
    """An unknown key or a step that is no number was applied as written, and the next
    record was wrong (max_steps [4, 8] where it was 6)."""
    run_dir = tmp_path / "run"
    args = ["train", "--config", str(tiny_experiment), "--run-dir", str(run_dir), "--set"]
    assert main([*args, "train.max_steps=4"]) == 0
    assert main([*args, "train.max_steps=6", "train.lr=1e-3"]) == 0
    history = run_dir / "config_history.yaml"
    text = history.read_text(encoding="utf-8")
    assert old in text
    history.write_text(text.replace(old, new), encoding="utf-8")
    before = run_files(run_dir)
    capsys.readouterr()
    assert main([*args, "train.max_steps=8"]) == 2
    err = capsys.readouterr().err
    assert str(history) in err and message in err and err.count("\n") == 1
    assert run_files(run_dir) == before


def test_flex_attention_is_refused_for_training_on_a_cpu(tiny_experiment, tmp_path, capsys):
    run_dir = tmp_path / "run"
    args = ["train", "--config", str(tiny_experiment), "--run-dir", str(run_dir), "--set"]
    flex = ["model.attention_backend=flex", "model.attn_dropout=0", "train.device=cpu"]
    assert main([*args, "train.max_steps=4", *flex]) == 2
    assert capsys.readouterr().err.startswith(
        "error: model.attention_backend=flex: trains on CUDA only"
    )
    assert not run_dir.exists()


def test_a_new_run_does_not_write_over_the_config_it_was_given(tiny_experiment, tmp_path, capsys):
    """A config written into an empty run directory is the user's file, comments and all: a
    new run there refuses it; once the directory holds a run, its config.yaml resumes it."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    own = run_dir / "config.yaml"
    own.write_text("# my notes\n" + tiny_experiment.read_text(), encoding="utf-8")
    before = own.read_bytes()
    assert main(["train", "--config", str(own), "--run-dir", str(run_dir)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: --config {own}: is the config.yaml a new run in {run_dir}")
    assert err.count("\n") == 1 and own.read_bytes() == before
    assert run_training(str(tiny_experiment), str(run_dir.parent / "trained"), []) == 0
    trained = run_dir.parent / "trained"
    args = ["train", "--config", str(trained / "config.yaml"), "--run-dir", str(trained)]
    assert main([*args, "--set", "train.max_steps=12"]) == 0


def test_a_symlink_loop_among_the_corpus_files_is_one_line(tiny_experiment, tmp_path, capsys):
    config = yaml.safe_load(tiny_experiment.read_text())
    loop = tmp_path / "loop.tsv"
    loop.symlink_to(tmp_path / "loop2.tsv")
    (tmp_path / "loop2.tsv").symlink_to(loop)
    config["data"]["valid"] = str(loop)
    tiny_experiment.write_text(yaml.safe_dump(config))
    args = ["train", "--config", str(tiny_experiment), "--run-dir", str(tmp_path / "run")]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert f"{loop} is a symlink loop; fix these paths in the config" in err
    assert err.count("\n") == 1


def test_a_checkpoints_folder_that_is_a_file_is_refused_before_training(
    tiny_experiment, tmp_path, capsys
):
    """The run trained to its first save, then failed there ('best.pt: cannot write')."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "checkpoints").write_text("x\n")
    args = ["train", "--config", str(tiny_experiment), "--run-dir", str(run_dir)]
    assert main([*args, "--set", "train.max_steps=4"]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"error: {run_dir / 'checkpoints'}: is a file; the run keeps its checkpoints in this "
        "folder: move it away\n"
    )
    assert not (run_dir / "metrics.jsonl").exists()


def test_a_checkpoints_folder_it_may_not_write_is_refused_before_training(
    tiny_experiment, tmp_path, capsys, monkeypatch
):
    """It trained to its first validation, then failed writing best.pt. (As root every
    folder is writable, so the permission is what `os.access` answers.)"""
    run_dir = tmp_path / "run"
    (run_dir / "checkpoints").mkdir(parents=True)
    real_access = os.access
    monkeypatch.setattr(
        os, "access", lambda p, mode: Path(p) != run_dir / "checkpoints" and real_access(p, mode)
    )
    args = ["train", "--config", str(tiny_experiment), "--run-dir", str(run_dir)]
    assert main([*args, "--set", "train.max_steps=4"]) == 2
    assert capsys.readouterr().err == (
        f"error: {run_dir / 'checkpoints'}: this process may not write there; the run keeps its "
        "checkpoints in this folder: give it permission or choose another\n"
    )
    assert not (run_dir / "metrics.jsonl").exists()


def test_a_read_only_checkpoint_to_resume_from_is_refused_before_training(
    tiny_experiment, tmp_path, capsys
):
    """It resumed, trained to its next save, then failed replacing best.pt: every update
    since the last checkpoint lost."""
    run_dir = tmp_path / "run"
    args = ["train", "--config", str(tiny_experiment), "--run-dir", str(run_dir)]
    assert main([*args, "--set", "train.max_steps=4", "train.valid_every=2"]) == 0
    best = run_dir / "checkpoints" / "best.pt"
    best.chmod(0o444)
    rows = (run_dir / "metrics.jsonl").read_text()
    capsys.readouterr()
    assert main([*args, "--set", "train.max_steps=6", "train.valid_every=2"]) == 2
    assert capsys.readouterr().err == (
        f"error: {best}: is read-only; make it writable (chmod u+w) to replace it, or write "
        "elsewhere\n"
    )
    assert (run_dir / "metrics.jsonl").read_text() == rows  # not one update more


@pytest.mark.parametrize("streaming", [False, True])
def test_a_pair_over_the_token_budget_is_named_by_its_number_and_source(
    tiny_experiment, tmp_path, capsys, streaming
):
    """It had been `pair 48`: its index among the pairs cleaning kept, or in a chunk."""
    corpus = tmp_path / "train.tsv"
    lines = corpus.read_text(encoding="utf-8").splitlines()
    lines[9] = "\t"  # dropped as empty: the numbers still count it
    lines[49] = " ".join(["der hund sieht die katze"] * 8) + "\t" + " ".join(["the dog"] * 8)
    corpus.write_text("\n".join(lines) + "\n", encoding="utf-8")
    args = ["train", "--config", str(tiny_experiment), "--run-dir", str(tmp_path / "run")]
    flags = ["train.max_tokens=30", f"data.streaming={str(streaming).lower()}"]
    assert main([*args, "--set", *flags]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith(f"error: {corpus}: training pair 50 ('der hund sieht die katze der ")
    assert "more than train.max_tokens=30; raise train.max_tokens, or lower data.max_len" in err


def test_a_setting_this_machine_cannot_train_with_leaves_the_directory_free(
    tiny_experiment, tmp_path, capsys
):
    """It had been refused after config.yaml was written: the corrected run of another model
    was then refused as another run's."""
    run_dir = tmp_path / "run"
    args = ["train", "--config", str(tiny_experiment), "--run-dir", str(run_dir), "--set"]
    assert main([*args, "train.cuda_graphs=true", "train.max_steps=4"]) == 2
    assert "train.cuda_graphs needs one process on a CUDA device" in capsys.readouterr().err
    assert not (run_dir / "config.yaml").exists()
    assert main([*args, "train.max_steps=4", "model.d_model=64"]) == 0


def test_checkpoints_saved_between_reading_and_locking_are_not_passed_over(
    tiny_experiment, tmp_path, capsys, monkeypatch
):
    """The checkpoint to resume is read before the run lock is taken: a run that held the
    lock may save and end in between, and this one resumed from the older checkpoint."""
    from transformer_mt.training import run

    run_dir = tmp_path / "run"
    args = ["train", "--config", str(tiny_experiment), "--run-dir", str(run_dir), "--set"]
    assert main([*args, "train.max_steps=4"]) == 0
    read = run.resume_checkpoint

    def read_then_another_run_saves(folder):
        found = read(folder)
        (folder / "step_00000006.pt").write_bytes((folder / "last.pt").read_bytes())
        return found

    monkeypatch.setattr(run, "resume_checkpoint", read_then_another_run_saves)
    assert main([*args, "train.max_steps=8"]) == 2
    assert capsys.readouterr().err == (
        f"error: {run_dir}: another run saved checkpoints there while this one started; run "
        "the command again to resume from them\n"
    )


def test_the_run_keeps_its_log_run_after_run(tiny_experiment, tmp_path, capsys, caplog):
    """What training says (its start, progress, validations, why it stopped) is appended to
    the run's train.log: on a terminal the progress lines are the bar's and went nowhere."""
    caplog.set_level(logging.INFO, logger="transformer_mt")  # as `tmt train` logs (pytest: WARNING)
    run_dir = tmp_path / "run"
    args = ["train", "--config", str(tiny_experiment), "--run-dir", str(run_dir)]
    assert main([*args, "--set", "train.max_steps=4", "train.valid_every=2"]) == 0
    first = (run_dir / "train.log").read_text("utf-8")
    assert "run directory" in first and "step 4 | epoch" in first
    assert "transformer_mt.training.run: threads 1: 1 thread(s) " in first  # and its reason
    assert main([*args, "--set", "train.max_steps=6", "train.valid_every=2"]) == 0
    log = (run_dir / "train.log").read_text("utf-8")
    assert log.startswith(first) and "step 6 | epoch" in log[len(first) :]
    assert main(["translate", "--checkpoint", str(run_dir / "checkpoints" / "best.pt"),
                 "--output", str(run_dir / "train.log")]) == 2  # fmt: skip
    assert "is the train.log of" in capsys.readouterr().err
    assert main([*args, "--set", "model.d_model=48"]) == 2  # another model: refused
    refused = (run_dir / "train.log").read_text("utf-8")[len(log) :].splitlines()
    (error,) = [line for line in refused if " ERROR " in line]
    assert error.split(" ERROR ", 1)[1].startswith("transformer_mt.training: stopped: ")
    assert "model.d_model" in error
