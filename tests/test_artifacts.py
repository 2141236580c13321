"""The checkpoint format and its files: atomic save, friendly load, resume order, pruning,
averaging, and checkpoints written by earlier versions."""

import dataclasses
import logging
import os
import re
import subprocess
import sys

import pytest
import torch

from transformer_mt import artifacts, run_layout
from transformer_mt.artifacts import Checkpoint, TrainingState
from transformer_mt.checkpoint_average import average_checkpoints
from transformer_mt.errors import TmtError
from transformer_mt.training import checkpoints

from .conftest import save_tiny_checkpoint


def state(value: float, step: int = 1) -> Checkpoint:
    """An inference checkpoint: weights, config, tokenizers, step."""
    return Checkpoint(
        model={"w": torch.full((2, 3), value), "count": torch.tensor(step)},
        config={},
        tokenizers={"src": b"s", "tgt": b"t"},
        step=step,
    )


def training_state(value: float, step: int) -> Checkpoint:
    """A checkpoint that holds every training-state key, as `Trainer.save` writes them."""
    training = TrainingState(
        optimizer={},
        scaler={},
        rng=[],
        data_position={"epoch": 0, "batch_index": step},
        best_score=None,
        bad_validations=0,
        stats={"skipped_updates": 0, "elapsed_seconds": 1.0},
    )
    return dataclasses.replace(state(value, step), training=training)


def test_save_then_load_round_trips(tmp_path):
    path = tmp_path / "sub" / "a.pt"
    artifacts.save_checkpoint(state(1.0), path)
    loaded = artifacts.load_checkpoint(path)
    assert torch.equal(loaded.model["w"], torch.ones(2, 3))
    assert loaded.tokenizers["src"] == b"s"
    assert os.listdir(path.parent) == ["a.pt"]  # no temporary left behind


@pytest.mark.parametrize("target", ["save", "replace"])
def test_crash_during_save_keeps_previous_checkpoint(tmp_path, monkeypatch, target):
    path = tmp_path / "last.pt"
    artifacts.save_checkpoint(state(1.0), path)

    def crash(*args, **kwargs):
        raise OSError("disk on fire")

    if target == "save":

        def partial_then_crash(obj, f, *args, **kwargs):
            f.write(b"half a checkpoint")  # a torn write into the temporary file
            raise OSError("disk on fire")

        monkeypatch.setattr(artifacts.torch, "save", partial_then_crash)
    else:
        monkeypatch.setattr(os, "replace", crash)
    # files.atomic_path may name the file in a TmtError of its own
    with pytest.raises((OSError, TmtError), match="disk on fire"):
        artifacts.save_checkpoint(state(2.0), path)
    monkeypatch.undo()
    assert torch.equal(artifacts.load_checkpoint(path).model["w"], torch.ones(2, 3))
    assert os.listdir(tmp_path) == ["last.pt"]


def test_load_errors_are_friendly(tmp_path):
    with pytest.raises(TmtError, match="missing.pt: checkpoint not found"):
        artifacts.load_checkpoint(tmp_path / "missing.pt")
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"not a zip file at all")
    with pytest.raises(TmtError, match=r"bad.pt: not a readable checkpoint \(not a file that"):
        artifacts.load_checkpoint(bad)
    bad.write_bytes(b"")
    with pytest.raises(TmtError, match=r"bad.pt: not a readable checkpoint \(an empty file\)$"):
        artifacts.load_checkpoint(bad)
    truncated = tmp_path / "truncated.pt"
    artifacts.save_checkpoint(state(1.0), truncated)
    truncated.write_bytes(truncated.read_bytes()[:100])
    with pytest.raises(TmtError, match=r"not a readable checkpoint \(truncated or damaged: \w"):
        artifacts.load_checkpoint(truncated)
    foreign = tmp_path / "foreign.pt"
    torch.save({"weights": torch.ones(1)}, foreign)
    with pytest.raises(TmtError, match="not a transformer_mt checkpoint"):
        artifacts.load_checkpoint(foreign)
    torch.save(torch.nn.Linear(2, 2), foreign)  # a whole module: intact, not "damaged"
    with pytest.raises(
        TmtError,
        match=r"foreign.pt: not a readable checkpoint \(it holds a pickled "
        r"torch\.nn\.modules\.linear\.Linear: a checkpoint holds tensors and plain values only",
    ):
        artifacts.load_checkpoint(foreign)


