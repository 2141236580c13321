"""LibreTranslate's endpoints in process against the fake engine: its request fields (JSON, a
form, the query string), its response shapes, and its error bodies, each refusal leaving the
server serving and the engine untouched."""

from __future__ import annotations

from urllib.parse import urlencode

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("httpx")

from fastapi.testclient import TestClient  # noqa: E402

from tests.serve.fakes import LIMITS, fake_translation  # noqa: E402
from transformer_mt import langid  # noqa: E402
from transformer_mt.config import DecodeConfig  # noqa: E402
from transformer_mt.data.specials import OWN_SPECIALS  # noqa: E402
from transformer_mt.inference.languages import Languages  # noqa: E402
from transformer_mt.langid import LinguaMissing, installed  # noqa: E402
from transformer_mt.serve.http import schema  # noqa: E402
from transformer_mt.serve.http.app import create_app  # noqa: E402
from transformer_mt.serve.http.libretranslate import (  # noqa: E402
    LibreError,
    parse_detect,
    parse_translate,
    request_fields,
)

BASE_URL = "http://127.0.0.1:8000"
GOOD = {"q": "ein kleiner hund", "source": "de", "target": "en"}
needs_lingua = pytest.mark.skipif(not installed(), reason="lingua (the langid extra)")


@pytest.fixture
def client(engine):
    return TestClient(create_app(engine), base_url=BASE_URL, raise_server_exceptions=False)


def assert_served(client) -> None:
    response = client.post("/translate", json=GOOD)
    assert response.status_code == 200, response.text
    assert response.json() == {"translatedText": fake_translation(GOOD["q"])}


def test_a_string_is_answered_with_a_string_and_a_list_with_a_list(client):
    assert_served(client)
    texts = ["ein hund", "zwei katzen spielen"]
    response = client.post("/translate", json={**GOOD, "q": texts})
    assert response.json() == {"translatedText": [fake_translation(t) for t in texts]}


def test_a_form_reads_as_json_does_and_a_repeated_q_is_a_list(client):
    texts = ["ein hund", "zwei katzen spielen"]
    one = client.post("/translate", data=GOOD).json()
    assert one == {"translatedText": fake_translation(GOOD["q"])}
    many = client.post("/translate", data={**GOOD, "q": texts}).json()
    assert many == {"translatedText": [fake_translation(t) for t in texts]}
    query = client.post("/translate?source=de&target=en", data={"q": "ein hund"}).json()
    assert query == {"translatedText": fake_translation("ein hund")}


FORM_TYPE = "application/x-www-form-urlencoded"


def test_the_query_string_is_read_with_any_body_and_the_body_wins_a_field_in_both():
    query = b"api_key=from-query&source=de&q=query+text"
    from_json = request_fields(b'{"q": "json text", "target": "en"}', "application/json", query)
    assert from_json == {"api_key": "from-query", "source": "de", "q": "json text", "target": "en"}
    from_form = request_fields(b"q=a&q=b&api_key=from-form", FORM_TYPE, query)
    assert from_form == {"api_key": "from-form", "source": "de", "q": ["a", "b"]}  # not merged
    # A JSON null is a field not given; an empty JSON body, or none, gives no fields.
    assert request_fields(b'{"api_key": null}', "application/json", query)["api_key"] == (
        "from-query"
    )
    assert request_fields(b"", "application/json", query) == request_fields(b"", "", query)
    with pytest.raises(LibreError, match="the query string is not UTF-8"):
        request_fields(b"{}", "application/json", b"q=%FF")


def test_fields_from_the_query_string_serve_json_form_and_empty_bodies_alike(client):
    expected = {"translatedText": fake_translation(GOOD["q"])}
    query = urlencode({"source": "de", "target": "en"})
    assert client.post(f"/translate?{query}", json={"q": GOOD["q"]}).json() == expected
    assert client.post(f"/translate?{query}", data={"q": GOOD["q"]}).json() == expected
    assert client.post(f"/translate?{urlencode(GOOD)}").json() == expected
    assert client.post(f"/translate?{urlencode(GOOD)}", headers=JSON).json() == expected
    # The body's source wins over the query string's; neither is a list of both.
    assert client.post("/translate?source=xx", json=GOOD).json() == expected
    assert client.post("/translate?source=xx", data=GOOD).json() == expected


