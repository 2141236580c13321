"""/v1/translate's `format` against the fake engine: HTML and Markdown documents keep their
markup, translate as LibreTranslate's `format: html` does (the one path, markup.py), stream
their result, and a bad format or a setting a document cannot have is refused by name."""

from __future__ import annotations

import typing

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("httpx")

from fastapi.testclient import TestClient  # noqa: E402

from tests.serve.fakes import fake_translation  # noqa: E402
from tests.serve.test_app import events_of  # noqa: E402
from transformer_mt.documents import markdown  # noqa: E402
from transformer_mt.documents.markdown_parser import MarkdownMissing  # noqa: E402
from transformer_mt.langid import installed  # noqa: E402
from transformer_mt.serve.http import api, schema  # noqa: E402
from transformer_mt.serve.http.app import create_app  # noqa: E402

BASE_URL = "http://127.0.0.1:8000"
# Inline markup inside a block, a script and a block kept from translation; the fake engine
# reverses the words and aligns them so: <b> stays on "kleiner".
PAGE = (
    '<p>ein <b>kleiner</b> hund</p><script>var x = "ein hund";</script>'
    '<p translate="no">zwei katzen</p>'
)
PAGE_TRANSLATED = (
    '<p>hund <b>kleiner</b> ein</p><script>var x = "ein hund";</script>'
    '<p translate="no">zwei katzen</p>'
)


@pytest.fixture
def client(engine):
    return TestClient(create_app(engine), base_url=BASE_URL, raise_server_exceptions=False)


def translations(client, body: dict) -> list[dict]:
    response = client.post("/v1/translate", json=body)
    assert response.status_code == 200, response.text
    return response.json()["translations"]


def test_html_keeps_its_markup_has_no_score_and_equals_libretranslates_html(client, engine):
    found = translations(client, {"text": [PAGE, "<i>a b</i>"], "format": "html"})
    assert found == [{"text": PAGE_TRANSLATED}, {"text": "<i>b a</i>"}]
    assert [job.texts for job in engine.jobs] == [["ein kleiner hund"], ["a b"]]  # the units
    libre = {"q": [PAGE, "<i>a b</i>"], "source": "de", "target": "en", "format": "html"}
    answer = client.post("/translate", json=libre).json()
    assert answer["translatedText"] == [t["text"] for t in found]


@pytest.mark.parametrize("format", ["html", "markdown"])
def test_a_leading_byte_order_mark_is_no_part_of_a_document(client, engine, format):
    """As `tmt translate` reads a file: a BOM parsed would be text before the doctype, or
    would unmake a heading."""
    document = "<p>a b</p>" if format == "html" else "# a b\n"
    if format == "markdown":
        pytest.importorskip("markdown_it")
    plain = translations(client, {"text": document, "format": format})
    assert translations(client, {"text": "\ufeff" + document, "format": format}) == plain
    assert [job.texts for job in engine.jobs[-2:]] == [["a b"], ["a b"]]


def test_plain_text_is_the_default_and_keeps_its_tags_as_text(client):
    text = "<b>ein</b> hund"
    assert translations(client, {"text": text, "format": "text"})[0]["text"] == "hund <b>ein</b>"
    assert [t["text"] for t in translations(client, {"text": text})] == [fake_translation(text)]


def test_markdown_keeps_its_syntax(client):
    pytest.importorskip("markdown_it")
    document = "# ein hund\n\n- zwei *kleine* katzen\n"
    found = translations(client, {"text": document, "format": "markdown"})
    assert found == [{"text": "# hund ein\n\n- katzen *kleine* zwei\n"}]


def test_markdown_without_markdown_it_is_a_501_naming_format(client, monkeypatch):
    def missing():
        raise MarkdownMissing()

    monkeypatch.setattr(markdown, "parser", missing)
    response = client.post("/v1/translate", json={"text": "ein hund", "format": "markdown"})
    assert response.status_code == 501
    assert response.json()["error"]["field"] == "format"


def test_a_document_streams_its_result_then_done(client):
    body = {"text": PAGE, "format": "html", "beam_size": 1}
    events = events_of(client.post("/v1/translate/stream", json=body))
    assert [name for name, _ in events] == ["result", "done"]
    assert events[0][1]["translations"] == [{"text": PAGE_TRANSLATED}]


@pytest.mark.skipif(not installed(), reason="lingua (the langid extra)")
def test_html_from_auto_identifies_the_text_not_the_markup(client, engine):
    page = "<div><p>Zwei Hunde spielen im Schnee.</p></div>"
    found = translations(client, {"text": page, "format": "html", "source": "auto"})
    assert found[0]["detected"]["language"] == "de"
    assert engine.jobs[-1].directions == [("de", "en")]


BAD = [
    # (body, status, field, words the message must hold)
    ({"text": "a", "format": "xml"}, 400, "format", ["format=xml", "text, html, markdown"]),
    ({"text": "a", "format": 3}, 400, "format", ["a number (3)"]),
    ({"text": "a", "format": "html", "prefix": "x"}, 400, "prefix", ["for format text only"]),
    ({"text": "a", "format": "html", "n_best": 2}, 400, "n_best", ["one translation"]),
    ({"text": "<p>ein <b>hund</p></b>", "format": "html"}, 400, "text", ["html", "line 1"]),
]


@pytest.mark.parametrize(("body", "status", "field", "words"), BAD)
def test_a_bad_format_is_refused_by_name_and_nothing_is_submitted(
    client, engine, body, status, field, words
):
    response = client.post("/v1/translate", json=body)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["field"] == field
    assert all(word in error["message"] for word in words), error["message"]
    assert engine.jobs == []
    assert translations(client, {"text": PAGE, "format": "html"}) == [{"text": PAGE_TRANSLATED}]


def test_the_schema_offers_the_formats_the_parser_takes():
    described = typing.get_type_hints(schema.TranslateBody)["format"]
    assert typing.get_args(described) == api.FORMATS


@pytest.mark.parametrize("route", ["/v1/translate", "/translate"])
def test_documents_of_more_units_than_the_queue_holds_are_too_large_not_busy(client, engine, route):
    """They were refused 429 with Retry-After mid-request (admitted document by document), so
    clients retried a request that can never be admitted."""
    pages = ["<p>a</p>" * 24] * 3  # 72 units; the fake engine's queue holds 64
    key = "text" if route == "/v1/translate" else "q"
    body = {key: pages, "format": "html", "source": "de", "target": "en"}
    response = client.post(route, json=body)
    assert response.status_code == (413 if route == "/v1/translate" else 400), response.text
    assert "retry-after" not in response.headers
    assert "72 units of text in the documents; the queue holds 64" in response.text
    assert engine.jobs == []


def test_of_several_documents_the_one_that_does_not_parse_is_named(client, engine):
    body = {"text": ["<p>a</p>", "<p>ein <b>hund</p></b>"], "format": "html"}
    response = client.post("/v1/translate", json=body)
    assert response.status_code == 400
    assert response.json()["error"]["message"].startswith("text[1]: not html that parses (line 1")
    assert engine.jobs == []