def test_copies_are_independent_files(tmp_path):
    a, b = tmp_path / "a.pt", tmp_path / "b.pt"
    artifacts.save_checkpoint(state(1.0), a)
    artifacts.copy_checkpoint(a, b)
    assert os.stat(a).st_ino != os.stat(b).st_ino
    with open(a, "r+b") as f:  # damage in place, as a bad disk or a torn copy would
        f.truncate(100)
    assert torch.equal(artifacts.load_checkpoint(b).model["w"], torch.ones(2, 3))
    assert sorted(os.listdir(tmp_path)) == ["a.pt", "b.pt"]


def test_directory_given_as_checkpoint_names_the_file_to_use(tmp_path):
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    with pytest.raises(TmtError, match=r"run: is a directory, not a checkpoint file; name a \.pt"):
        artifacts.load_checkpoint(run)
    artifacts.save_checkpoint(state(1.0), run / "checkpoints" / "best.pt")
    with pytest.raises(
        TmtError, match=r"is a directory.*did you mean .*run/checkpoints/best\.pt\?"
    ):
        artifacts.load_checkpoint(run)
    with pytest.raises(TmtError, match=r"did you mean .*checkpoints/best\.pt\?"):
        artifacts.load_checkpoint(run / "checkpoints")


def write_run(directory, steps, last_step):
    for step in steps:
        artifacts.save_checkpoint(
            training_state(step, step), directory / run_layout.periodic_name(step)
        )
    if last_step is not None:
        artifacts.save_checkpoint(training_state(last_step, last_step), directory / "last.pt")


def test_resume_prefers_last_then_the_newest_readable_periodic_file(tmp_path, caplog):
    assert checkpoints.resume_checkpoint(tmp_path / "none") is None
    assert checkpoints.resume_checkpoint(tmp_path) is None
    write_run(tmp_path, [4, 8, 12], last_step=14)  # last.pt: a SIGTERM save after step 12
    path, found = checkpoints.resume_checkpoint(tmp_path)
    assert path.name == "last.pt" and found.step == 14 and not caplog.records

    (tmp_path / "last.pt").write_bytes(b"\0" * 1000)  # corrupt
    (tmp_path / run_layout.periodic_name(12)).unlink()
    (tmp_path / run_layout.periodic_name(8)).write_bytes(b"truncated")
    with caplog.at_level(logging.WARNING):
        path, found = checkpoints.resume_checkpoint(tmp_path)
    assert path.name == "step_00000004.pt" and found.step == 4
    warning = caplog.records[-1].getMessage()
    assert "resuming from" in warning and "step_00000004.pt" in warning
    assert "last.pt: not a readable checkpoint" in warning
    assert "step_00000008.pt: not a readable checkpoint" in warning

    (tmp_path / "last.pt").unlink()
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert checkpoints.resume_checkpoint(tmp_path)[0].name == "step_00000004.pt"
    assert "last.pt is missing" in caplog.records[-1].getMessage()
    # Nothing was deleted: the unreadable files are left for the user to look at.
    assert [p.name for p in run_layout.periodic_checkpoints(tmp_path)] == [
        "step_00000004.pt",
        "step_00000008.pt",
    ]


def test_resume_with_only_unreadable_checkpoints_is_an_error(tmp_path):
    (tmp_path / "last.pt").write_bytes(b"junk")
    (tmp_path / run_layout.periodic_name(5)).write_bytes(b"junk")
    with pytest.raises(TmtError, match="no readable training checkpoint .*last.pt.*step_00000005"):
        checkpoints.resume_checkpoint(tmp_path)


