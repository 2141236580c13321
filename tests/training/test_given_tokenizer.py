"""`tmt train` with a SentencePiece model trained elsewhere (`tokenizer.model_file`): the run
trains, resumes and translates with the model's own segmentation; a bad model file is refused
in one line before the run directory is made."""

from __future__ import annotations

import io
import logging
import re
from pathlib import Path

import pytest
import sentencepiece as spm
import yaml

from transformer_mt.artifacts import load_checkpoint, load_for_inference
from transformer_mt.cli import main
from transformer_mt.config import ExperimentConfig, TokenizerConfig
from transformer_mt.input_files import config_input_files
from transformer_mt.training.footprint import parameter_count

from .conftest import write_config, write_corpus


def given_model(tmp_path: Path, vocab_size: int = 50) -> Path:
    """A unigram model with spm_train's own ids (unk 0, bos 1, eos 2, no pad) on the corpus."""
    lines = []
    for line in (tmp_path / "train.tsv").read_text(encoding="utf-8").splitlines():
        lines += line.split("\t")
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_writer=model, vocab_size=vocab_size, minloglevel=2
    )
    path = tmp_path / "team.model"
    path.write_bytes(model.getvalue())
    return path


def experiment(tmp_path: Path, tokenizer: dict) -> Path:
    write_corpus(tmp_path)
    path = write_config(tmp_path)
    sections = yaml.safe_load(path.read_text(encoding="utf-8"))
    sections["tokenizer"] = tokenizer
    path.write_text(yaml.safe_dump(sections), encoding="utf-8")
    return path