def test_alternatives_are_the_other_hypotheses_of_the_beam_without_the_translation(client, engine):
    body = client.post("/translate", json={**GOOD, "alternatives": "1"}).json()
    best = fake_translation(GOOD["q"])
    assert body == {"translatedText": best, "alternatives": [f"{best} (1)"]}
    assert engine.jobs[-1].decode.n_best == 2
    both = client.post("/translate", data={**GOOD, "q": ["a b", "c"], "alternatives": 1}).json()
    assert both["alternatives"] == [["b a (1)"], ["c (1)"]]


def test_codes_are_matched_ignoring_case(client, engine):
    body = client.post("/translate", json={**GOOD, "source": "DE", "target": "En"}).json()
    assert body == {"translatedText": fake_translation(GOOD["q"])}
    assert engine.jobs[-1].directions == [("de", "en")]


@needs_lingua
def test_source_auto_answers_with_the_detected_language_per_text(client):
    body = client.post("/translate", json={**GOOD, "source": "auto"}).json()
    assert body["detectedLanguage"] == {"confidence": pytest.approx(100.0), "language": "de"}
    both = client.post("/translate", json={**GOOD, "source": "auto", "q": ["a b", "c"]}).json()
    assert [d["language"] for d in both["detectedLanguage"]] == ["de", "de"]


FORM = {"Content-Type": "application/x-www-form-urlencoded"}
JSON = {"Content-Type": "application/json"}
# The fake engine takes 8 texts of 200 characters (FakeLimits).
BAD = [
    # (body: JSON (a dict, or bytes) or a form (pairs), status, LibreTranslate's message)
    ({"source": "de", "target": "en"}, 400, "Invalid request: missing q parameter"),
    ({**GOOD, "q": ""}, 400, "Invalid request: missing q parameter"),
    ({**GOOD, "q": []}, 400, "Invalid request: missing q parameter"),
    ({**GOOD, "q": 5}, 400, "Invalid request: q parameter must be a string or a list of strings"),
    ({**GOOD, "q": ["a", None]}, 400, "must be a string or a list of strings"),
    ({"q": "a", "target": "en"}, 400, "Invalid request: missing source parameter"),
    ({"q": "a", "source": "de"}, 400, "Invalid request: missing target parameter"),
    ({**GOOD, "target": "xx"}, 400, "xx is not supported"),
    ({**GOOD, "source": "xx"}, 400, "xx is not supported"),
    ({**GOOD, "source": "auto", "target": "xx"}, 400, "xx is not supported"),
    ({**GOOD, "source": "en", "target": "de"}, 400, "(de) is not available as a target language"),
    ({**GOOD, "format": "markdown"}, 400, "markdown format is not supported"),
    ({**GOOD, "format": {"a": 1}}, 400, '{"a": 1} format is not supported'),
    (
        (("q", "a"), ("format", "html"), ("format", "text"), ("source", "de"), ("target", "en")),
        400,
        '["html", "text"] format is not supported',
    ),
    ({**GOOD, "alternatives": "two"}, 400, "alternatives parameter is not a number"),
    ({**GOOD, "alternatives": True}, 400, "alternatives parameter is not a number"),
    ({**GOOD, "alternatives": 2}, 400, "alternatives parameter must be <= 1"),  # beam 2
    ({**GOOD, "q": ["a"] * 9}, 400, "Invalid request: request (9) exceeds text limit (8)"),
    ({**GOOD, "q": "x" * 201}, 400, "Invalid request: request (201) exceeds text limit (200)"),
    ((("q", "a"), ("q", "x" * 201), ("source", "de"), ("target", "en")), 400, "(201) exceeds"),
    (b'{"q": "\\ud800", "source": "de", "target": "en"}', 400, "lone surrogate"),
    ({**GOOD, "q": "<p>ein <b>hund</p></b>", "format": "html"}, 400, "the html does not parse"),
    (  # of several, the one that fails is named
        {**GOOD, "q": ["<p>a</p>", "<p>ein <b>hund</p></b>"], "format": "html"},
        400,
        "Invalid request: q[1]: the html does not parse (line 1, column",
    ),
]