def test_resume_from_an_averaged_checkpoint_is_a_one_line_error(tmp_path):
    write_run(tmp_path, [4, 8], last_step=None)
    averaged = average_checkpoints(run_layout.periodic_checkpoints(tmp_path))
    artifacts.save_checkpoint(averaged, tmp_path / "last.pt")
    with pytest.raises(TmtError) as err:
        checkpoints.resume_checkpoint(tmp_path)
    message = str(err.value)
    assert "\n" not in message and message.startswith(f"{tmp_path / 'last.pt'}: an averaged")
    assert "cannot resume training" in message and "resume from step_00000008.pt" in message
    assert (tmp_path / "last.pt").exists()  # the user's file is kept
    inference = tmp_path / "alone"
    inference.mkdir()
    artifacts.save_checkpoint(state(1.0), inference / "last.pt")
    with pytest.raises(TmtError, match="an inference checkpoint .* to start the run afresh"):
        checkpoints.resume_checkpoint(inference)


def test_temporaries_of_dead_writers_are_removed(tmp_path):
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    stale = tmp_path / f".last.pt.tmp{dead.stdout.strip()}"
    live = tmp_path / f".best.pt.tmp{os.getppid()}"  # a process that is running
    stale.write_bytes(b"half")
    live.write_bytes(b"half")
    write_run(tmp_path, [2], last_step=2)
    assert checkpoints.resume_checkpoint(tmp_path)[1].step == 2
    assert not stale.exists() and live.exists()
    assert (tmp_path / "last.pt").exists()


def test_periodic_listing_pruning_and_average(tmp_path):
    run = tmp_path / "run"
    for step, value in [(100, 1.0), (200, 2.0), (300, 6.0), (1000, 7.0)]:
        artifacts.save_checkpoint(
            state(value, step), run / "checkpoints" / run_layout.periodic_name(step)
        )
    artifacts.save_checkpoint(state(99.0), run / "checkpoints" / "best.pt")
    names = [p.name for p in run_layout.periodic_checkpoints(run)]
    assert names == ["step_00000100.pt", "step_00000200.pt", "step_00000300.pt", "step_00001000.pt"]

    paths = checkpoints.resolve_average_inputs([run], last=3)
    averaged = average_checkpoints(paths)
    assert torch.equal(averaged.model["w"], torch.full((2, 3), 5.0))
    assert torch.equal(averaged.model["count"], torch.tensor(1000))  # ints from the newest
    assert averaged.step == 1000 and averaged.training is None

    deleted = checkpoints.prune_checkpoints(run / "checkpoints", keep_last=2)
    assert [p.name for p in deleted] == ["step_00000100.pt", "step_00000200.pt"]
    assert (run / "checkpoints" / "best.pt").exists()
    with pytest.raises(TmtError, match="no such checkpoint"):
        checkpoints.resolve_average_inputs([tmp_path / "nope"], last=2)
    with pytest.raises(TmtError, match="no periodic checkpoints"):
        checkpoints.resolve_average_inputs([tmp_path], last=2)


@pytest.mark.parametrize("order", [(0, 1, 2), (2, 1, 0), (1, 2, 0)])
def test_average_takes_the_newest_step_whatever_the_order_of_the_files(tmp_path, order):
    """The config, step and integer buffers had come from the file named last: the same
    checkpoints named newest first gave the oldest step and its decode settings."""
    paths = []
    for step, value in [(100, 1.0), (200, 2.0), (300, 6.0)]:
        checkpoint = dataclasses.replace(
            state(value, step), config={"decode": {"beam_size": step % 7}}
        )
        paths.append(tmp_path / f"s{step}.pt")
        artifacts.save_checkpoint(checkpoint, paths[-1])
    averaged = average_checkpoints([paths[i] for i in order])
    assert averaged.step == 300 and averaged.config == {"decode": {"beam_size": 300 % 7}}
    assert torch.equal(averaged.model["count"], torch.tensor(300))
    assert torch.equal(averaged.model["w"], torch.full((2, 3), 3.0))


