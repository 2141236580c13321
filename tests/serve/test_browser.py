"""The web page in headless Chromium, as a person uses it (tests/serve/browser.py): what the
page shows for sentences, a paragraph and an HTML snippet equals what POST /v1/translate
returns for the same request; it lists a multilingual model's languages (zero-shot targets
marked), shows the language it detected, sends the API key typed into it, and its metrics
panel fills from /metrics; the API page at /docs draws the API from the server's own copy of
its script. Real servers, real engines, tiny untrained models. Skipped where
selenium, chromium or chromium-driver is absent: `make test-browser` installs them.
"""

from __future__ import annotations

import contextlib
import json
import re
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytest.importorskip("prometheus_client")

from tests.serve.browser import Page, Shown, chromium, drawn_text, missing  # noqa: E402
from transformer_mt.langid import installed  # noqa: E402
from transformer_mt.serve.engine import Engine, ServeLimits  # noqa: E402
from transformer_mt.serve.http_settings import HttpSettings  # noqa: E402
from transformer_mt.serve.server import start_in_thread  # noqa: E402

KV_BLOCKS = 500
# Words the tiny test tokenizer knows (tests/conftest.py WORDS).
SENTENCES = ["ein mann fährt rad", "zwei hunde spielen im schnee"]
# Three sentences on one line: the server splits them (capitals, so that the splitter sees
# sentence starts in any language).
PARAGRAPH = "Ein Mann fährt Rad. Zwei Hunde spielen im Schnee. Eine Frau liest das Buch."
SNIPPET = '<p>ein <b>mann</b> fährt <a href="#rad">rad</a>. zwei <i>hunde</i> spielen.</p>'
KEY = "page-key-0123456789abcdef"
PANEL = {
    "m-queue": r"\d+ sentences",
    "m-running": r"\d+ sentences, \d+ hypotheses",
    "m-kv": rf"\d+ / {KV_BLOCKS}",
    "m-speed": r"\d+\.\d",
    "m-cache": r"\w+: \d+(, \w+: \d+)*",
}


@contextlib.contextmanager
def serve(checkpoint: Path, settings: HttpSettings | None = None) -> Iterator[str]:
    """A real server of `checkpoint` in a thread: its base URL."""
    engine = Engine.from_checkpoint(str(checkpoint), limits=ServeLimits(kv_blocks=KV_BLOCKS))
    base, stop = start_in_thread(engine, settings=settings)
    try:
        yield base
    finally:
        stop(drain=False)


@pytest.fixture(scope="module")
def url(checkpoint):
    with serve(checkpoint) as base:
        yield base


@pytest.fixture(scope="module")
def multilingual_url(multilingual_checkpoint):
    with serve(multilingual_checkpoint) as base:
        yield base


@pytest.fixture(scope="module")
def driver():
    if reason := missing():
        pytest.skip(reason)
    with chromium() as browser:
        yield browser


def api_translations(url: str, body: dict, key: str | None = None) -> list[Shown]:
    """What POST /v1/translate returns for `body`, as the page would show it."""
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    request = urllib.request.Request(f"{url}/v1/translate", json.dumps(body).encode(), headers)
    with urllib.request.urlopen(request, timeout=30) as response:
        found = json.load(response)["translations"]
    return [
        Shown(t["text"], t.get("score"), t["detected"]["language"] if "detected" in t else None)
        for t in found
    ]


def assert_shown(page: Page, expected: list[Shown]) -> None:
    shown = page.shown()
    assert [s.text for s in shown] == [e.text for e in expected]
    assert [s.detected for s in shown] == [e.detected for e in expected]
    for s, e in zip(shown, expected, strict=True):
        assert (s.score is None) == (e.score is None)
        if e.score is not None:
            assert s.score == pytest.approx(e.score, abs=1e-3)