@pytest.mark.parametrize("body, status, message", BAD)
def test_bad_requests_get_libretranslates_error_and_nothing_else_is_affected(
    client, engine, body, status, message
):
    if isinstance(body, dict):
        response = client.post("/translate", json=body)
    elif isinstance(body, bytes):
        response = client.post("/translate", content=body, headers=JSON)
    else:
        response = client.post("/translate", content=urlencode(body).encode(), headers=FORM)
    assert response.status_code == status
    assert list(response.json()) == ["error"] and message in response.json()["error"]
    assert engine.jobs == []  # nothing was submitted
    assert_served(client)


# Inline markup inside a block, a script and a block kept from translation.
PAGE = (
    '<p>ein <b>kleiner</b> hund</p><script>var x = "ein hund";</script>'
    '<p translate="no">zwei katzen</p>'
)


def test_html_documents_keep_their_markup_and_their_kept_parts(client, engine):
    body = client.post("/translate", json={**GOOD, "q": PAGE, "format": "html"}).json()
    # The fake reverses the words and aligns them so: <b> stays on "kleiner".
    assert body == {
        "translatedText": '<p>hund <b>kleiner</b> ein</p><script>var x = "ein hund";</script>'
        '<p translate="no">zwei katzen</p>'
    }
    assert [job.texts for job in engine.jobs] == [["ein kleiner hund"]]  # the one unit
    many = client.post(
        "/translate",
        data={**GOOD, "q": ["<i>a b</i>", "<p>c</p>"], "format": "html", "alternatives": 1},
    ).json()
    assert many == {"translatedText": ["<i>b a</i>", "<p>c</p>"], "alternatives": [[], []]}


@needs_lingua
def test_html_from_auto_identifies_the_text_not_the_markup(client, engine):
    page = "<div><p>Zwei Hunde spielen im Schnee.</p></div>"
    body = client.post("/translate", json={**GOOD, "q": page, "format": "html", "source": "auto"})
    assert body.json()["detectedLanguage"]["language"] == "de"
    assert engine.jobs[-1].directions == [("de", "en")]


@pytest.mark.parametrize(
    "content, content_type, message",
    [
        (b'{"q": ', "application/json", "Invalid JSON format"),
        (b'["a"]', "application/json", "Invalid JSON format"),
        (b"q=%FF&source=de&target=en", "application/x-www-form-urlencoded", "not UTF-8"),
        (b"--b\r\n\r\n--b--", "multipart/form-data; boundary=b", "multipart"),
        (b'{"q": "a"}', "", "the body is JSON but its Content-Type is not given"),
        (b' {"q": "a"}', "text/plain", "its Content-Type is text/plain; send it as application"),
        (b'{"q": ' + b"9" * 5000 + b"}", "application/json", "more than 4300 digits"),
        (b'{"q": "a", "q": "b"}', "application/json", 'the key "q" is given twice'),
        # our glossary as JSON text in a form: parsed by the same rules, named
        (b"q=a&source=de&target=en&glossary=" + b"%5B" * 20_000, FORM_TYPE, "glossary: not JSON"),
        (
            b"q=a&source=de&target=en&glossary=" + b"1" * 5000,
            FORM_TYPE,
            "glossary: not JSON (a num",
        ),
    ],
)
def test_bodies_that_do_not_read_are_refused(client, content, content_type, message):
    response = client.post("/translate", content=content, headers={"Content-Type": content_type})
    assert response.status_code == 400 and message in response.json()["error"]
    assert_served(client)


def test_a_body_too_large_is_libretranslates_400_not_413(client):
    texts = ["x" * LIMITS.max_sentence_chars] * 1000
    response = client.post("/translate", json={**GOOD, "q": texts})
    assert response.status_code == 400 and "body" in response.json()["error"]
    assert_served(client)


