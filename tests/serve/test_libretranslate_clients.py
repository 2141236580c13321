"""`tmt serve` through the LibreTranslate clients people have: libretranslatepy and
libretranslate-aio (sync and async) against a real server on a loopback port with the real
engine, translating texts as the Translator does and HTML as `tmt translate --format html`
does; their errors for a bad key, a limit, bad input; and `tmt serve --api-keys` itself, in a
child process, reading its keys again on SIGHUP."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
libretranslatepy = pytest.importorskip("libretranslatepy")
libretranslate_aio = pytest.importorskip("libretranslate_aio")

from libretranslate_aio import (  # noqa: E402
    AsyncLibreTranslate,
    BadRequestError,
    ForbiddenError,
    LibreTranslate,
    RateLimitError,
)

from tests.serve.real_engine import serving  # noqa: E402
from transformer_mt.documents.translate import translate_document  # noqa: E402
from transformer_mt.inference.line_settings import LineSettings  # noqa: E402
from transformer_mt.inference.requests import Texts  # noqa: E402
from transformer_mt.inference.translator import Translator  # noqa: E402
from transformer_mt.langid import installed  # noqa: E402
from transformer_mt.serve.engine import Engine, ServeLimits  # noqa: E402
from transformer_mt.serve.http_settings import HttpSettings  # noqa: E402
from transformer_mt.serve.server import listen, start_in_thread  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
needs_lingua = pytest.mark.skipif(not installed(), reason="lingua (the langid extra)")
FREE = "free-key-Qm7vX9pRkW8nBzY6"
SLOW = "slow-key-Lw0pZ5nK3Jq8vR2x"  # 2 requests a minute
TEXTS = ["Zwei junge Kinder spielen im Schnee.", "ein mann fährt rad. Eine frau liest."]


def translations(checkpoint: Path, texts: list[str], src: str, tgt: str, **decode) -> list:
    translator = Translator.from_checkpoint(
        str(checkpoint), **decode, lines=LineSettings(src_lang=src, tgt_lang=tgt)
    )
    return translator.translate(texts)


@pytest.fixture(scope="module")
def open_server(multilingual_checkpoint):
    """A server without keys: (url, engine)."""
    yield from serving(multilingual_checkpoint, ServeLimits(kv_blocks=2048))


@pytest.fixture(scope="module")
def keyed_server(multilingual_checkpoint, tmp_path_factory):
    """A server whose keys are FREE (no limits) and SLOW (2 requests a minute): its url."""
    keys = tmp_path_factory.mktemp("keys") / "keys.txt"
    keys.write_text(f"{FREE} - -\n{SLOW} 2 -\n")
    engine = Engine.from_checkpoint(str(multilingual_checkpoint), limits=ServeLimits(kv_blocks=512))
    url, stop = start_in_thread(engine, settings=HttpSettings(api_keys=str(keys)))
    yield url
    stop(drain=False)


def test_libretranslatepy_translates_as_the_translator_does(open_server, multilingual_checkpoint):
    url, _ = open_server
    client = libretranslatepy.LibreTranslateAPI(url)
    for src, tgt in [("de", "en"), ("en", "fr")]:
        want = translations(multilingual_checkpoint, TEXTS[:1], src, tgt)[0].texts[0]
        assert client.translate(TEXTS[0], src, tgt) == want
    codes = {language["code"]: language for language in client.languages()}
    assert sorted(codes) == ["de", "en", "fr"]
    assert codes["de"]["targets"] == ["en", "fr"]  # de->fr is zero-shot: asked for, translated


@needs_lingua
def test_libretranslatepy_detects(open_server):
    client = libretranslatepy.LibreTranslateAPI(open_server[0])
    (found,) = client.detect("Deux jeunes enfants jouent dans la neige.")
    assert found["language"] == "fr" and 50 < found["confidence"] <= 100


def test_libretranslate_aio_translates_a_string_and_a_list(open_server, multilingual_checkpoint):
    url, _ = open_server
    want = [t.texts[0] for t in translations(multilingual_checkpoint, TEXTS, "de", "en")]
    with LibreTranslate(url) as client:
        assert client.translate(TEXTS[0], "de", "en").translated_text == want[0]
        assert client.translate(TEXTS, "de", "en").translated_text == want
        languages = client.languages()
        assert {language.code for language in languages} == {"de", "en", "fr"}
        nbest = translations(multilingual_checkpoint, TEXTS[:1], "de", "en", n_best=3)[0]
        alternatives = client.translate(TEXTS[0], "de", "en", alternatives=2).alternatives
        assert alternatives == [t for t in dict.fromkeys(nbest.texts[1:]) if t and t != want[0]]

    async def with_the_async_client() -> str:
        async with AsyncLibreTranslate(url) as client:
            return (await client.translate(TEXTS[1], "de", "en")).translated_text

    assert asyncio.run(with_the_async_client()) == want[1]


def test_html_is_translated_as_tmt_translate_format_html_translates_it(
    open_server, multilingual_checkpoint
):
    page = (
        "<html><body><h1>Zwei <i>junge</i> Kinder</h1><p>Ein Mann fährt <b>Rad</b>. Eine "
        'Frau liest.</p><pre>ein hund</pre><p translate="no">zwei hunde</p></body></html>'
    )
    translator = Translator.from_checkpoint(str(multilingual_checkpoint))
    want = translate_document(translator, Texts.of([page], directions=[("de", "en")]), "html")
    with LibreTranslate(open_server[0]) as client:
        got = client.translate(page, "de", "en", format="html").translated_text
        assert got == want
        assert "<pre>ein hund</pre>" in got and '<p translate="no">zwei hunde</p>' in got
        with pytest.raises(BadRequestError, match="does not parse"):
            client.translate("<p><b>a</p></b>", "de", "en", format="html")


@needs_lingua
def test_libretranslate_aio_detects_and_translates_from_auto(open_server):
    with LibreTranslate(open_server[0]) as client:
        (found,) = client.detect("Two young children are playing in the snow.")
        assert found.language == "en"
        answer = client.translate("Deux enfants jouent dans la neige.", "auto", "en")
        assert answer.detected_language.language == "fr"
        assert 0 < answer.detected_language.confidence <= 100


def test_a_bad_key_is_libretranslates_403_in_both_clients(keyed_server):
    with pytest.raises(ForbiddenError, match="Invalid API key"):
        LibreTranslate(keyed_server, api_key="not-a-key-of-this-server").translate("a", "de", "en")
    with pytest.raises(ForbiddenError, match="API key is required"):
        LibreTranslate(keyed_server).translate("a", "de", "en")
    client = libretranslatepy.LibreTranslateAPI(keyed_server, api_key="not-a-key-of-this-server")
    with pytest.raises(urllib.error.HTTPError) as caught:
        client.translate("a", "de", "en")
    assert caught.value.code == 403
    assert json.load(caught.value) == {"error": "Invalid API key"}
    good = libretranslatepy.LibreTranslateAPI(keyed_server, api_key=FREE)
    assert isinstance(good.translate("ein hund", "de", "en"), str)
    assert len(good.languages()) == 3


def test_a_limit_hit_is_429_with_retry_after(keyed_server):
    with LibreTranslate(keyed_server, api_key=SLOW) as client:
        client.translate("ein hund", "de", "en")
        client.translate("zwei hunde", "de", "en")
        with pytest.raises(RateLimitError, match="Slowdown"):
            client.translate("drei hunde", "de", "en")
    client = libretranslatepy.LibreTranslateAPI(keyed_server, api_key=SLOW)
    with pytest.raises(urllib.error.HTTPError) as caught:
        client.translate("vier hunde", "de", "en")
    assert caught.value.code == 429 and 1 <= int(caught.value.headers["Retry-After"]) <= 60
    with LibreTranslate(keyed_server, api_key=FREE) as other:
        assert other.translate("ein hund", "de", "en").translated_text is not None


@pytest.mark.parametrize(
    "q, target, text_format, message",
    [
        ("ein hund", "en", "latex", "latex format is not supported"),
        ("", "en", "text", "missing q parameter"),
        (["ein hund"] * 10_000, "en", "text", "request (10000) exceeds text limit (256)"),
        ("ein hund", "xx", "text", "xx is not supported"),
    ],
)
def test_bad_input_is_refused_before_any_work_and_serving_goes_on(
    open_server, q, target, text_format, message
):
    url, engine = open_server
    before = engine.stats()
    with LibreTranslate(url, timeout=60) as client:
        with pytest.raises(BadRequestError) as caught:
            client.translate(q, "de", target, format=text_format)
        assert message in caught.value.message and caught.value.status_code == 400
        after = engine.stats()
        assert after.cache_misses == before.cache_misses  # no sentence reached the engine
        assert after.requests_done == before.requests_done
        assert client.translate("ein hund", "de", "en").translated_text is not None


# --- tmt serve --api-keys in a child process ----------------------------------------------


def status_of(url: str, body: dict, key: str | None = None) -> int:
    """The status of a POST of `body` with `key`; 0 while nothing listens."""
    headers = {"Content-Type": "application/json"}
    if key is not None:
        headers["Authorization"] = f"Bearer {key}"
    request = urllib.request.Request(url, json.dumps(body).encode(), headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status
    except urllib.error.HTTPError as err:
        return err.code
    except OSError:
        return 0


def wait_for(condition, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_tmt_serve_requires_its_keys_reads_them_again_on_sighup_and_logs_none(checkpoint, tmp_path):
    keys = tmp_path / "keys.txt"
    keys.write_text(f"{FREE} - -\n")
    probe = listen("127.0.0.1", 0)
    port = probe.getsockname()[1]
    probe.close()
    url = f"http://127.0.0.1:{port}"
    args = [sys.executable, "-m", "transformer_mt", "serve", "--checkpoint", str(checkpoint)]
    args += ["--port", str(port), "--api-keys", str(keys), "--char-limit", "50"]
    log = tmp_path / "serve.log"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    with open(log, "w") as stderr:
        child = subprocess.Popen(args, cwd=ROOT, env=env, stderr=stderr)
    body = {"q": "ein hund", "source": "de", "target": "en"}
    try:
        wait_for(lambda: status_of(f"{url}/translate", body) or child.poll() is not None, 120)
        assert child.poll() is None, log.read_text()
        assert status_of(f"{url}/translate", body) == 403
        assert status_of(f"{url}/translate", body, FREE) == 200
        assert status_of(f"{url}/v1/translate", {"text": "ein hund"}, FREE) == 200
        assert status_of(f"{url}/translate", {**body, "q": "x" * 51}, FREE) == 400
        # The same size, inode and modification time: only SIGHUP tells the server.
        before = os.stat(keys)
        keys.write_text(f"{SLOW} - -\n")
        os.utime(keys, ns=(before.st_atime_ns, before.st_mtime_ns))
        assert status_of(f"{url}/translate", body, FREE) == 200
        child.send_signal(signal.SIGHUP)
        wait_for(lambda: status_of(f"{url}/translate", body, FREE) == 403, 10)
        assert status_of(f"{url}/translate", body, SLOW) == 200
    finally:
        child.terminate()
        child.wait(timeout=30)
    text = log.read_text()
    assert "api keys: 1 keys from" in text and "(reloaded)" in text, text
    assert "POST /translate 403" in text and FREE not in text and SLOW not in text


def test_tmt_serve_refuses_to_start_with_a_keys_file_that_does_not_read(checkpoint, tmp_path):
    from transformer_mt.cli import main

    bad = tmp_path / "keys.txt"
    bad.write_text("too-short 1 1\n")
    args = ["serve", "--checkpoint", str(checkpoint), "--port", "0", "--api-keys", str(bad)]
    assert main(args) == 2