def test_trains_resumes_and_translates_with_the_given_model(tmp_path, capsys, caplog):
    write_corpus(tmp_path)
    original = spm.SentencePieceProcessor(model_file=str(given_model(tmp_path)))
    config = experiment(tmp_path, {"model_file": str(tmp_path / "team.model")})
    run_dir = tmp_path / "run"
    args = ["train", "--config", str(config), "--run-dir", str(run_dir), "--set"]
    assert main([*args, "train.max_steps=4"]) == 0
    with caplog.at_level(logging.WARNING):
        assert main([*args, "train.max_steps=8"]) == 0  # resumes
    assert "not the tokenizer model" not in caplog.text
    assert load_checkpoint(run_dir / "checkpoints" / "last.pt").step == 8
    [saved] = run_dir.glob("spm-joint-*.model")
    bundle = load_for_inference(run_dir / "checkpoints" / "last.pt", "cpu")
    tok = bundle.src_tokenizer
    assert tok.model_bytes == saved.read_bytes()
    assert tok.vocab_size == original.get_piece_size() + 1  # a pad piece added
    assert bundle.model.output_projection.out_features == tok.vocab_size
    text = ["der hund sieht die katze", "das rote auto"]
    assert tok._sp.encode(text, out_type=str) == original.encode(text, out_type=str)
    (tmp_path / "in.de").write_text("\n".join(text) + "\n", encoding="utf-8")
    translate = ["translate", "--checkpoint", str(run_dir / "checkpoints" / "last.pt")]
    assert main([*translate, "--input", str(tmp_path / "in.de"), "--beam-size", "2"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 2


def test_a_model_file_replaced_before_resuming_is_named_and_not_used(tmp_path, caplog):
    """The checkpoint's tokenizer stays: its weights were trained on its ids."""
    write_corpus(tmp_path)
    given_model(tmp_path)
    config = experiment(tmp_path, {"model_file": str(tmp_path / "team.model")})
    run_dir = tmp_path / "run"
    args = ["train", "--config", str(config), "--run-dir", str(run_dir), "--set"]
    assert main([*args, "train.max_steps=4"]) == 0
    started = load_checkpoint(run_dir / "checkpoints" / "last.pt").tokenizers
    given_model(tmp_path, vocab_size=40)
    with caplog.at_level(logging.WARNING):
        assert main([*args, "train.max_steps=6"]) == 0
    assert f"tokenizer.model_file {tmp_path / 'team.model'}: not the tokenizer model" in caplog.text
    assert load_checkpoint(run_dir / "checkpoints" / "last.pt").tokenizers == started


def test_a_bad_model_file_is_refused_before_the_run_directory(tmp_path, capsys):
    config = experiment(tmp_path, {"model_file": str(tmp_path / "corpus.de")})
    (tmp_path / "corpus.de").write_text("ein Satz\n", encoding="utf-8")
    run_dir = tmp_path / "run"
    assert main(["train", "--config", str(config), "--run-dir", str(run_dir)]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith(f"error: tokenizer.model_file {tmp_path / 'corpus.de'}: not a ")
    assert "SentencePiece model" in err[-1]
    assert not run_dir.exists()


def test_a_model_refused_once_the_run_began_leaves_no_run_directory(tmp_path, capsys):
    """bpe_dropout on a unigram model is found when the model is read, inside the run; the
    directory made for it is removed again, as it holds nothing."""
    write_corpus(tmp_path)
    given_model(tmp_path)
    tokenizer = {"model_file": str(tmp_path / "team.model"), "bpe_dropout": 0.1}
    config = experiment(tmp_path, tokenizer)
    run_dir = tmp_path / "runs" / "new"
    assert main(["train", "--config", str(config), "--run-dir", str(run_dir)]) == 2
    assert "needs a BPE model, and this one is unigram" in capsys.readouterr().err
    assert not run_dir.exists()


def test_the_given_model_is_an_input_and_sizes_the_model(tmp_path):
    write_corpus(tmp_path)
    path = given_model(tmp_path)
    config = ExperimentConfig(tokenizer=TokenizerConfig(model_file=str(path)))
    assert (path, "tokenizer model (tokenizer.model_file) of x.yaml") in config_input_files(
        config, "x.yaml"
    )
    small = parameter_count(config, None)
    large = parameter_count(ExperimentConfig(tokenizer=TokenizerConfig(vocab_size=8000)), None)
    # The embedding (shared, tied) has 50 rows, not tokenizer.vocab_size's 8000.
    assert large - small == (8000 - 50) * config.model.d_model


def separate_models(tmp_path: Path, target_lines: list[str]) -> Path:
    """The experiment of the corpus with the source model of `given_model` and a target model
    (BPE, as small as its text allows) trained on `target_lines` alone."""
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(target_lines),
        model_writer=model,
        vocab_size=30,
        hard_vocab_limit=False,
        minloglevel=2,
    )
    (tmp_path / "target.model").write_bytes(model.getvalue())
    tokenizer = {
        "joint": False,
        "model_file": given_model(tmp_path).as_posix(),
        "tgt_model_file": (tmp_path / "target.model").as_posix(),
    }
    config = experiment(tmp_path, tokenizer)
    sections = yaml.safe_load(config.read_text(encoding="utf-8"))
    sections["model"]["share_embeddings"] = False
    config.write_text(yaml.safe_dump(sections), encoding="utf-8")
    return config


@pytest.mark.parametrize("streaming", [False, True])
def test_a_target_tokenizer_of_another_script_is_refused(tmp_path, capsys, streaming):
    """Each target word is "▁" then <unk>: the model would learn to write nothing else."""
    write_corpus(tmp_path)
    config = separate_models(tmp_path, ["αβγ δεζ ηθι κλμ", "νξο πρσ τυφ χψω"] * 50)
    run_dir = tmp_path / "run"
    args = ["train", "--config", str(config), "--run-dir", str(run_dir)]
    assert main([*args, "--set", f"data.streaming={str(streaming).lower()}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == (
        f"error: {tmp_path / 'train.tsv'}: 100.0% of the target side's pieces are the unknown "
        "piece: its tokenizer lacks the characters of this text (a tokenizer.model_file made "
        "for another language or script?); a model trained on it writes little but <unk>"
    )
    assert not (run_dir / "checkpoints").exists()


def test_a_target_tokenizer_lacking_a_letter_is_warned_of(tmp_path, caplog):
    write_corpus(tmp_path)
    targets = [line.split("\t")[1] for line in (tmp_path / "train.tsv").read_text().splitlines()]
    config = separate_models(
        tmp_path, [" ".join(w for w in line.split() if "w" not in w) for line in targets]
    )
    args = ["train", "--config", str(config), "--run-dir", str(tmp_path / "run")]
    with caplog.at_level(logging.WARNING):
        assert main([*args, "--set", "train.max_steps=4"]) == 0
    [warning] = [r.getMessage() for r in caplog.records if "unknown piece" in r.getMessage()]
    assert re.fullmatch(
        rf"{re.escape(str(tmp_path / 'train.tsv'))}: \d\.\d% of the target side's pieces are the "
        r"unknown piece: .*; each is trained as <unk>",
        warning,
    )