def test_page_translates_as_the_api_does_and_shows_metrics(driver, url):
    page = Page(driver, url)
    assert not page.element("choose").is_displayed()  # one direction: nothing to choose
    # The checkpoint's beam size (tests/conftest.py: DecodeConfig's), as the API's default.
    assert page.element("beam").get_attribute("value") == "5"
    assert re.fullmatch(r"\d+ ms", page.translate("\n".join(SENTENCES)))  # else its error
    assert_shown(page, api_translations(url, {"text": SENTENCES}))
    assert page.element("translate").is_enabled()

    # A poll after the translation: the tokens it generated in the last seconds are counted.
    page.wait.until(lambda _: page.text("m-speed") != "-" and float(page.text("m-speed")) > 0)
    for element, pattern in PANEL.items():
        assert re.fullmatch(pattern, page.text(element)), element
    assert page.severe_errors() == []


def test_page_lists_a_multilingual_models_languages_marking_zero_shot(driver, multilingual_url):
    # tests/conftest.py MULTILINGUAL: de<->en, fr<->en, de->en the default.
    page = Page(driver, multilingual_url)
    assert page.element("choose").is_displayed()
    sources = [value for value, _ in page.options("src-lang")]
    assert sources == (["auto"] if installed() else []) + ["de", "en", "fr"]
    assert page.element("src-lang").get_attribute("value") == "de"
    assert page.options("tgt-lang") == [("en", "English (en)"), ("fr", "French (fr), zero-shot")]
    page.choose(source="en")
    assert page.options("tgt-lang") == [("de", "German (de)"), ("fr", "French (fr)")]
    assert page.severe_errors() == []


def test_page_translates_a_paragraph_into_the_chosen_target(driver, multilingual_url):
    page = Page(driver, multilingual_url)
    page.choose(source="en", target="fr")
    assert re.fullmatch(r"\d+ ms", page.translate(PARAGRAPH))
    body = {"text": [PARAGRAPH], "source": "en", "target": "fr"}
    assert_shown(page, api_translations(multilingual_url, body))
    assert page.severe_errors() == []


def tags(html: str) -> list[str]:
    return sorted(re.findall(r"</?\w+[^>]*>", html))


def test_page_translates_an_html_snippet_keeping_its_tags(driver, multilingual_url):
    page = Page(driver, multilingual_url)
    page.choose(source="de", target="en", fmt="html")
    assert re.fullmatch(r"\d+ ms", page.translate(SNIPPET))
    body = {"text": [SNIPPET], "format": "html", "source": "de", "target": "en"}
    expected = api_translations(multilingual_url, body)
    assert_shown(page, expected)
    assert expected[0].score is None and tags(expected[0].text) == tags(SNIPPET)
    preview = page.element("preview")
    assert preview.is_displayed() and preview.get_attribute("srcdoc") == expected[0].text
    assert page.severe_errors() == []


@pytest.mark.skipif(not installed(), reason="lingua (the langid extra)")
def test_page_shows_the_language_it_detected(driver, multilingual_url):
    page = Page(driver, multilingual_url)
    page.choose(source="auto", target="en")
    assert re.fullmatch(r"\d+ ms", page.translate("Zwei Hunde spielen im Schnee."))
    body = {"text": ["Zwei Hunde spielen im Schnee."], "source": "auto", "target": "en"}
    expected = api_translations(multilingual_url, body)
    assert expected[0].detected == "de"
    assert_shown(page, expected)


def test_page_sends_the_key_typed_into_it(driver, checkpoint, tmp_path):
    keys = tmp_path / "keys.txt"
    keys.write_text(f"{KEY} - -\n")
    with serve(checkpoint, HttpSettings(api_keys=str(keys))) as keyed_url:
        page = Page(driver, keyed_url)
        assert page.translate(SENTENCES[0]).startswith("403")
        assert re.fullmatch(r"\d+ ms", page.translate(SENTENCES[0], key=KEY))
        body = {"text": [SENTENCES[0]]}
        assert_shown(page, api_translations(keyed_url, body, key=KEY))


def test_the_api_page_shows_the_api_without_the_internet(driver, url):
    """Nothing outside the server is reachable here (nor in CI): a script from a CDN would
    leave the page blank, and any load from outside would be a console error."""
    driver.get_log("browser")  # the earlier pages' entries
    assert "/v1/translate" in drawn_text(driver, f"{url}/docs", ".opblock-summary-path")
    assert [e for e in driver.get_log("browser") if e["level"] == "SEVERE"] == []
