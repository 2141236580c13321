"""A model's directions (trained, zero-shot, default) and the Translator translating each line
in its own direction: the same as a Translator made for that direction alone."""

import pytest

from transformer_mt.data.specials import SpecialTokens
from transformer_mt.errors import SettingError
from transformer_mt.inference.languages import Languages, asked_direction
from transformer_mt.inference.line_settings import LineSettings
from transformer_mt.inference.requests import Texts
from transformer_mt.inference.translator import Translator

from ..conftest import MULTILINGUAL, WORDS

LINES = [" ".join(WORDS[i : i + 2 + i % 5]) for i in range(0, len(WORDS), 2)]
# As the models trained here are told their direction: the target's tag in front of the source.
TARGET_TAGS = SpecialTokens(language_tags={"de": 4, "en": 5, "fr": 6}, source_tag="target")


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


def test_a_source_asked_for_is_no_language_of_a_model_tagging_targets():
    """Its sources need no tag, so any would do as far as tags go: `--src-lang ja` had made
    ja one of its languages, and every ja-> direction zero-shot."""
    trained = [("de", "en"), ("en", "de"), ("fr", "en")]
    languages = Languages.of(TARGET_TAGS, trained, "ja", "en")
    assert languages.codes == ("de", "en", "fr")
    with pytest.raises(SettingError, match="src_lang=ja: the model has no such language"):
        languages.check(*languages.default)


def test_a_source_asked_for_alone_is_blamed_as_the_source(multilingual_checkpoint):
    """Its default target is the checkpoint's: the refusal had named a tgt_lang no one gave."""
    with pytest.raises(SettingError) as refused:
        Translator.from_checkpoint(str(multilingual_checkpoint), lines=LineSettings(src_lang="en"))
    assert (refused.value.setting, refused.value.value) == ("src_lang", "en")
    assert refused.value.reason == (
        "the model does not translate en->en (its default target); name the target language: "
        "it translates en into de, fr"
    )


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


def test_a_target_alone_comes_from_the_one_language_trained_into_it():
    """A model trained de->en and en->de (its data de->en) asked for de only: de->de is no
    direction, so en; `tmt translate --tgt-lang de` had refused (`asked_direction`)."""
    trained = [("de", "en"), ("en", "de")]
    own = ("de", "en")
    assert asked_direction(TARGET_TAGS, trained, (None, "de"), own) == ("en", "de")
    assert asked_direction(TARGET_TAGS, trained, (None, "en"), own) == ("de", "en")
    assert asked_direction(TARGET_TAGS, trained, (None, None), own) == ("de", "en")
    with pytest.raises(SettingError, match="the model does not translate de->de"):
        Languages.of(TARGET_TAGS, trained, "de", "de").check("de", "de")  # named, not filled in
    # Its default source kept where it makes a direction, zero-shot ones too.
    languages = Languages.of(TARGET_TAGS, MULTILINGUAL, "de", "en")
    assert [languages.source_into(t) for t in ("en", "de", "fr")] == ["de", "en", "de"]


def test_a_source_filled_in_with_several_languages_trained_into_the_target_must_be_named():
    languages = Languages.of(TARGET_TAGS, MULTILINGUAL, "en", "de")
    with pytest.raises(
        SettingError,
        match=r"^tgt_lang=en: the model does not translate en->en \(its default source\); "
        "name the source language: it translates into en from de, fr$",
    ):
        languages.source_into("en")
    assert languages.source_into("cs") == "en"  # a language it lacks: `check` names it


def test_a_refusal_counts_the_directions_of_a_model_of_many_languages():
    """With NLLB-200's 202 tags the message had listed 40,602 directions (0.8 MB)."""
    codes = [f"x{i:03d}" for i in range(202)]
    specials = SpecialTokens(language_tags={c: 4 + i for i, c in enumerate(codes)}, target_tag=True)
    languages = Languages.of(specials, [("x000", "x001")])
    with pytest.raises(SettingError, match=r"x000->x012 and 40,590 more$") as refused:
        languages.check("x000", "x000")
    assert len(str(refused.value)) < 300


def test_a_target_group_without_a_tag_is_each_of_the_tags():
    """OPUS-MT deu -> ROMANCE, told >>fra<< or >>ces<<: trained from deu into each, and
    ROMANCE is no language of it (it had been a source of every zero-shot direction)."""
    specials = SpecialTokens(language_tags={"fra": 4, "deu": 5, "ces": 6}, source_tag="target")
    languages = Languages.of(specials, [("deu", "ROMANCE")], "deu")
    assert languages.trained == (("deu", "fra"), ("deu", "ces"))
    assert languages.zero_shot == (("ces", "deu"), ("ces", "fra"), ("fra", "ces"), ("fra", "deu"))
    assert languages.codes == ("ces", "deu", "fra")
    nllb = SpecialTokens(language_tags=specials.language_tags, source_tag="source", target_tag=True)
    assert Languages.of(nllb, [("deu", "ROMANCE")]).trained == ()  # its source tag is no group


def test_asked_for_a_target_alone_it_translates_from_the_language_trained_into_it(
    multilingual_checkpoint,
):
    """`tmt translate --tgt-lang de` of a model whose data.src_lang is de: it had refused
    (de->de) unless told --src-lang en; its only direction into de is from en."""
    path = str(multilingual_checkpoint)
    alone = Translator.from_checkpoint(path, beam_size=1, lines=LineSettings(tgt_lang="de"))
    assert alone.languages.default == ("en", "de") and alone.default.src_lang == "en"
    named = LineSettings(src_lang="en", tgt_lang="de")
    english = Translator.from_checkpoint(path, beam_size=1, lines=named)
    assert [t.texts for t in alone.translate(LINES)] == [t.texts for t in english.translate(LINES)]
