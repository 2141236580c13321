"""A model's directions (trained, zero-shot, default) and the Translator translating each line
in its own direction: the same as a Translator made for that direction alone."""

import pytest

from transformer_mt.errors import SettingError
from transformer_mt.inference.line_settings import LineSettings
from transformer_mt.inference.requests import Texts
from transformer_mt.inference.translator import Translator

from ..conftest import MULTILINGUAL, WORDS

LINES = [" ".join(WORDS[i : i + 2 + i % 5]) for i in range(0, len(WORDS), 2)]


def test_a_tagged_model_offers_every_pair_of_its_languages(multilingual_checkpoint):
    languages = Translator.from_checkpoint(str(multilingual_checkpoint)).languages
    assert languages.default == ("de", "en")
    assert languages.trained == MULTILINGUAL
    assert languages.zero_shot == (("de", "fr"), ("fr", "de"))
    assert languages.codes == ("de", "en", "fr")
    assert languages.sources("en") == ("de", "fr")
    languages.check("fr", "de")


def test_the_default_direction_follows_the_languages_asked_for(multilingual_checkpoint):
    languages = Translator.from_checkpoint(
        str(multilingual_checkpoint), lines=LineSettings(tgt_lang="fr")
    ).languages
    assert languages.default == ("de", "fr")


@pytest.mark.parametrize(
    ("src_lang", "tgt_lang", "message"),
    [
        ("de", "cs", "tgt_lang=cs: the model has no such language; it knows de, en, fr"),
        ("cs", "en", "src_lang=cs: the model has no such language; it knows de, en, fr"),
        ("en", "en", "tgt_lang=en: the model does not translate en->en; it translates de->en"),
    ],
)
def test_a_direction_the_model_lacks_is_named(multilingual_checkpoint, src_lang, tgt_lang, message):
    languages = Translator.from_checkpoint(str(multilingual_checkpoint)).languages
    with pytest.raises(SettingError, match=message):
        languages.check(src_lang, tgt_lang)


def test_a_model_without_tags_translates_its_trained_direction_only(checkpoint):
    languages = Translator.from_checkpoint(str(checkpoint)).languages
    assert (languages.default, languages.directions) == (("de", "en"), (("de", "en"),))
    with pytest.raises(SettingError, match="tgt_lang=fr: the model has no such language"):
        languages.check("de", "fr")
    with pytest.raises(
        SettingError, match="the model does not translate en->de; it translates de->en$"
    ):
        languages.check("en", "de")
    # Asked for another language, it refuses (as the server does) instead of translating
    # into its own; its own languages given explicitly are fine.
    with pytest.raises(SettingError, match="tgt_lang=fr: the model has no such language"):
        Translator.from_checkpoint(str(checkpoint), lines=LineSettings(tgt_lang="fr"))
    assert Translator.from_checkpoint(
        str(checkpoint), lines=LineSettings(src_lang="de", tgt_lang="en")
    )


def test_a_tagged_model_asked_for_a_language_into_itself_refuses(multilingual_checkpoint):
    """As the server does: it has the tags, not the direction (de->de would translate)."""
    with pytest.raises(SettingError, match="the model does not translate de->de"):
        Translator.from_checkpoint(
            str(multilingual_checkpoint), lines=LineSettings(src_lang="de", tgt_lang="de")
        )


@pytest.mark.parametrize("beam_size", [1, 3])
def test_lines_of_many_directions_translate_as_one_direction_at_a_time(
    multilingual_checkpoint, beam_size
):
    path = str(multilingual_checkpoint)
    pairs = [MULTILINGUAL[i % 4] if i % 5 else ("de", "fr") for i in range(len(LINES))]
    prefixes = ["" if i % 3 else WORDS[i] for i in range(len(LINES))]
    mixed = Translator.from_checkpoint(path, beam_size=beam_size)
    got = mixed.translate(Texts.of(LINES, prefixes=prefixes, directions=pairs))
    for target in ("en", "de", "fr"):
        source = "en" if target == "de" else "de"  # a direction the model offers
        alone = Translator.from_checkpoint(
            path, beam_size=beam_size, lines=LineSettings(src_lang=source, tgt_lang=target)
        )
        rows = [i for i, (_, tgt) in enumerate(pairs) if tgt == target]
        expected = alone.translate(
            Texts.of([LINES[i] for i in rows], prefixes=[prefixes[i] for i in rows])
        )
        assert [got[i].texts for i in rows] == [e.texts for e in expected]
        scores = [score for e in expected for score in e.scores]
        assert [score for i in rows for score in got[i].scores] == pytest.approx(scores, abs=1e-5)
    into = {
        tgt: mixed.translate(Texts.of(LINES[:4], directions=[("de", tgt)] * 4))
        for tgt in ("en", "fr")
    }
    assert [t.texts for t in into["en"]] != [t.texts for t in into["fr"]]  # the tag matters


def test_a_typed_tag_never_switches_a_line_s_direction(multilingual_checkpoint):
    """As in `tmt translate --tgt-lang en`: the tag is taken out and counted."""
    path, line = str(multilingual_checkpoint), f">>fr<< {LINES[0]}"
    mixed = Translator.from_checkpoint(path, beam_size=1)
    (got,) = mixed.translate(Texts.of([line], directions=[("de", "en")]))
    assert mixed.encoding.tagged_lines == 1
    english = Translator.from_checkpoint(path, beam_size=1, lines=LineSettings(tgt_lang="en"))
    assert got.texts == english.translate([line])[0].texts
    tags = mixed.specials.language_tags
    ids = mixed.encoding.source_ids(line, mixed.direction("de", "en"))
    assert ids[0] == tags["en"] and tags["fr"] not in ids


def test_one_direction_per_line(multilingual_checkpoint):
    translator = Translator.from_checkpoint(str(multilingual_checkpoint))
    with pytest.raises(SettingError, match="tgt_lang=cs: the model has no such language"):
        translator.translate(Texts.of(LINES[:1], directions=[("de", "cs")]))
    with pytest.raises(SettingError, match=r"directions=1: need one per text \(2\)"):
        translator.translate(Texts.of(LINES[:2], directions=[("de", "en")]))
