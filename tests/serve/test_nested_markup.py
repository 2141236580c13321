"""Documents nested thousands deep sent to the server (/v1/translate's `format`, LibreTranslate's
`format: html`): translated with every tag kept, or refused with a 400 naming the line, never
a 500 with a traceback in the log."""

from __future__ import annotations

import logging

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("httpx")

from fastapi.testclient import TestClient  # noqa: E402

from tests.serve.fakes import FakeEngine, FakeLimits  # noqa: E402
from transformer_mt.documents.markdown_parser import MAX_NESTING  # noqa: E402
from transformer_mt.serve.http.app import create_app  # noqa: E402

BASE_URL = "http://127.0.0.1:8000"


@pytest.fixture
def client():
    """The fake engine (it reverses the words and aligns them so), taking texts of up to
    100,000 characters: a 10,000-deep page is 70 KB."""
    engine = FakeEngine(limits=FakeLimits(max_sentence_chars=100_000))
    engine.start()
    yield TestClient(create_app(engine), base_url=BASE_URL, raise_server_exceptions=False)
    engine.stop(drain=False)


def nested_b(depth: int) -> tuple[str, str]:
    """A page of `depth` nested <b> (500: the 3.5 KB request of a RecursionError), and what
    the fake translates it to."""
    opened, closed = "<b>" * depth, "</b>" * depth
    return f"<p>{opened}ein hund{closed}</p>", f"<p>{opened}hund ein{closed}</p>"


def nested_markdown(depth: int) -> tuple[str, str]:
    stars = "*" * depth
    return f"{stars}ein hund{stars}\n", f"{stars}hund ein{stars}\n"


CASES = [
    ("html", *nested_b(500)),
    ("html", *nested_b(10_000)),
    ("markdown", *nested_markdown(1000)),
    ("markdown", *nested_markdown(10_000)),
    ("markdown", ">" * (MAX_NESTING - 1) + " ein hund\n", ">" * (MAX_NESTING - 1) + " hund ein\n"),
]


@pytest.mark.parametrize("format, document, expected", CASES)
def test_a_deeply_nested_document_is_translated_with_its_markup(
    client, caplog, format, document, expected
):
    with caplog.at_level(logging.INFO):
        response = client.post("/v1/translate", json={"text": document, "format": format})
    assert response.status_code == 200, response.text[:300]
    assert response.json()["translations"] == [{"text": expected}]
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]


@pytest.mark.parametrize("depth", [500, 10_000])
def test_libretranslates_html_translates_a_deeply_nested_page(client, caplog, depth):
    page, expected = nested_b(depth)
    body = {"q": page, "source": "de", "target": "en", "format": "html"}
    with caplog.at_level(logging.INFO):
        response = client.post("/translate", json=body)
    assert response.status_code == 200, response.text[:300]
    assert response.json()["translatedText"] == expected
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]


@pytest.mark.parametrize(
    "document, line",
    [
        (">" * 500 + " ein hund\n", 1),
        ("ein hund\n\n" + "".join("  " * i + "- ein\n" for i in range(60)), 52),
    ],
    ids=["quotes", "lists"],
)
def test_markdown_nested_deeper_than_it_reads_is_a_400_naming_the_line(
    client, caplog, document, line
):
    with caplog.at_level(logging.INFO):
        response = client.post("/v1/translate", json={"text": document, "format": "markdown"})
    assert response.status_code == 400, response.text[:300]
    error = response.json()["error"]
    assert error["field"] == "text"
    assert f"line {line}, column 1: block quotes and lists nested" in error["message"]
    assert "\n" not in error["message"]
    assert not [r for r in caplog.records if r.exc_info]