def test_prune_leaves_files_after_the_current_step(tmp_path):
    """step_12 is from a save cut short; the run resumed at 4 and has just written step_8."""
    write_run(tmp_path, [4, 8, 12], last_step=None)
    deleted = checkpoints.prune_checkpoints(tmp_path, keep_last=1, up_to=8)
    assert [p.name for p in deleted] == ["step_00000004.pt"]
    assert [p.name for p in run_layout.periodic_checkpoints(tmp_path)] == [
        "step_00000008.pt",
        "step_00000012.pt",
    ]


def test_average_refuses_different_parameter_sets(tmp_path):
    a, b = tmp_path / "a.pt", tmp_path / "b.pt"
    artifacts.save_checkpoint(state(1.0), a)
    other = state(1.0)
    other.model["extra"] = torch.ones(1)
    artifacts.save_checkpoint(other, b)
    with pytest.raises(TmtError, match="parameters differ"):
        average_checkpoints([a, b])
    wider = dataclasses.replace(state(1.0), model={"w": torch.ones(3, 3), "count": torch.tensor(1)})
    artifacts.save_checkpoint(wider, b)  # same (here empty) config: no traceback either
    with pytest.raises(TmtError, match=r"b\.pt: w has shape \[3, 3\], \[2, 3\] in .*a\.pt; cannot"):
        average_checkpoints([a, b])


# --- checkpoints written before this module owned the format -----------------------------------

# The keys `Trainer.state_dict` wrote, in its order, before the format moved into artifacts.py.
LEGACY_TRAINER_KEYS = (
    *("model", "ema", "config", "tokenizers", "step", "version"),
    *("optimizer", "scaler", "rng", "data_position", "best_score", "bad_validations", "stats"),
)


def legacy_trainer_dict(inference_file) -> dict:
    """A dict laid out exactly as the trainer's checkpoints were, with real optimizer state."""
    old = torch.load(inference_file, weights_only=True)  # model, config, tokenizers, step
    model = torch.nn.Linear(2, 2)
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.ones(1, 2)).sum().backward()
    optimizer.step()
    return {
        "model": old["model"],
        "ema": None,
        "config": old["config"],
        "tokenizers": old["tokenizers"],
        "step": 7,
        "version": "0.1.0",
        "optimizer": optimizer.state_dict(),
        "scaler": torch.amp.GradScaler("cpu", enabled=False).state_dict(),
        "rng": [{"torch": torch.get_rng_state()}],
        "data_position": {"epoch": 1, "batch_index": 3},
        "best_score": 12.5,
        "bad_validations": 1,
        "stats": {"skipped_updates": 0, "elapsed_seconds": 4.0},
    }


def test_a_checkpoint_of_the_old_trainer_layout_loads_for_inference_and_resume(
    checkpoint, tmp_path
):
    legacy = legacy_trainer_dict(checkpoint)
    assert tuple(legacy) == LEGACY_TRAINER_KEYS
    directory = tmp_path / "checkpoints"
    directory.mkdir()
    torch.save(legacy, directory / "last.pt")

    bundle = artifacts.load_for_inference(directory / "last.pt")
    for name, tensor in bundle.model.state_dict().items():
        assert torch.equal(tensor, legacy["model"][name]), name
    assert bundle.src_tokenizer.model_bytes == legacy["tokenizers"]["src"]

    path, found = checkpoints.resume_checkpoint(directory)
    assert path == directory / "last.pt" and found.step == 7 and found.version == "0.1.0"
    training = found.training
    assert training.data_position == {"epoch": 1, "batch_index": 3}
    assert (training.best_score, training.bad_validations) == (12.5, 1)
    assert training.optimizer["state"][0]["step"] == legacy["optimizer"]["state"][0]["step"]
    assert torch.equal(training.rng[0]["torch"], legacy["rng"][0]["torch"])
    # Written again, the same keys in the same order, then the checksums: the format on disk
    # only grew a key, which earlier releases do not read.
    artifacts.save_checkpoint(found, tmp_path / "again.pt")
    again = tuple(torch.load(tmp_path / "again.pt", weights_only=True))
    assert again == (*LEGACY_TRAINER_KEYS, artifacts.CHECKSUMS_KEY)


