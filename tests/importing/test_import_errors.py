"""`tmt import` refuses what it cannot import with one line, and writes nothing."""

import json

import pytest

from tests.importing.builders import build_marian
from transformer_mt.cli import main

transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def marian_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("bad") / "hf"
    build_marian(directory, separate=False)
    return directory


def copy_of(directory, tmp_path):
    """A copy of the model directory to damage."""
    copy = tmp_path / "model"
    copy.mkdir()
    for path in directory.iterdir():
        (copy / path.name).write_bytes(path.read_bytes())
    return copy


def refused(args, capsys, out):
    assert main(["import", *args, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert not out.exists() and not list(out.parent.glob(f"{out.name}*"))
    return err[0]


def test_a_directory_that_is_not_a_model(tmp_path, capsys):
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "readme.txt").write_text("hello")
    line = refused([str(tmp_path / "notes")], capsys, tmp_path / "out.pt")
    assert (
        line == f"error: {tmp_path / 'notes'}: no config.json; not a Hugging Face model directory"
    )


def test_a_model_type_we_do_not_import(marian_dir, tmp_path, capsys):
    model = copy_of(marian_dir, tmp_path)
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, "model_type": "t5"}))
    line = refused([str(model)], capsys, tmp_path / "out.pt")
    assert line.endswith("model_type 't5' is not one we import (supported: m2m_100, marian)")


def test_an_option_we_cannot_compute_is_named(marian_dir, tmp_path, capsys):
    model = copy_of(marian_dir, tmp_path)
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, "activation_function": "gelu_new"}))
    line = refused([str(model)], capsys, tmp_path / "out.pt")
    assert "activation_function='gelu_new'" in line


def test_a_missing_tokenizer_file_is_named(marian_dir, tmp_path, capsys):
    model = copy_of(marian_dir, tmp_path)
    (model / "target.spm").unlink()
    line = refused([str(model)], capsys, tmp_path / "out.pt")
    assert line == f"error: {model / 'target.spm'}: missing; the model's tokenizer needs it"


def test_a_hub_name_while_offline(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))  # an empty hub cache
    line = refused(["Helsinki-NLP/opus-mt-de-en"], capsys, tmp_path / "out.pt")
    assert line.startswith("error: Helsinki-NLP/opus-mt-de-en: no such directory, and the hub")
    assert line.endswith("pass a local directory holding the model's files")


def test_the_output_may_not_be_the_model(marian_dir, tmp_path, capsys):
    model = copy_of(marian_dir, tmp_path)
    assert main(["import", str(model), "--out", str(model / "config.json")]) == 2
    assert "config.json" in capsys.readouterr().err


def test_without_transformers_the_extra_is_named(tmp_path, capsys, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "transformers" else real(name)
    )
    line = refused([str(tmp_path)], capsys, tmp_path / "out.pt")
    assert line == "error: tmt import needs transformers: pip install 'transformer_mt[hf]'"
