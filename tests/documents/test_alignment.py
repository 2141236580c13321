"""Word alignments from a Translator's cross-attention (documents/alignment.py)."""

import random
import re

import pytest

from transformer_mt.documents import FORMATS
from transformer_mt.documents.alignment import AlignedTranslator, word_numbers
from transformer_mt.documents.translate import _TRANSLATE, translate_document
from transformer_mt.documents.units import WORD, Unit, UnitTexts
from transformer_mt.errors import SettingError
from transformer_mt.inference.requests import Texts
from transformer_mt.inference.translation import Translation
from transformer_mt.inference.translator import Translator

from ..conftest import WORDS


def test_subwords_are_numbered_by_the_word_they_belong_to(translator):
    tokenizer = translator.src_tokenizer
    text = "ein mann fährt schneeschnee"
    numbers = word_numbers(tokenizer, text, tokenizer.encode(text))
    assert numbers[0] == 0 and numbers[-1] == 3
    assert numbers == sorted(numbers) and set(numbers) == {0, 1, 2, 3}


# SentencePiece's normalisation reads these as a word break (a spacing accent as a space and a
# combining accent), where the text, as placement counts its words, has none.
ZERO_WIDTH = ["\u200b", "\u200c", "\ufeff"]
BREAKS = [*ZERO_WIDTH, "\u00b4", "\u00a8", "\u02dc", "\u02da"]


@pytest.mark.parametrize("char", BREAKS)
def test_subwords_are_numbered_by_the_texts_words_not_sentencepieces(translator, char):
    tokenizer = translator.src_tokenizer
    text = f"ein{char}mann fährt \u200b rad"
    ids = tokenizer.encode(text)
    assert sum(tokenizer.id_to_piece(i).startswith("\u2581") for i in ids) == 4  # ▁ein ▁mann
    numbers = word_numbers(tokenizer, text, ids)
    assert numbers == sorted(numbers) and set(numbers) == {0, 1, 3}  # "\u200b" alone: none
    assert numbers[-1] == 3 and numbers.count(3) == len(tokenizer.encode("rad"))


@pytest.mark.parametrize("char", ZERO_WIDTH)
def test_a_zero_width_character_in_a_word_leaves_the_links_on_that_word(translator, char):
    # The model reads "zwei{char}hunde" as "zwei hunde" (the same subwords), on either side:
    # the links are the same, and the two words SentencePiece sees are one word of the text.
    aligned = AlignedTranslator(translator)
    source, target = "zwei hunde spielen im schnee", "schnee im spielen hunde zwei"
    plain = aligned.align(source, target).pairs
    assert {s for s, _ in plain} - {0}  # links beyond the first word, which would move
    joined = aligned.align(source.replace(" ", char, 1), target).pairs
    assert set(joined) == {(max(s - 1, 0), t) for s, t in plain}
    joined = aligned.align(source, target.replace(" ", char, 1)).pairs
    assert set(joined) == {(s, max(t - 1, 0)) for s, t in plain}


def test_every_target_word_is_linked_to_a_source_word(translator):
    source = "zwei hunde spielen im schnee"
    (aligned,) = AlignedTranslator(translator)(UnitTexts([Unit(source, ())]))
    assert aligned.text == translator.translate([source])[0].texts[0]
    n_target = len(aligned.text.split())
    assert {t for _, t in aligned.pairs} == set(range(n_target))
    assert all(0 <= s < 5 for s, _ in aligned.pairs)


def _blocks(text: str, spans) -> list[int]:
    """The sentence (index into `spans`) each word of `text` starts in."""
    return [
        next(n for n, (a, b) in enumerate(spans) if a <= m.start() < b)
        for m in re.finditer(r"\S+", text)
    ]


def test_a_unit_longer_than_the_position_table_is_aligned_sentence_by_sentence(translator):
    rng = random.Random(1)
    sentences = [" ".join(rng.sample(WORDS, 5)).capitalize() + "." for _ in range(12)]
    unit = " ".join(sentences)
    assert len(translator.src_tokenizer.encode(unit)) > translator.model.cfg.max_positions
    (translation,) = translator.translate([unit])
    (aligned,) = AlignedTranslator(translator)(UnitTexts([Unit(unit, ())]))
    assert aligned.text == translation.texts[0]
    src_blocks = _blocks(unit, [src for src, _ in translation.sentences])
    tgt_blocks = _blocks(aligned.text, [tgt for _, tgt in translation.sentences])
    assert all(src_blocks[s] == tgt_blocks[t] for s, t in aligned.pairs)  # within a sentence
    assert {t for _, t in aligned.pairs} == set(range(len(tgt_blocks)))  # every target word
    assert {src_blocks[s] for s, _ in aligned.pairs} == set(range(12))  # the last ones too


def test_sentences_met_without_a_space_number_their_words_in_the_unit(translator):
    source, target = "zwei hunde.ein mann", "mann ein.hunde zwei"  # 3 words each
    sentences = (((0, 11), (0, 9)), ((11, 19), (9, 19)))
    pairs = (
        AlignedTranslator(translator)
        .aligned(source, Translation([target], [0.0], sentences=sentences))
        .pairs
    )
    first = {(s, t) for s in (0, 1) for t in (0, 1)}  # "hunde.ein" is word 1 of both sentences
    second = {(s, t) for s in (1, 2) for t in (1, 2)}
    assert pairs and set(pairs) <= first | second
    assert {t for _, t in pairs} == {0, 1, 2}


@pytest.mark.parametrize(
    "text", ["私は学生です。", "これはgitです。", "私は学生です。 彼は医者です", "鬱"]
)
def test_subwords_of_japanese_are_numbered_by_the_character_they_stand_for(
    japanese_tokenizer, text
):
    """Japanese has no spaces: each character is a word of the text, and a subword of several
    characters belongs to the first of them, so that markup around one word of a sentence
    goes around its translation only, not the whole sentence's."""
    words = WORD.findall(text)
    ids = japanese_tokenizer.encode(text)
    numbers = word_numbers(japanese_tokenizer, text, ids)
    characters = [(char, n) for n, word in enumerate(words) for char in word]
    expected, at, byte = [], 0, 0  # the character each subword starts at, and its byte
    for token in ids:
        expected.append(characters[at][1])
        piece = japanese_tokenizer.id_to_piece(token).removeprefix("\u2581")
        if piece.startswith("<0x"):  # one UTF-8 byte (鬱, git): the character's last moves on
            byte += 1
            if byte == len(characters[at][0].encode()):
                at, byte = at + 1, 0
        else:
            at += len(piece)
    assert numbers == expected
    assert len(set(numbers)) > 1 or len(words) == 1


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
