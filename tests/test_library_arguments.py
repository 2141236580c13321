"""Library calls refuse an argument they would misread, naming it: one string where they take a
sequence of them (iterated, each character had been a text, a segment or an override of its
own), an export format they do not write; and loading a model leaves the caller's state alone."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from transformer_mt.config import load_config
from transformer_mt.documents.translate import translate_document
from transformer_mt.errors import SettingError
from transformer_mt.evaluation import CorpusScorer, corpus_scores
from transformer_mt.inference.glossary import Glossary
from transformer_mt.inference.requests import Texts
from transformer_mt.inference.scoring import score_pairs
from transformer_mt.inference.translator import Translator

REPO = Path(__file__).resolve().parents[1]
LONE = "a sequence of strings is wanted, not one string: put it in a list"


@pytest.fixture(scope="module")
def translator(checkpoint):
    return Translator.from_checkpoint(str(checkpoint))


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda t: t.translate("ein hund"), f"texts=ein hund: {LONE}"),
        (lambda t: t.translate(["ein hund", 2]), "texts[1]: int, not a string"),
        (
            lambda t: t.translate(Texts.of(["ein hund"], constraints=["the dog"])),
            f"constraints[0]=the dog: {LONE}",
        ),
        (lambda t: score_pairs(t, "ein hund", "a dog"), f"sources=ein hund: {LONE}"),
        (lambda t: score_pairs(t, ["ein hund"], ["a", "b"]), "targets: 2 for 1 sources"),
        (lambda t: translate_document(t, b"<p>x</p>", "html"), "document: bytes; give"),
        (
            lambda t: t.translate(Texts.of(["ein hund"], directions=["de-en"])),
            "directions[0]=de-en: expected a pair of two strings",
        ),
        (
            lambda t: t.translate(Texts.of(["ein hund"], directions=[("de", "en", "fr")])),
            "directions[0]=('de', 'en', 'fr'): expected a pair",
        ),
    ],
)
def test_a_translator_call_refuses_a_lone_string(translator, call, message):
    with pytest.raises(SettingError) as refused:
        call(translator)
    assert str(refused.value) == message or str(refused.value).startswith(message)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: corpus_scores("a dog.", "a cat."), f"hypotheses=a dog.: {LONE}"),
        (lambda: corpus_scores(["a"], ["a"], metrics="bleu"), f"metrics=bleu: {LONE}"),
        (lambda: corpus_scores(["a"], ["a"], metrics=[]), "metrics: none given"),
        (lambda: CorpusScorer().add("abc", "abd"), f"hypotheses=abc: {LONE}"),
        (
            lambda: load_config(REPO / "configs/multi30k_tiny.yaml", "train.max_steps=500"),
            f"overrides=train.max_steps=500: {LONE}",
        ),
    ],
)
def test_scoring_and_configs_refuse_a_lone_string(call, message):
    with pytest.raises(SettingError) as refused:
        call()
    assert str(refused.value).startswith(message)


def test_a_glossary_of_code_takes_a_mapping_and_refuses_what_is_not_pairs():
    """A dict had been read as its keys, each unpacked as two characters."""
    glossary = Glossary.of_pairs({"Hund": "dog", "Katze": "cat"})
    assert glossary.targets("Ein Hund und eine Katze") == ["dog", "cat"]
    with pytest.raises(SettingError, match=r"pairs\[1\]=\('Katze',\): expected a pair"):
        Glossary.of_pairs([("Hund", "dog"), ("Katze",)])
    with pytest.raises(SettingError, match="pairs=Hund: a sequence of pairs is wanted"):
        Glossary.of_pairs("Hund")


def test_a_model_of_an_empty_vocabulary_is_refused_naming_it():
    from transformer_mt.model import build_model

    model_cfg = load_config(REPO / "configs/multi30k_tiny.yaml").model
    with pytest.raises(ValueError, match="tgt_vocab_size=0: too small for pad_id=0"):
        build_model(model_cfg, 20, 0)


def test_an_unknown_export_format_is_refused_before_anything_is_written(checkpoint, tmp_path):
    """Any name but "hf" had written a CTranslate2 model."""
    from transformer_mt.interop.export import export

    with pytest.raises(SettingError, match="fmt=onnx: choose one of hf, ctranslate2"):
        export(checkpoint, tmp_path / "out", "onnx", None)
    assert not (tmp_path / "out").exists()


def test_loading_a_translator_leaves_the_callers_random_numbers_alone(checkpoint):
    """Building the model drew its initial weights from torch's generator, which loading then
    replaced: a caller's seeded draws after it had changed."""
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    Translator.from_checkpoint(str(checkpoint))
    assert torch.equal(torch.rand(3), expected)


@pytest.mark.parametrize(
    "path, device, message",
    [
        ([], "cpu", "path: no checkpoint given"),
        (None, "gpu", "device=gpu: choose auto, cpu or cuda"),
    ],
)
def test_a_translator_of_no_checkpoint_or_an_unknown_device_is_refused(
    checkpoint, path, device, message
):
    with pytest.raises(SettingError, match=message):
        Translator.from_checkpoint(str(checkpoint) if path is None else path, device=device)


def test_a_generator_of_strings_is_read_once_and_taken_whole(translator):
    """The check reads the items it passes on: a generator it had used up left nothing to
    translate, score or apply."""
    from transformer_mt.config.loading import apply_overrides

    assert len(translator.translate(line for line in ["ein hund", "ein mann"])) == 2
    assert apply_overrides({"train": {}}, (o for o in ["train.lr=1"])) == {"train": {"lr": 1}}
    (score,) = corpus_scores((h for h in ["a b c d"]), ["a b c d"], (m for m in ["bleu"]))
    assert score.score == pytest.approx(100.0)
