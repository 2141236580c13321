"""Checked translations: a flagged line of several sentences is cut at its sentence ends and
its sentences translated alone, the retry kept and `cleared` when each passes; a flagged
single sentence is reported only; reports per line."""

import pytest

from transformer_mt.inference.checked import (
    CheckedLine,
    SentenceReport,
    check_sentences,
    translate_checked,
)
from transformer_mt.inference.dropped import Scores, Thresholds
from transformer_mt.inference.line_settings import LineSettings
from transformer_mt.inference.sentences import SplitLines

# Flags nothing but the length: coverage and copies are left out of these tests.
from transformer_mt.inference.translator import Translation, Translator

# Flags nothing but the length: coverage and copies are left out of these tests.
LENGTH_ONLY = Thresholds(min_coverage=0.0, max_source_chrf=100.0)


@pytest.fixture(scope="module")
def translator(checkpoint):
    return Translator.from_checkpoint(str(checkpoint), beam_size=1, max_len_a=0.0, max_len_b=2)


def check(translator, sentences, outputs, parts_translated):
    """`check_sentences` of `outputs` (one per sentence) with a retry whose parts translate as
    `parts_translated` says (text -> translation); the parts the retry was asked for."""
    asked = []

    def retranslate(parts: SplitLines, owners):
        asked.append((list(parts.sentences), list(owners)))
        return [Translation([parts_translated[p]], [-1.0]) for p in parts.sentences]

    found = [Translation([o], [-1.0]) for o in outputs]
    directions = [translator.default] * len(sentences)
    results = check_sentences(translator, sentences, directions, found, retranslate, LENGTH_ONLY)
    return results, asked


LINE = "Ein mann fährt rad. Zwei hunde spielen im schnee."
SENTENCES = ["Ein mann fährt rad.", "Zwei hunde spielen im schnee."]


def test_a_flagged_line_is_cut_at_its_sentence_ends_and_cleared_when_each_passes(translator):
    parts = {SENTENCES[0]: "rad fährt mann ein.", SENTENCES[1]: "schnee im spielen hunde zwei."}
    results, asked = check(translator, [LINE, "das buch"], ["mann", "buch das"], parts)
    assert asked == [(SENTENCES, [0])]
    (translation, report), (untouched, quiet) = results
    assert report.flags == ("length",) and report.retried and report.cleared
    assert translation.texts == ["rad fährt mann ein. schnee im spielen hunde zwei."]
    assert translation.scores == [-2.0]  # the sentences' scores summed, as `translate` sums
    assert quiet.flags == () and not quiet.retried and quiet.cleared is None
    assert untouched.texts == ["buch das"]


def test_a_retry_still_flagged_replaces_the_translation_and_is_reported(translator):
    parts = {SENTENCES[0]: "rad fährt mann ein.", SENTENCES[1]: "hunde"}
    results, _ = check(translator, [LINE], ["mann"], parts)
    ((translation, report),) = results
    assert report.flags == ("length",) and report.retried and report.cleared is False
    assert translation.texts == ["rad fährt mann ein. hunde"]


def test_a_flagged_single_sentence_is_reported_not_retried(translator):
    sentence = "ein mann fährt rad, zwei hunde spielen; im schnee"  # clause marks: no cut
    results, asked = check(translator, [sentence, " "], ["mann", ""], {})
    assert asked == []
    (translation, report), (blank, none) = results
    assert report.flags == ("length",) and not report.retried and report.cleared is None
    assert translation.texts == ["mann"] and none is None and blank.texts == [""]


def test_without_a_retranslate_nothing_is_retried(translator):
    found = [Translation(["mann"], [-1.0])]
    ((translation, report),) = check_sentences(
        translator, [LINE], [translator.default], found, None, LENGTH_ONLY
    )
    assert report.flags == ("length",) and not report.retried and translation is found[0]


def test_report_lines_number_the_input_and_list_its_sentences():
    report = SentenceReport("ein mann", ("coverage",), Scores(0.25, 1.0, 12.34, False, False))
    line = CheckedLine(Translation(["a man"], [-1.0]), (report,))
    assert line.to_json(7) == {
        "line": 7,
        "sentences": [
            {
                "source": "ein mann",
                "flags": ["coverage"],
                "scores": {"coverage": 0.25, "length_ratio": 1.0, "source_chrf": 12.3},
                "retried": False,
                "cleared": None,
            }
        ],
    }
    assert CheckedLine(Translation([""], [0.0]), ()).to_json(1) == {"line": 1, "sentences": []}


def test_checked_lines_translate_as_the_translator_and_a_whole_line_as_its_sentences(
    checkpoint,
):
    lines = [LINE, "", "das buch, eine frau"]
    translator = Translator.from_checkpoint(str(checkpoint), beam_size=2, n_best=2)
    checked = translate_checked(translator, lines)
    assert [len(line.sentences) for line in checked] == [2, 0, 1]
    assert [line.translation for line in checked] == translator.translate(lines)
    assert not any(report.retried for line in checked for report in line.sentences)
    # translated whole (--no-split), a flagged line of two sentences is retried and becomes
    # the split translation; every line flagged by a coverage beyond reach
    whole = Translator.from_checkpoint(
        str(checkpoint), beam_size=2, n_best=2, lines=LineSettings(split_sentences=False)
    )
    strict = Thresholds(min_coverage=1.1)
    checked = translate_checked(whole, lines, thresholds=strict)
    assert [line.translation for line in checked] == translator.translate(lines)
    assert [[r.retried for r in line.sentences] for line in checked] == [[True], [], [False]]
    assert checked[0].sentences[0].cleared is False
