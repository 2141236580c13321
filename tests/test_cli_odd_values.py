"""Names, bytes and records that a user did not mean, or that the system refuses: each is one
`error:` line naming what is wrong (or, where the system takes it, the work is done)."""

import json
import os
from pathlib import Path

import pytest

from tests.conftest import make_run_dir, without_notes
from tests.test_cli_hostile import _tmt, one_error_line
from transformer_mt.cli import main

TOO_LONG = "a" * 300  # one path component over NAME_MAX (255 bytes)


@pytest.fixture
def texts(tmp_path):
    """Two parallel one-sentence files: (de, en)."""
    de, en = tmp_path / "in.de", tmp_path / "in.en"
    de.write_text("das buch\n", encoding="utf-8")
    en.write_text("the book\n", encoding="utf-8")
    return de, en


@pytest.mark.parametrize("which", ["--output", "--input"])
def test_a_file_name_over_255_bytes_is_one_line(checkpoint, texts, tmp_path, capsys, which):
    paths = {"--input": str(texts[0]), "--output": str(tmp_path / "out.txt")}
    paths[which] = str(tmp_path / TOO_LONG)
    args = ["translate", "--checkpoint", str(checkpoint), "--beam-size", "1"]
    assert main([*args, "--input", paths["--input"], "--output", paths["--output"]]) == 2
    assert one_error_line(capsys).endswith(f"{TOO_LONG}: File name too long\n")


def test_plot_of_a_run_name_over_255_bytes_is_one_line(tmp_path, capsys):
    assert main(["plot", str(tmp_path / TOO_LONG)]) == 2
    assert "File name too long" in one_error_line(capsys)


def test_an_output_name_that_is_not_utf8_is_written(checkpoint, texts, tmp_path):
    """Linux file names are bytes; Python hands a non-UTF-8 one over as lone surrogates."""
    out = os.fsdecode(os.fsencode(str(tmp_path)) + b"/\xff.txt")
    args = ["translate", "--checkpoint", str(checkpoint), "--beam-size", "1"]
    assert main([*args, "--input", str(texts[0]), "--output", out]) == 0
    assert Path(out).read_text(encoding="utf-8").count("\n") == 1


@pytest.mark.parametrize("flag", ["--src", "--tgt"])
def test_attention_of_text_that_is_not_utf8_is_one_line(checkpoint, tmp_path, capsys, flag):
    pytest.importorskip("matplotlib")
    text = {"--src": "das buch", "--tgt": "the book"}
    text[flag] = os.fsdecode(b"das \xff buch")
    args = ["attention", "--checkpoint", str(checkpoint), "--out", str(tmp_path / "a.png")]
    assert main([*args, "--src", text["--src"], "--tgt", text["--tgt"]]) == 2
    assert (
        one_error_line(capsys) == f"error: {flag}: not valid UTF-8 text; give the text in UTF-8\n"
    )
    assert not (tmp_path / "a.png").exists()


def test_a_config_with_a_control_character_is_one_line(tmp_path, capsys):
    config = tmp_path / "c.yaml"
    config.write_bytes(b"train:\n  lr: 1.0e-3\x00\n")
    assert main(["train", "--config", str(config), "--run-dir", str(tmp_path / "run")]) == 2
    err = one_error_line(capsys)
    assert err.startswith(f"error: {config}: not valid YAML (unacceptable character #x0000")


@pytest.mark.parametrize("value", [{"a": 1}, [1, 2], "abc", True])
def test_plot_of_a_loss_that_is_not_a_number_is_one_line(tmp_path, capsys, value):
    pytest.importorskip("matplotlib")
    run = make_run_dir(tmp_path)
    with open(run / "metrics.jsonl", "a", encoding="utf-8") as f:
        f.write(json.dumps({"kind": "train", "step": 7, "loss": value, "lr": 1e-3}) + "\n")
        f.write(json.dumps({"kind": "train", "step": 8, "loss": 2.0, "lr": 1e-3}) + "\n")
    assert main(["plot", str(run), "--out", str(tmp_path / "c.png")]) == 2
    err = one_error_line(capsys)
    assert f"metrics.jsonl: the train row of step 7 has loss {json.dumps(value)}, not a" in err
    assert not (tmp_path / "c.png").exists()


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full (Linux)")
@pytest.mark.parametrize("command", ["score", "evaluate"])
def test_a_full_stdout_is_named(checkpoint, texts, command):
    de, en = texts
    args = {
        "score": f"score --checkpoint {checkpoint} --src {de} --tgt {en}",
        "evaluate": f"evaluate --hyp {en} --ref {en}",
    }[command]
    result = _tmt(f"{args} > /dev/full")
    assert result.returncode == 1, result.stderr
    assert without_notes(result.stderr) == "error: <stdout>: No space left on device\n"


