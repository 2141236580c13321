"""Validation BLEU goes through the translation pipeline: the same number as `tmt translate`
+ `tmt evaluate` (and run_experiment's Translator + evaluation), and no crash on valid lines
longer than the position table."""

from __future__ import annotations

import torch

from transformer_mt.artifacts import load_for_inference
from transformer_mt.cli import main
from transformer_mt.evaluation import corpus_scores, evaluate_files
from transformer_mt.inference.translator import Translator
from transformer_mt.training import validation
from transformer_mt.training.metrics import read_metrics
from transformer_mt.training.run import run_training
from transformer_mt.training.validation import greedy_bleu

from ..conftest import WORDS
from .conftest import write_config, write_corpus


def test_validation_bleu_is_translate_plus_evaluate_of_the_same_checkpoint(tmp_path):
    write_corpus(tmp_path, n_train=300)
    config = str(write_config(tmp_path, train="max_steps: 40, valid_every: 40"))
    run = tmp_path / "run"
    assert run_training(config, str(run)) == 0
    (valid,) = [r for r in read_metrics(run / "metrics.jsonl") if r["kind"] == "valid"]
    assert valid["bleu"] > 0.0  # moved by every hypothesis; the weights are last.pt's
    assert 0.0 < valid["seconds"] < 60.0  # the validation's own time, in its row and the log
    pairs = [line.split("\t") for line in (tmp_path / "valid.tsv").read_text().splitlines()]
    source, reference, hypotheses = tmp_path / "valid.src", tmp_path / "valid.ref", tmp_path / "hyp"
    source.write_text("".join(s + "\n" for s, _ in pairs), encoding="utf-8")
    reference.write_text("".join(t + "\n" for _, t in pairs), encoding="utf-8")
    last = run / "checkpoints" / "last.pt"

    args = ["--checkpoint", str(last), "--beam-size", "1", "--input", str(source)]
    assert main(["translate", *args, "--output", str(hypotheses)]) == 0
    (cli_bleu,) = evaluate_files(hypotheses, reference, ["bleu"])
    translator = Translator.from_checkpoint(str(last), beam_size=1)  # run_experiment's path
    translations = [t.texts[0] for t in translator.translate([s for s, _ in pairs])]
    (library_bleu,) = corpus_scores(translations, [t for _, t in pairs], ["bleu"])
    assert valid["bleu"] == cli_bleu.score == library_bleu.score


def test_a_bf16_run_validates_its_translations_in_float32(tmp_path, monkeypatch):
    """Training under bf16 autocast measures its validation loss so, but searches as `tmt
    translate` does, in float32: bf16 products change some greedy words, and so the BLEU that
    picks best.pt (0.29 BLEU on 60 Multi30k valid lines of a small model)."""
    searched_under = []

    def recording(*args, **kwargs):
        searched_under.append(torch.is_autocast_enabled("cpu"))
        return greedy_bleu(*args, **kwargs)

    monkeypatch.setattr(validation, "greedy_bleu", recording)
    write_corpus(tmp_path, n_train=120)
    config = str(write_config(tmp_path, train="max_steps: 4, precision: bf16"))
    assert run_training(config, str(tmp_path / "run")) == 0
    assert searched_under == [False]


def test_a_valid_line_longer_than_the_position_table_is_translated_truncated(checkpoint):
    bundle = load_for_inference(checkpoint)
    long_line = " ".join(WORDS * 10)  # far beyond max_positions=64
    assert len(bundle.src_tokenizer.encode(long_line)) > bundle.config.model.max_positions
    tokenizers = (bundle.src_tokenizer, bundle.tgt_tokenizer)
    bleu = greedy_bleu(
        bundle.model, [long_line, "ein mann"], ["a man", "a man"], tokenizers,
        bundle.specials, bundle.config.decode, torch.device("cpu"),
    )  # fmt: skip
    assert 0.0 <= bleu <= 100.0


def test_long_valid_pairs_do_not_stop_the_first_validation(tmp_path, caplog):
    write_corpus(tmp_path, n_train=120)
    long_pair = " ".join(["katze"] * 50) + "\t" + " ".join(["cat"] * 50)
    with open(tmp_path / "valid.tsv", "a", encoding="utf-8") as f:
        f.write(long_pair + "\n")
    config = str(write_config(tmp_path, train="max_steps: 4", model="max_positions: 40"))
    overrides = ["data.max_len=20", "decode.max_len_a=1.0"]
    assert run_training(config, str(tmp_path / "run"), overrides) == 0
    valid = [r for r in read_metrics(tmp_path / "run/metrics.jsonl") if r["kind"] == "valid"]
    assert valid[-1]["bleu"] is not None and valid[-1]["loss"] > 0
    assert "validation loss leaves out 1 of 21 pairs" in caplog.text
