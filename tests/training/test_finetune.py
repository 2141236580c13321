"""Fine-tuning (`train.init_from`): the child starts from the parent's weights, tokenizers and
special ids, keeps its architecture, resumes exactly, and refuses a config that changes it."""

import dataclasses

import pytest
import torch
import yaml

from transformer_mt.artifacts import load_checkpoint, save_checkpoint
from transformer_mt.cli import main
from transformer_mt.errors import TmtError
from transformer_mt.training.run import run_training

from .conftest import trained_run, write_config, write_corpus
from .test_trainer import assert_same_training_state


@pytest.fixture(scope="module")
def parent(tmp_path_factory):
    """A tiny model trained for 8 updates (another corpus seed than the children's)."""
    return trained_run(tmp_path_factory.mktemp("parent"), seed=5) / "checkpoints" / "last.pt"


def child_config(directory, parent, **sections):
    """The child's config: its own corpus and training settings; no model section unless
    given (it is the parent's)."""
    write_corpus(directory, n_train=80)
    train = f"max_steps: 6, warmup_steps: 1, init_from: {parent}"
    path = write_config(directory, train=train, **sections)
    text = path.read_text("utf-8")
    if "model" not in sections:  # drop the tiny model section: inherited
        lines = text.splitlines()
        start = lines.index("model:")
        end = next(i for i in range(start + 1, len(lines)) if not lines[i].startswith(" "))
        text = "\n".join(lines[:start] + lines[end:]) + "\n"
    path.write_text(text, "utf-8")
    return path


def test_the_child_starts_from_the_parent(parent, tmp_path):
    config = child_config(tmp_path, parent)
    still = tmp_path / "still"  # two updates at a learning rate that moves nothing visibly
    args = ["train.max_steps=2", "train.lr=1e-12", "train.warmup_init_lr=1e-12"]
    assert run_training(str(config), str(still), args) == 0
    parent_ckpt, child = load_checkpoint(parent), load_checkpoint(still / "checkpoints/last.pt")
    assert child.step == 2 and child.tokenizers == parent_ckpt.tokenizers
    assert child.specials == parent_ckpt.specials
    for name, tensor in parent_ckpt.weights.items():
        assert (child.model[name] - tensor).abs().max() < 1e-8, name
    assert child.config["model"] == parent_ckpt.config["model"]


def test_a_fine_tuning_run_resumes_exactly(parent, tmp_path):
    config = str(child_config(tmp_path, parent))
    full, part = tmp_path / "full", tmp_path / "part"
    assert run_training(config, str(full), []) == 0
    assert run_training(config, str(part), ["train.max_steps=3"]) == 0
    assert run_training(config, str(part), []) == 0
    assert_same_training_state(
        load_checkpoint(part / "checkpoints/last.pt"), load_checkpoint(full / "checkpoints/last.pt")
    )