def test_the_minimal_early_layout_loads_for_inference(checkpoint):
    """model, config, tokenizers and step only (no version, no ema key): still a model."""
    assert set(torch.load(checkpoint, weights_only=True)) == {
        "model", "config", "tokenizers", "step"
    }  # fmt: skip
    loaded = artifacts.load_checkpoint(checkpoint)
    assert loaded.version is None and loaded.ema is None and loaded.training is None
    assert not artifacts.load_for_inference(checkpoint).model.training


# --- damage, and names that are not checkpoint files ------------------------------------------


def flip_bytes(path, tensor: torch.Tensor, n_bytes: int = 4096) -> None:
    """Invert up to `n_bytes` of `tensor`'s data where it lies in `path` (zip headers intact)."""
    data = bytearray(path.read_bytes())
    raw = tensor.contiguous().numpy().tobytes()
    at = data.find(raw)
    assert at >= 0 and data.find(raw, at + 1) < 0  # found, and only there
    for i in range(at, at + min(n_bytes, len(raw))):
        data[i] ^= 0xFF
    path.write_bytes(bytes(data))


def test_damage_inside_a_tensor_is_refused_by_name(tmp_path):
    path = tmp_path / "model.pt"
    weights = torch.arange(2048, dtype=torch.float32)
    artifacts.save_checkpoint(dataclasses.replace(state(1.0), model={"w": weights}), path)
    assert torch.equal(artifacts.load_checkpoint(path).model["w"], weights)
    flip_bytes(path, weights)
    assert torch.load(path, weights_only=True)["model"]["w"].shape == (2048,)  # torch sees none
    with pytest.raises(TmtError) as err:
        artifacts.load_checkpoint(path)
    message = str(err.value)
    assert message.startswith(f"{path}: damaged checkpoint (model/w does not match the checksums")
    assert "\n" not in message
    assert path.exists()  # refused, not deleted: the user may want to look at it


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_weights_of_a_run_that_diverged_are_refused_by_name(tmp_path, value):
    """Their checksums are sound: the run saved them so. Translated, every hypothesis's score
    was NaN and beam search had none to return."""
    path = tmp_path / "model.pt"
    diverged = dataclasses.replace(state(1.0), ema={"w": torch.tensor([0.0, value])})
    artifacts.save_checkpoint(diverged, path)
    with pytest.raises(TmtError) as err:
        artifacts.load_checkpoint(path)
    assert str(err.value) == (
        f"{path}: ema/w holds NaN or infinite values (a run that diverged); take an earlier "
        "checkpoint"
    )


def test_a_weight_that_is_not_a_tensor_is_refused_by_name(tmp_path):
    path = tmp_path / "model.pt"
    artifacts.save_checkpoint(dataclasses.replace(state(1.0), model={"w": [1.0, 2.0]}), path)
    with pytest.raises(TmtError, match=r"model\.pt: model/w is a list, not a tensor$"):
        artifacts.load_checkpoint(path)


def test_weights_that_do_not_fit_the_config_are_named(checkpoint, tmp_path):
    path = tmp_path / "model.pt"
    loaded = artifacts.load_checkpoint(checkpoint)
    artifacts.save_checkpoint(
        dataclasses.replace(loaded, model={**loaded.model, "extra.weight": torch.ones(2)}), path
    )
    with pytest.raises(TmtError) as err:
        artifacts.load_for_inference(path)
    assert str(err.value) == (
        f"{path}: weights do not match the stored config (Unexpected key(s) in state_dict: "
        '"extra.weight".)'
    )


