"""Word alignments from a Translator's cross-attention (documents/alignment.py)."""

import pytest

from transformer_mt.documents import FORMATS
from transformer_mt.documents.alignment import AlignedTranslator, word_numbers
from transformer_mt.documents.translate import _TRANSLATE, translate_document
from transformer_mt.errors import SettingError
from transformer_mt.inference.requests import Texts
from transformer_mt.inference.translator import Translator

from ..conftest import WORDS


def test_subwords_are_numbered_by_the_word_they_belong_to(translator):
    tokenizer = translator.src_tokenizer
    ids = tokenizer.encode("ein mann fährt schneeschnee")
    numbers = word_numbers(tokenizer, ids)
    assert numbers[0] == 0 and numbers[-1] == 3
    assert numbers == sorted(numbers) and set(numbers) == {0, 1, 2, 3}


def test_every_target_word_is_linked_to_a_source_word(translator):
    source = "zwei hunde spielen im schnee"
    (aligned,) = AlignedTranslator(translator)([source])
    assert aligned.text == translator.translate([source])[0].texts[0]
    n_target = len(aligned.text.split())
    assert {t for _, t in aligned.pairs} == set(range(n_target))
    assert all(0 <= s < 5 for s, _ in aligned.pairs)


def test_a_truncated_block_is_counted_once(translator):
    translate_document(translator, f"<p>{' '.join(WORDS * 10)}</p><p>ein mann</p>", "html")
    assert translator.encoding.truncated_lines == 1


def test_a_document_in_another_direction_of_a_multilingual_model(multilingual_checkpoint):
    translator = Translator.from_checkpoint(str(multilingual_checkpoint), beam_size=1)
    out = translate_document(
        translator, Texts.of(["<p>ein mann</p>"], directions=[("en", "de")]), "html"
    )
    alone = translator.translate(Texts.of(["ein mann"], directions=[("en", "de")]))[0].texts[0]
    assert out == f"<p>{alone}</p>"


def test_bad_settings_name_themselves(translator):
    with pytest.raises(SettingError) as caught:
        translate_document(translator, "<p>x</p>", "html", alignment_layer=3)
    assert caught.value.setting == "alignment_layer"
    with pytest.raises(SettingError) as caught:
        translate_document(translator, "x", "pdf")
    assert str(caught.value) == "format=pdf: choose one of html, markdown"
    assert tuple(_TRANSLATE) == FORMATS
