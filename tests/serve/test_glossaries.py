"""Glossaries and constraints in the server: the engine carries each sentence's constraints in
its lane's beam state, so that requests with different glossaries and none share its batches
and translate as `Translator.translate(glossary=...)` does, one by one; /v1/translate and
LibreTranslate's /translate take them, and refuse bad ones with a 400 naming the field and the
entry, serving the next request as before."""

from __future__ import annotations

import dataclasses
import json
import re
from concurrent.futures import ThreadPoolExecutor

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("httpx")

from fastapi.testclient import TestClient  # noqa: E402

from tests.serve.real_engine import running  # noqa: E402
from transformer_mt.config import DecodeConfig  # noqa: E402
from transformer_mt.inference.glossary import MAX_TERM_CHARS, Glossary  # noqa: E402
from transformer_mt.inference.languages import Direction  # noqa: E402
from transformer_mt.inference.requests import Texts  # noqa: E402
from transformer_mt.inference.translator import Translator  # noqa: E402
from transformer_mt.serve.contract import TextRefused  # noqa: E402
from transformer_mt.serve.engine import Engine, ServeLimits  # noqa: E402
from transformer_mt.serve.engine.caches import translation_key  # noqa: E402
from transformer_mt.serve.http.app import create_app  # noqa: E402
from transformer_mt.serve.http.terms import MAX_REQUEST_TERMS  # noqa: E402

BASE_URL = "http://127.0.0.1:8000"
JSON = {"Content-Type": "application/json"}
TEXTS = [
    "ein mann fährt rad. Zwei hunde spielen im schnee.",
    "eine frau liest das buch",
    "das buch",
    "zwei hunde",
    "",
    "im schnee liest eine frau",
]
PAIRS = {
    "dogs": [("hunde", "frau"), ("Buch", "schnee"), ("rad", "rad")],
    "books": [("buch", "mann fährt"), ("schnee", "hunde")],
}


# 42 phrases of two words: more target tokens than the tiny model's 64 positions hold.
WORDS = ("mann", "hunde", "buch", "schnee", "frau", "rad", "im")
MANY = [f"{a} {b}" for a in WORDS for b in WORDS if a != b]


def glossary(name: str | None, ignore_case: bool = True) -> Glossary | None:
    return None if name is None else Glossary.of_pairs(PAIRS[name], ignore_case)


def entries(name: str) -> list[dict]:
    return [{"source": s, "target": t} for s, t in PAIRS[name]]


def has_word(text: str, phrase: str) -> bool:
    """`phrase` in `text` at a word start (the subwords of a constraint begin a word)."""
    return re.search(rf"(?<!\w){re.escape(phrase)}", text) is not None


@pytest.fixture(scope="module")
def engine(checkpoint):
    yield from running(checkpoint, ServeLimits(kv_blocks=1024, block_size=4))


@pytest.fixture(scope="module")
def client(engine):
    return TestClient(create_app(engine), base_url=BASE_URL, raise_server_exceptions=False)


def offline(checkpoint, beam_size: int, n_best: int = 1) -> Translator:
    return Translator.from_checkpoint(str(checkpoint), beam_size=beam_size, n_best=n_best)


def assert_same(got, want) -> None:
    assert got.texts == want.texts
    assert got.scores == pytest.approx(want.scores, abs=1e-4)


@pytest.mark.parametrize("beam_size, n_best", [(1, 1), (3, 2)])
def test_concurrent_requests_with_different_glossaries_translate_as_the_translator(
    checkpoint, engine, beam_size, n_best
):
    translator = offline(checkpoint, beam_size, n_best)
    decode = dataclasses.replace(engine.defaults, beam_size=beam_size, n_best=n_best)
    # Every text with each glossary and with none, all submitted at once from 8 threads.
    asked = [(text, name) for text in TEXTS for name in (None, "dogs", "books")]

    def submit(item):
        text, name = item
        glossaries = None if name is None else [glossary(name)]
        return engine.submit(Texts.of([text], glossaries=glossaries), decode)

    with ThreadPoolExecutor(8) as pool:
        jobs = list(pool.map(submit, asked))
    got = [job.future.result(timeout=60)[0] for job in jobs]
    for (text, name), have in zip(asked, got, strict=True):
        (want,) = translator.translate(Texts.of([text], glossary=glossary(name)))
        assert_same(have, want)
        terms = glossary(name).targets(text) if name else []
        assert all(has_word(have.texts[0], term) for term in terms), (text, terms, have)
    # One request of texts with their own glossaries equals them one by one.
    names = ["dogs", None, "books", "dogs", None, "books"]
    job = engine.submit(Texts.of(TEXTS, glossaries=[glossary(n) for n in names]), decode)
    for text, name, have in zip(TEXTS, names, job.future.result(timeout=60), strict=True):
        assert_same(have, got[asked.index((text, name))])
    stats = engine.stats()
    assert stats.kv_blocks_used == engine.prefixes.blocks_held