def test_a_damaged_embedding_is_refused_before_it_translates(checkpoint, tmp_path):
    """The session fixture predates checksums: it loads unchecked; saved again it has them."""
    assert artifacts.CHECKSUMS_KEY not in torch.load(checkpoint, weights_only=True)
    path = tmp_path / "model.pt"
    artifacts.save_checkpoint(artifacts.load_checkpoint(checkpoint), path)
    assert not artifacts.load_for_inference(path).model.training
    flip_bytes(path, artifacts.load_checkpoint(path).model["encoder.embed.token_embedding.weight"])
    # one table, three names (shared embeddings, tied output)
    with pytest.raises(
        TmtError, match=r"damaged checkpoint \(model/decoder\.embed\..* and 2 more tensors do"
    ):
        artifacts.load_for_inference(path)


def test_damaged_settings_are_refused(tmp_path):
    path = tmp_path / "model.pt"
    artifacts.save_checkpoint(dataclasses.replace(state(1.0), config={"note": "sinusoidal"}), path)
    path.write_bytes(path.read_bytes().replace(b"sinusoidal", b"sinusoidaL"))
    values = r"damaged checkpoint \(its config, tokenizers or other values do not match"
    with pytest.raises(TmtError, match=values):
        artifacts.load_checkpoint(path)


@pytest.mark.parametrize(
    "tokenizers, named",
    [({"src": b"not a model", "tgt": b"x"}, "tokenizers.src: not a SentencePiece model"),
     ({"src": b"x"}, "tokenizers: not the source and target models"),
     ("garbage", "tokenizers: not the source and target models")],
)  # fmt: skip
def test_tokenizers_that_are_not_models_name_the_checkpoint(
    checkpoint, tmp_path, tokenizers, named
):
    """A file written without checksums (by another tool, or an early release) is read
    unchecked: what it holds is refused by the checkpoint's name and the key."""
    path = tmp_path / "model.pt"
    stored = torch.load(checkpoint, weights_only=True)
    torch.save(stored | {"tokenizers": tokenizers}, path)
    with pytest.raises(TmtError, match=f"^{path}: {named}"):
        artifacts.load_for_inference(path)


def test_resume_skips_a_damaged_checkpoint_for_the_newest_sound_one(tmp_path, caplog):
    write_run(tmp_path, [4, 8], last_step=10)
    last = tmp_path / "last.pt"
    flip_bytes(last, training_state(10, 10).model["w"], n_bytes=8)
    with caplog.at_level(logging.WARNING):
        path, found = checkpoints.resume_checkpoint(tmp_path)
    assert path.name == "step_00000008.pt" and found.step == 8
    assert (
        f"skipped: {last}: damaged checkpoint (model/w does not" in caplog.records[-1].getMessage()
    )
    assert last.exists()


def test_names_that_are_not_checkpoint_files_say_what_they_are(tmp_path):
    with pytest.raises(TmtError, match="^/dev/zero: is a character device, not a checkpoint file"):
        artifacts.load_checkpoint("/dev/zero")
    fifo = tmp_path / "pipe.pt"
    os.mkfifo(fifo)
    with pytest.raises(TmtError, match=r"pipe\.pt: is a named pipe \(FIFO\), not a checkpoint"):
        artifacts.load_checkpoint(fifo)
    link = tmp_path / "link.pt"
    link.symlink_to(tmp_path / "gone.pt")
    with pytest.raises(
        TmtError, match=r"link\.pt: checkpoint not found \(a link to .*gone\.pt, wh"
    ):
        artifacts.load_checkpoint(link)
    with pytest.raises(TmtError, match="/dev/zero: is a character device"):
        average_checkpoints(checkpoints.resolve_average_inputs(["/dev/zero"], None))


# --- averaging checkpoints of different models -----------------------------------------------