def test_languages_lists_each_language_with_its_targets(client):
    assert client.get("/languages").json() == [
        {"code": "de", "name": "German" if installed() else "de", "targets": ["en"]},
        {"code": "en", "name": "English" if installed() else "en", "targets": []},
    ]


@needs_lingua
def test_detect_answers_a_list_of_languages_with_confidence_out_of_100(client):
    one = client.post("/detect", data={"q": "Zwei Hunde spielen im Schnee."}).json()
    assert one == [{"confidence": pytest.approx(100.0), "language": "de"}]
    many = client.post("/detect", json={"q": ["Zwei Hunde.", "Ein Kind lacht."]}).json()
    assert [d["language"] for d in many] == ["de"]
    missing = client.post("/detect", data={})
    assert missing.status_code == 400
    assert missing.json() == {"error": "Invalid request: missing q parameter"}


@needs_lingua
def test_detect_names_no_language_for_a_text_in_none_of_the_models(client, engine):
    """A de->en model: French is not German, whatever the model translates."""
    french = "Bonjour, comment allez-vous aujourd'hui ?"
    assert client.post("/detect", data={"q": french}).json() == []
    assert client.post("/detect", data={"q": "12345 !"}).json() == []
    mixed = client.post("/detect", json={"q": [french, "Zwei Hunde spielen im Schnee."]}).json()
    assert mixed == [{"confidence": pytest.approx(100.0), "language": "de"}]
    # source auto translates it all the same, from the one source it can be (confidence 0).
    auto = client.post("/translate", json={**GOOD, "q": french, "source": "auto"}).json()
    assert auto["detectedLanguage"] == {"confidence": 0.0, "language": "de"}
    assert engine.jobs[-1].directions == [("de", "en")]


@needs_lingua
def test_detect_tells_the_languages_of_a_model_with_several_sources(engine):
    engine.languages = Languages.of(OWN_SPECIALS, [("de", "en"), ("fr", "en")])
    client = TestClient(create_app(engine), base_url=BASE_URL)
    french = client.post("/detect", data={"q": "Deux chiens jouent dans la neige."}).json()
    assert french[0]["language"] == "fr" and french[0]["confidence"] > 50


def test_detect_without_lingua_says_that_detection_is_unavailable(client, monkeypatch):
    def missing():
        raise LinguaMissing("language identification needs lingua-language-detector")

    monkeypatch.setattr(langid, "_import_lingua", missing)
    response = client.post("/detect", data={"q": "Zwei Hunde spielen im Schnee."})
    assert response.status_code == 400
    assert response.json() == {
        "error": "language detection is unavailable: language identification needs "
        "lingua-language-detector"
    }
    assert_served(client)


@needs_lingua
def test_detect_for_a_model_of_no_language_lingua_knows_is_unavailable(engine):
    engine.languages = Languages.of(OWN_SPECIALS, [("xx", "en")])
    client = TestClient(create_app(engine), base_url=BASE_URL)
    response = client.post("/detect", data={"q": "Zwei Hunde spielen im Schnee."})
    assert response.status_code == 400
    assert response.json()["error"].startswith("language detection is unavailable: lingua")


class ReadFields(dict):
    """A request's fields that remember which of them a parser read."""

    def __init__(self, **fields):
        super().__init__(fields)
        self.read: set[str] = set()

    def get(self, key, default=None):
        self.read.add(key)
        return super().get(key, default)

    def __getitem__(self, key):
        self.read.add(key)
        return super().__getitem__(key)

    def __contains__(self, key):
        self.read.add(key)
        return super().__contains__(key)


def test_the_openapi_body_has_the_fields_the_parser_reads(client, engine):
    fields = ReadFields(**GOOD)
    parse_translate(fields, DecodeConfig(), engine.limits, engine.languages)
    assert fields.read == set(schema.LibreTranslateBody.model_fields)
    fields = ReadFields(q=GOOD["q"])
    parse_detect(fields, engine.limits)
    assert fields.read == set(schema.LibreDetectBody.model_fields)
    paths = client.get("/openapi.json").json()["paths"]
    assert {"/translate", "/languages", "/detect"} <= set(paths)