def test_constraints_met_inside_a_cached_prefix_count(checkpoint, engine):
    """A prefix decoded before comes from the prefix cache; its tokens meet constraints as
    decoded ones do (`Constraints.read`), so "hunde", already in the prefix, is met."""
    translator = offline(checkpoint, 3)
    decode = dataclasses.replace(engine.defaults, beam_size=3, n_best=1)
    text, prefix = "zwei hunde spielen im schnee", "zwei hunde spielen"
    engine.submit(Texts.of([text], prefixes=[prefix]), decode).future.result(timeout=60)
    for phrases in (["hunde"], ["spielen im", "buch"], ["hunde spielen"]):
        hits = engine.prefixes.hits
        (got,) = engine.submit(
            Texts.of([text], constraints=[phrases], prefixes=[prefix]), decode
        ).future.result(timeout=60)
        assert engine.prefixes.hits > hits
        (want,) = translator.translate(Texts.of([text], prefixes=[prefix], constraints=[phrases]))
        assert_same(got, want)
        assert all(has_word(got.texts[0], p) for p in phrases)


def test_constraints_change_the_translation_cache_key():
    key = translation_key("a", "", Direction(None, None), DecodeConfig())
    assert key != translation_key("a", "", Direction(None, None), DecodeConfig(), ["the"])
    assert key == translation_key("a", "", Direction(None, None), DecodeConfig(), [])


def test_constraints_that_cannot_fit_refuse_the_request_naming_the_text(checkpoint, engine):
    decode = engine.defaults
    with pytest.raises(TextRefused) as err:
        engine.submit(Texts.of(["a", "b"], constraints=[[], MANY]), decode)
    assert (err.value.text, err.value.field) == (1, "constraints")
    assert re.match(r"text\[1\]: its constraints take \d+ target tokens", str(err.value))
    unspelled = Glossary.of_pairs([("hund", "hund"), ("buch", "漢字")])
    for texts in (["a", "b", "das buch"], ["a", "b", "c"]):  # held by a text or not
        with pytest.raises(TextRefused, match=r"^glossary:2: target phrase '漢字' has characters"):
            engine.submit(Texts.of(texts, glossaries=[None, None, unspelled]), decode)
    prefixes = ["", "mann hunde buch " * 30]  # about 90 tokens; the model has room for 63
    with pytest.raises(TextRefused, match=r"^text\[1\]: its forced prefix takes \d+") as err:
        engine.submit(Texts.of(["a", "b"], prefixes=prefixes), decode)
    assert err.value.field == "prefix"
    narrow = Engine.from_checkpoint(str(checkpoint), limits=ServeLimits(max_beam_size=5))
    with pytest.raises(TextRefused, match=r"^text\[0\]: its 5 constraints need a beam of 6;"):
        narrow.submit(Texts.of(["a"], constraints=[MANY[:5]]), decode)


def post(client, body: dict, path: str = "/v1/translate"):
    """POST `body` as JSON, escaped as ASCII (so that it can carry a lone surrogate)."""
    return client.post(path, content=json.dumps(body), headers=JSON)


def test_v1_translate_takes_a_glossary_for_all_or_one_per_text_and_constraints(checkpoint, client):
    translator = offline(checkpoint, 5)
    body = {"text": TEXTS[:4], "glossary": entries("dogs"), "glossary_ignore_case": True}
    response = post(client, body)
    assert response.status_code == 200, response.text
    want = translator.translate(Texts.of(TEXTS[:4], glossary=glossary("dogs")))
    assert [t["text"] for t in response.json()["translations"]] == [t.texts[0] for t in want]

    per_text = {"text": TEXTS[:3], "glossary": [entries("books"), None, entries("dogs")]}
    response = post(client, {**per_text, "constraints": [["schnee"], [], None]})
    assert response.status_code == 200, response.text
    got = [t["text"] for t in response.json()["translations"]]
    names = ["books", None, "dogs"]
    for text, name, phrases, have in zip(TEXTS[:3], names, [["schnee"], [], []], got, strict=True):
        (want,) = translator.translate(
            Texts.of([text], constraints=[phrases], glossary=glossary(name, ignore_case=False))
        )
        assert have == want.texts[0]
        assert has_word(have, "schnee") or not phrases