@pytest.mark.parametrize(
    ("options", "differ"),
    [({"positions": "rope"}, "model.positions"), ({"d_ff": 64}, "model.d_ff")],
)
def test_average_refuses_checkpoints_of_another_model(tmp_path, options, differ):
    """Equal shapes (sinusoidal and rotary positions) or not: the stored configs decide."""
    one = save_tiny_checkpoint(tmp_path / "one")
    other = save_tiny_checkpoint(tmp_path / "other", **options)
    with pytest.raises(TmtError) as err:
        average_checkpoints([one, other])
    message = str(err.value)
    assert message == (
        f"{other}: another model than {one} (differs in {differ}); average checkpoints of one model"
    )


def test_average_takes_checkpoints_that_differ_only_in_training_settings(tmp_path):
    one = save_tiny_checkpoint(tmp_path / "one")
    other = tmp_path / "other.pt"
    changed = artifacts.load_checkpoint(one)
    changed.config["train"]["lr"] = 1e-3
    changed.config["model"]["dropout"] = 0.3  # off at inference: the same model
    changed.config["data"]["train"] = "another/corpus"
    name = next(k for k, t in changed.model.items() if t.is_floating_point())
    changed.model[name] = changed.model[name] + 1  # other weights: no copy of the first
    changed.step += 1  # the newest: its config is the average's
    artifacts.save_checkpoint(changed, other)
    assert average_checkpoints([other, one]).config["train"]["lr"] == 1e-3
    changed.config["data"]["src_lang"], changed.config["data"]["tgt_lang"] = "en", "de"
    changed.tokenizers = {"src": b"other", "tgt": b"vocabulary"}
    artifacts.save_checkpoint(changed, other)
    with pytest.raises(TmtError, match=r"data\.src_lang, data\.tgt_lang, the tokenizers' voc"):
        average_checkpoints([one, other])


@pytest.mark.parametrize(
    ("key", "value", "wanted"),
    [
        ("step", "12", "'12', not a whole number >= 0"),
        ("step", -5, "-5, not a whole number >= 0"),
        ("averaged_from", "abc", "'abc', not a list of file names"),
        ("averaged_from", [1, 2], "[1, 2], not a list of file names"),
        ("version", b"0.1", "b'0.1', not a version string"),
        ("best_score", float("nan"), "nan, not a finite number or None"),
        ("stats", {"elapsed_seconds": float("nan")}, "{'elapsed_seconds': nan}, not a dict"),
        ("data_position", [1], "[1], not a dict of the next batch's position"),
        ("scored_on", 5, "5, not a corpus key"),
    ],
)
def test_a_value_of_the_wrong_kind_is_refused_naming_its_key(tmp_path, key, value, wanted):
    """A hand-made or foreign file with the right keys: `tmt info` printed tracebacks, or
    described "averaging 3 checkpoints (a ... c)"; `train.init_from` logged a traceback."""
    path = tmp_path / "odd.pt"
    state_dict = training_state(1.0, 4).to_dict()
    state_dict[key] = value
    state_dict[artifacts.CHECKSUMS_KEY] = artifacts.checksums(state_dict)
    torch.save(state_dict, path)
    with pytest.raises(TmtError, match=f"^{re.escape(str(path))}: {key} is {re.escape(wanted)}"):
        artifacts.load_checkpoint(path)


def test_a_checkpoint_cut_anywhere_is_called_truncated(checkpoint, tmp_path):
    """torch's zip reader raises OSError(EINVAL) for some cut lengths, which read as an I/O
    failure ("cannot read (Invalid argument)") and sent the user to the disk."""
    data = checkpoint.read_bytes()
    cut = tmp_path / "cut.pt"
    for length in range(100, len(data), len(data) // 97):
        cut.write_bytes(data[:length])
        with pytest.raises(TmtError, match=r"not a readable checkpoint \(truncated or damaged"):
            artifacts.load_checkpoint(cut)