def test_evaluate_with_stdout_closed_is_one_line(texts):
    result = _tmt(f"evaluate --hyp {texts[1]} --ref {texts[1]} >&-")
    assert result.returncode == 2, result.stderr
    assert without_notes(result.stderr) == "error: <stdout>: is closed; redirect it\n"


@pytest.mark.parametrize(
    "flags, named",
    [
        (["--beam-size", "4"], "--beam-size"),
        (["--directions", "de-en"], "--directions"),
        (["--no-off-target"], "--no-off-target"),
        (["--pivot", "en"], "--pivot"),
    ],
)
def test_evaluate_of_files_refuses_the_flags_of_a_checkpoint(texts, capsys, flags, named):
    hyp = str(texts[1])
    assert main(["evaluate", "--hyp", hyp, "--ref", hyp, *flags]) == 2
    assert f"error: evaluate: {named} goes with --checkpoint" in one_error_line(capsys)


@pytest.mark.parametrize(
    "flags, named", [(["--metrics", "ter"], "--metrics"), (["--lowercase"], "--lowercase")]
)
def test_evaluate_of_a_checkpoint_refuses_the_flags_of_files(checkpoint, capsys, flags, named):
    """Its table scores BLEU and chrF as cased: the flags would be ignored."""
    assert main(["evaluate", "--checkpoint", str(checkpoint), *flags]) == 2
    assert f"error: evaluate: {named} goes with --hyp and --ref, not with" in one_error_line(capsys)


def test_export_into_a_folder_of_other_files_is_one_line(checkpoint, tmp_path):
    pytest.importorskip("transformers")
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "NOTES.txt").write_text("keep me", encoding="utf-8")
    result = _tmt(f"export --format hf {checkpoint} {folder}")
    assert result.returncode == 2, result.stderr
    assert without_notes(result.stderr) == (
        f"error: {folder}: holds NOTES.txt, which would be lost; write into a new or empty "
        "directory\n"
    )
    assert sorted(p.name for p in folder.iterdir()) == ["NOTES.txt"]


def test_a_glossary_with_sampling_is_refused_before_translating(checkpoint, tmp_path, capsys):
    """Constraints are met by beam search; the refusal came at the first line holding a term."""
    (tmp_path / "in.txt").write_text("das buch\n", encoding="utf-8")
    (tmp_path / "terms.tsv").write_text("Hund\tdog\n", encoding="utf-8")
    args = ["--input", str(tmp_path / "in.txt"), "--glossary", str(tmp_path / "terms.tsv")]
    assert main(["translate", "--checkpoint", str(checkpoint), *args, "--sampling"]) == 2
    assert one_error_line(capsys) == (
        "error: --glossary: met by beam search only, and the search samples; add "
        "--no-sampling or drop it\n"
    )


def test_checkpoints_of_other_vocabularies_are_named_by_the_flag(
    checkpoint, multilingual_checkpoint, tmp_path, capsys
):
    (tmp_path / "in.txt").write_text("das buch\n", encoding="utf-8")
    both = [str(checkpoint), str(multilingual_checkpoint)]
    assert main(["translate", "--checkpoint", *both, "--input", str(tmp_path / "in.txt")]) == 2
    assert one_error_line(capsys).startswith(f"error: --checkpoint {multilingual_checkpoint}: ")


def test_a_damaged_distillation_manifest_is_named_in_words(tmp_path):
    from transformer_mt.distill.manifest import Manifest
    from transformer_mt.errors import TmtError

    path = tmp_path / "manifest.json"
    for text, said in [
        ("[1, 2]", "a JSON list, not an object of fields"),
        ('{"teacher": "x", "extra": 1}', "no teacher_sha256, corpus, corpus_sha256"),
        ('{"decode": 5}', "its decode is not a mapping of settings"),
    ]:
        path.write_text(text, encoding="utf-8")
        with pytest.raises(TmtError, match=f"manifest.json: not a distillation manifest .{said}"):
            Manifest.read(path)
