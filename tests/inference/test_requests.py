"""The request type: per-text counts checked once, naming the option; its rules."""

from __future__ import annotations

import pytest

from transformer_mt.errors import TmtError
from transformer_mt.inference.glossary import Glossary, Term
from transformer_mt.inference.requests import PER_TEXT_FIELDS, Texts, TextsCountError
from transformer_mt.inference.sentences import Segments, SplitLines

GLOSSARY = Glossary([Term("hund", "dog", "test:1")])


@pytest.mark.parametrize("field", PER_TEXT_FIELDS)
@pytest.mark.parametrize("given", [1, 3])
def test_an_option_not_given_once_per_text_is_refused_naming_it(field, given):
    values = {
        "prefixes": ["a"] * given,
        "directions": [("de", "en")] * given,
        "constraints": [["x"]] * given,
        "glossaries": [GLOSSARY] * given,
        "kept": [[(0, 1)]] * given,
    }
    with pytest.raises(TextsCountError) as caught:
        Texts.of(["eins", "zwei"], **{field: values[field]})
    assert (caught.value.field, caught.value.given, caught.value.n_texts) == (field, given, 2)
    assert caught.value.setting == field and isinstance(caught.value, TmtError | ValueError)
    assert str(caught.value) == f"{field}={given}: need one per text (2)"


def test_no_option_or_one_per_text_is_taken():
    assert Texts.of(["a", "b"]).prefixes is None
    assert Texts.of(["a", "b"], prefixes=["", "so"]).prefixes == ("", "so")


def test_options_are_read_per_text_with_their_defaults():
    texts = Texts.of(["ein hund", "zwei"], prefixes=["A", ""], glossary=GLOSSARY)
    assert [texts.prefix(i) for i in range(2)] == ["A", ""]
    assert [texts.direction(i) for i in range(2)] == [None, None]
    assert [texts.phrases(i) for i in range(2)] == [(), ()]
    assert texts.glossary(1) is GLOSSARY and len(texts) == 2
    assert Texts.plain(["x"]) == Texts(("x",)) and Texts.plain(texts) is texts
    with pytest.raises(TmtError, match="not both"):
        Texts.of(["x"], glossary=GLOSSARY, glossaries=[None])


def test_a_text_with_a_prefix_or_constraints_of_its_own_is_kept_whole():
    texts = Texts.of(
        ["a. b.", "a. b.", "a. b.", "a. b."],
        prefixes=["", "The", " ", ""],
        constraints=[[], [], [" "], ["dog"]],
    )
    assert [texts.keeps_whole(i) for i in range(4)] == [False, True, False, True]
    assert not Texts.of(["a. b."], glossary=GLOSSARY).keeps_whole(0)  # terms are per sentence


def test_sentence_phrases_are_the_text_constraints_then_the_terms_each_sentence_holds():
    texts = Texts.of(
        ["ein hund. eine katze.", "zwei"],
        constraints=[["pet"], []],
        glossaries=[GLOSSARY, GLOSSARY],
    )
    split = SplitLines(
        (Segments(("ein hund.", "eine katze."), ("", " ", "")), Segments.whole("zwei"))
    )
    phrases = texts.sentence_phrases(split)
    assert phrases == [["pet", "dog"], ["pet"], []]


def test_no_term_is_found_in_a_texts_kept_characters_whichever_sentence_holds_them():
    # Text 0 is a document unit "<code>hund</code> bellt. ein hund <code>x</code>. hund hund."
    # cut into three sentences; its kept characters count from the text's start.
    text = "hund bellt. ein hund x. hund hund."
    texts = Texts.of([text, "hund"], glossary=GLOSSARY, kept=[[(0, 4), (21, 22)], []])
    sentences = Segments(("hund bellt.", "ein hund x.", "hund hund."), ("", " ", " ", ""))
    split = SplitLines((sentences, Segments.whole("hund")))
    assert texts.sentence_phrases(split) == [[], ["dog"], ["dog"], ["dog"]]
    # The same sentence twice in a text: each is found at its own place.
    texts = Texts.of(["hund. hund."], glossary=GLOSSARY, kept=[[(6, 10)]])
    split = SplitLines((Segments(("hund.", "hund."), ("", " ", "")),))
    assert texts.sentence_phrases(split) == [["dog"], []]


@pytest.mark.parametrize("option", ["prefixes", "constraints"])
def test_a_report_cannot_keep_prefixes_or_constraints(option):
    given = {"prefixes": [""], "constraints": [[]]}[option]
    with pytest.raises(TmtError, match="report"):
        Texts.of(["x"], **{option: given}).refuse_report()
    Texts.of(["x"], glossary=GLOSSARY, directions=[("de", "en")]).refuse_report()


def test_picked_texts_keep_their_options():
    texts = Texts.of(["a", "b", "c"], prefixes=["1", "2", "3"], directions=[("de", "en")] * 3)
    part = texts.picked([2, 1, 2])
    assert part.texts == ("c", "b", "c") and part.prefixes == ("3", "2", "3")
    assert part.constraints is None and part.directions == (("de", "en"),) * 3
    assert texts.of_texts(["x", "y", "z"]).prefixes == texts.prefixes
    kept = Texts.of(["a b", "c"], kept=[[(2, 3)], []])
    assert kept.picked([1, 0]).kept == ((), ((2, 3),))
    assert kept.of_texts(["x", "y"]).kept is None  # it counts the characters of other texts