def test_libretranslate_takes_our_glossary_as_json_or_in_a_form(checkpoint, client):
    translator = offline(checkpoint, 5)
    (want,) = translator.translate(
        Texts.of([TEXTS[0]], glossary=glossary("dogs", ignore_case=False))
    )
    body = {"q": TEXTS[0], "source": "de", "target": "en", "glossary": entries("dogs")}
    response = post(client, body, "/translate")
    assert response.status_code == 200, response.text
    assert response.json() == {"translatedText": want.texts[0]}
    form = {
        **body,
        "glossary": '[{"source": "hunde", "target": "frau"}, '
        '{"source": "Buch", "target": "schnee"}, {"source": "rad", "target": "rad"}]',
    }
    response = client.post("/translate", data=form)
    assert response.json() == {"translatedText": want.texts[0]}
    refused = post(client, {**body, "glossary": [{"source": "hunde"}]}, "/translate")
    assert refused.status_code == 400
    assert refused.json() == {
        "error": "Invalid request: glossary[0]: target missing; an entry has source and target"
    }


LONG = "x" * (MAX_TERM_CHARS + 1)
BAD = [
    # (body changes, status, field, message)
    (
        {"glossary": [{"source": "hund"}]},
        400,
        "glossary",
        "glossary[0]: target missing; an entry has source and target",
    ),
    (
        {"glossary": [{"source": "a", "target": "b", "note": 1}]},
        400,
        "glossary",
        "glossary[0]: unknown key 'note'; an entry has source and target",
    ),
    (
        {"glossary": [{"source": " ", "target": "dog"}]},
        400,
        "glossary",
        "glossary[0]: empty source term",
    ),
    (
        {"glossary": [None, [{"source": "a", "target": LONG}]]},
        400,
        "glossary",
        f"glossary[1][0]: target term of {MAX_TERM_CHARS + 1} characters; the limit is "
        f"{MAX_TERM_CHARS} (a term is a word or a short phrase)",
    ),
    (
        {"glossary": [{"source": "Haus", "target": "house"}, {"source": "Haus", "target": "home"}]},
        400,
        "glossary",
        "glossary[1]: source term 'Haus' has target 'home', but glossary[0] gives it "
        "'house': keep one",
    ),
    (
        {"glossary": [{"source": "a", "target": 3}]},
        400,
        "glossary",
        "glossary[0].target: expected a string",
    ),
    (
        {"glossary": "hund\tdog"},
        400,
        "glossary",
        "glossary: expected a list of {source, target} entries, or one such list per text",
    ),
    (
        {"glossary": [[]]},
        400,
        "glossary",
        "glossary: 1 lists for 2 texts; give one per text, or one for all",
    ),
    (
        {"glossary_ignore_case": "yes"},
        400,
        "glossary_ignore_case",
        "glossary_ignore_case: expected true or false",
    ),
    ({"constraints": ["dog", ""]}, 400, "constraints", "constraints[1]: empty phrase"),
    (
        {"constraints": [[], ["\ud800"]]},
        400,
        "constraints",
        "constraints[1][0]: holds a lone surrogate (\\ud800-\\udfff)",
    ),
    (
        {"constraints": ["x"] * (MAX_REQUEST_TERMS + 1)},
        413,
        "constraints",
        f"constraints: {MAX_REQUEST_TERMS + 1} entries; at most {MAX_REQUEST_TERMS} per request",
    ),
    ({"constraints": [[], MANY]}, 400, "constraints", "text[1]: its constraints take"),
    (
        {"glossary": [{"source": "hund", "target": "漢字"}]},
        400,
        "glossary",
        "glossary[0]: target phrase '漢字' has characters the target vocabulary lacks",
    ),
    (  # refused whether or not a text holds its source term, as `tmt translate` refuses it
        {
            "glossary": [
                None,
                [{"source": "hund", "target": "rad"}, {"source": "x", "target": "漢"}],
            ]
        },
        400,
        "glossary",
        "glossary[1][1]: target phrase '漢' has characters the target vocabulary lacks",
    ),
    (
        {"constraints": ["hund"], "format": "html"},
        400,
        "constraints",
        "constraints: for format text only, not html",
    ),
]


@pytest.mark.parametrize("changes, status, field, message", BAD)
def test_bad_glossaries_and_constraints_are_refused_naming_field_and_entry(
    client, changes, status, field, message
):
    response = post(client, {"text": ["ein hund", "zwei hunde"], **changes})
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["field"] == field
    assert error["message"].startswith(message), error["message"]
    assert "\n" not in error["message"]
    served = post(client, {"text": "ein hund", "glossary": [{"source": "hund", "target": "rad"}]})
    assert served.status_code == 200
    assert has_word(served.json()["translations"][0]["text"], "rad")