def test_a_config_that_changes_the_architecture_is_refused(parent, tmp_path, capsys):
    config = child_config(tmp_path, parent, model="d_model: 64, n_heads: 4, dropout: 0.3")
    run = tmp_path / "run"
    assert main(["train", "--config", str(config), "--run-dir", str(run)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == (
        f"error: train.init_from {parent}: model.d_model is 64 here and 32 in the checkpoint; "
        "fine-tuning keeps the model's architecture and vocabulary (remove the key)"
    )
    assert not run.exists()
    # Dropout is a training setting: it may differ.
    config = child_config(tmp_path, parent, model="dropout: 0.3")
    assert run_training(str(config), str(run), ["train.max_steps=2"]) == 0
    assert load_checkpoint(run / "checkpoints/last.pt").config["model"]["dropout"] == 0.3


def test_a_missing_parent_is_named(tmp_path):
    config = child_config(tmp_path, tmp_path / "nothing.pt")
    with pytest.raises(TmtError, match=r"train.init_from: .*nothing.pt"):
        run_training(str(config), str(tmp_path / "run"), [])


def test_a_fine_tuning_run_resumes_without_its_parent(parent, tmp_path):
    """The run's own checkpoints hold all the parent gave: moved away, it is not needed."""
    copy = tmp_path / "parent.pt"
    copy.write_bytes(parent.read_bytes())
    config = str(child_config(tmp_path, copy))
    run = tmp_path / "run"
    assert run_training(config, str(run), ["train.max_steps=3"]) == 0
    copy.unlink()
    assert run_training(config, str(run), []) == 0
    assert load_checkpoint(run / "checkpoints/last.pt").step == 6


def test_the_child_searches_as_the_parent_unless_its_config_says_otherwise(parent, tmp_path):
    """An imported model's checkpoint holds its authors' search; fine-tuned, it kept ours."""
    searched = load_checkpoint(parent)
    decode = {**searched.config["decode"], "beam_size": 3, "length_norm": "power", "max_len_b": 20}
    own = tmp_path / "parent.pt"
    save_checkpoint(
        dataclasses.replace(searched, config={**searched.config, "decode": decode}), own
    )
    config = child_config(tmp_path, own)
    assert run_training(str(config), str(tmp_path / "run"), ["decode.max_len_b=30"]) == 0
    child = load_checkpoint(tmp_path / "run" / "checkpoints" / "last.pt").config["decode"]
    assert (child["beam_size"], child["length_norm"], child["max_len_b"]) == (3, "power", 30)


def test_a_parent_whose_weights_do_not_fit_is_named_with_its_keys(parent, tmp_path, capsys):
    """The message named no key (torch's first line only); now it says what `tmt translate`
    says of the same file."""
    from transformer_mt.checkpoint_checksums import CHECKSUMS_KEY, checksums

    state = load_checkpoint(parent).to_dict()
    state["model"] = {k: v for k, v in state["model"].items() if "encoder" not in k}
    state[CHECKSUMS_KEY] = checksums(state)
    broken = tmp_path / "broken.pt"
    torch.save(state, broken)
    config = child_config(tmp_path, broken)
    assert main(["train", "--config", str(config), "--run-dir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert f"error: train.init_from {broken}: weights do not match the stored config" in err
    assert "Missing key(s)" in err and "encoder." in err


def test_a_child_refused_from_scratch_is_refused_from_a_parent(parent, tmp_path, capsys):
    """Pairs longer than the parent's position table had died in a traceback mid-run; two
    target languages for a parent without tags had trained silently."""
    short = tmp_path / "short.pt"
    changed = load_checkpoint(parent)
    changed.config["model"]["max_positions"] = 24  # sinusoidal: no weights of its own
    save_checkpoint(changed, short)
    config = child_config(tmp_path, short)
    run = tmp_path / "run"
    assert main(["train", "--config", str(config), "--run-dir", str(run)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith(f"error: train.init_from {short}: model.max_positions=24 ")
    assert err[-1].endswith("; lower data.max_len to 23") and not run.exists()
    # Growing the table is no way out for a child: the key is refused by name, not checked
    # against this toolkit's default search before the parent's is known.
    assert (
        main(
            ["train", "--config", str(config), "--run-dir", str(run)]
            + ["--set", "model.max_positions=257"]
        )
        == 2
    )
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"error: train.init_from {short}: model.max_positions is 257 here and 24 in the "
        "checkpoint; fine-tuning keeps the model's architecture and vocabulary (remove the key)"
    )

    sections = yaml.safe_load(child_config(tmp_path, parent).read_text("utf-8"))
    corpus = sections["data"].pop("train")
    sections["data"]["train"] = [
        {"path": corpus, "src_lang": "de", "tgt_lang": "en"},
        {"path": corpus, "src_lang": "de", "tgt_lang": "fr"},
    ]
    config.write_text(yaml.safe_dump(sections), "utf-8")
    assert main(["train", "--config", str(config), "--run-dir", str(run)]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"error: train.init_from {parent}: data.train translates into en, fr, and the model has "
        "no language tag for en, fr: it could not tell which language to write; fine-tune a "
        "multilingual model, or train one direction"
    )
    assert not run.exists()
