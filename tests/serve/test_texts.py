"""Sentences in the server: a text of several sentences is searched sentence by sentence and
answered as `Translator.translate` (and so `tmt translate`) answers it; line breaks come back
verbatim; a text with a prefix stays whole."""

from __future__ import annotations

import dataclasses
import json

import pytest

from tests.serve.real_engine import running
from transformer_mt.inference.line_settings import LineSettings
from transformer_mt.inference.requests import Texts
from transformer_mt.inference.translator import Translator
from transformer_mt.serve.engine import Engine, ServeLimits

# Three sentences, with the whitespace between them that must come back as it was.
THREE = "Ein mann fährt rad.  Zwei hunde spielen im schnee! Eine frau liest das buch?"


@pytest.fixture(scope="module")
def engine(checkpoint):
    yield from running(checkpoint, ServeLimits(kv_blocks=512))


@pytest.fixture(scope="module")
def offline(checkpoint):
    return Translator.from_checkpoint(str(checkpoint))


def test_a_line_of_three_sentences_is_searched_as_three_and_answered_as_the_translator_does(
    engine, offline
):
    assert len(offline.split([THREE], [offline.default]).sentences) == 3
    (expected,) = offline.translate([THREE])
    job = engine.submit([THREE], engine.defaults)
    (got,) = job.future.result(timeout=60)
    assert len(job.split.sentences) == 3
    assert got.texts == expected.texts
    assert got.scores == pytest.approx(expected.scores, abs=1e-4)
    assert "  " in THREE and got.texts[0].count("  ") >= 1  # the double space between 1 and 2


def test_n_best_of_a_split_line_joins_the_sentences_hypotheses_as_the_translator_does(
    checkpoint, engine
):
    offline = Translator.from_checkpoint(str(checkpoint), beam_size=4, n_best=3)
    (expected,) = offline.translate([THREE])
    decode = dataclasses.replace(engine.defaults, beam_size=4, n_best=3)
    (got,) = engine.submit([THREE], decode).future.result(timeout=60)
    assert got.texts == expected.texts
    assert got.scores == pytest.approx(expected.scores, abs=1e-4)


def test_each_line_of_a_text_translates_as_that_line_and_the_line_breaks_come_back(
    checkpoint, engine, offline
):
    lines = ["Zwei hunde spielen im schnee", THREE, "", "ein mann fährt rad"]
    breaks = ["\n", "\r\n", "\n\n"]
    text = lines[0] + "".join(b + line for b, line in zip(breaks, lines[1:], strict=True))
    (got,) = engine.submit([text], engine.defaults).future.result(timeout=60)
    each = [t.texts[0] for t in offline.translate(lines)]
    assert each[2] == ""
    want = each[0] + "".join(b + line for b, line in zip(breaks, each[1:], strict=True))
    assert got.texts[0] == want
    # The library's rule, which the engine asks: sentencex reads one line break as a space,
    # and the lines of a paragraph without final stops had been one sentence there.
    assert offline.translate([text])[0].texts[0] == want
    unsplit = Translator.from_checkpoint(str(checkpoint), lines=LineSettings(split_sentences=False))
    assert unsplit.split([text], [unsplit.default]).sentences == [text]  # whole, as --no-split


@pytest.mark.parametrize(
    ("before", "after"), [("", "\n"), ("\n", ""), ("", "\n\n"), ("\r\n", "\r\n"), ("\n", None)]
)
def test_line_breaks_around_a_single_sentence_or_alone_come_back(engine, offline, before, after):
    """They had been dropped: a text of one sentence was answered with that sentence's
    translation alone, and a text of line breaks only with an empty one."""
    sentence = "" if after is None else "Zwei hunde spielen im schnee"
    text = before + sentence + (after or "")
    (got,) = engine.submit([text], engine.defaults).future.result(timeout=60)
    expected = offline.translate([sentence])[0].texts[0] if sentence else ""
    assert got.texts[0] == before + expected + (after or "")


def test_a_text_with_a_prefix_is_searched_whole(engine, offline):
    text = "Ein mann fährt rad.\n" + THREE  # 49 tokens: within the tiny model's 63
    job = engine.submit(Texts.of([text], prefixes=["ein"]), engine.defaults)
    (got,) = job.future.result(timeout=60)
    assert job.split.sentences == [text]
    assert got.texts[0].startswith("ein")


def test_the_stream_reports_each_text_by_its_index_and_ends_with_the_joined_text(
    checkpoint, engine
):
    events: list[tuple[int, str]] = []
    greedy = dataclasses.replace(engine.defaults, beam_size=1, n_best=1)
    job = engine.submit(["hunde", THREE], greedy, on_token=lambda i, t: events.append((i, t)))
    got = job.future.result(timeout=60)
    assert {i for i, _ in events} == {0, 1}
    offline = Translator.from_checkpoint(str(checkpoint), beam_size=1)
    assert [t.texts for t in got] == [t.texts for t in offline.translate(["hunde", THREE])]


def test_served_over_http_as_tmt_translate_prints_it(checkpoint, tmp_path):
    pytest.importorskip("fastapi")
    from tests.serve.test_served import offline as tmt_translate
    from tests.serve.test_served import post
    from transformer_mt.serve.server import start_in_thread

    engine = Engine.from_checkpoint(str(checkpoint), limits=ServeLimits(kv_blocks=512))
    url, stop = start_in_thread(engine)
    try:
        status, answer = post(f"{url}/v1/translate", json.dumps({"text": THREE}).encode())
    finally:
        stop(drain=False)
    beam = engine.defaults.beam_size
    (expected,) = tmt_translate(checkpoint, tmp_path, [THREE], None, beam, 1)
    assert status == 200 and [answer["translations"][0]["text"]] == expected
