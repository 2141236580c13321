"""API keys and limits, in process against the fake engine: the keys file and its reloading,
constant-time lookups, 403 and 429 (with Retry-After) in each API's error body, one count for
/v1 and LibreTranslate's endpoints, limits per client address, keys kept out of logs and
metrics, and CORS."""

from __future__ import annotations

import hmac
import logging
import os

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("httpx")

from fastapi.testclient import TestClient  # noqa: E402

from tests.serve.fakes import fake_translation  # noqa: E402
from transformer_mt.errors import SettingError  # noqa: E402
from transformer_mt.langid import installed  # noqa: E402
from transformer_mt.serve.http import keys, quotas  # noqa: E402
from transformer_mt.serve.http.app import create_app  # noqa: E402
from transformer_mt.serve.http.keys import ApiKeys, KeysFileError, parse_keys  # noqa: E402
from transformer_mt.serve.http.moving_window import MovingWindows  # noqa: E402
from transformer_mt.serve.http_settings import HttpSettings  # noqa: E402

BASE_URL = "http://127.0.0.1:8000"
FREE = "free-key-0123456789abcdef"  # no limits
TWO = "two-requests-a-minute-0123"  # 2 requests per minute
CHARS = "twenty-characters-a-minute"  # 20 characters per minute
KEYS = f"""# key  requests/min  characters/min
{FREE}   -   -
{TWO}    2   -     # a small one
{CHARS}  -   20
"""
LT = {"q": "ein hund", "source": "de", "target": "en"}
V1 = {"text": "ein hund"}


def keys_file(tmp_path, text: str = KEYS) -> str:
    path = tmp_path / "keys.txt"
    path.write_text(text)
    return str(path)


def client_for(engine, **settings) -> TestClient:
    app = create_app(engine, HttpSettings(**settings))
    return TestClient(app, base_url=BASE_URL, raise_server_exceptions=False)


@pytest.fixture
def keyed(engine, tmp_path):
    return client_for(engine, api_keys=keys_file(tmp_path))


def bearer(key: str) -> dict:
    return {"Authorization": f"Bearer {key}"}


# --- the keys file ---------------------------------------------------------------------------


def test_the_keys_file_gives_each_key_its_limits():
    entries = parse_keys(KEYS, "keys.txt")
    limits = [(e.requests_per_minute, e.characters_per_minute) for e in entries]
    assert limits == [(None, None), (2, None), (None, 20)]
    assert all(len(e.digest) == 32 for e in entries)


@pytest.mark.parametrize(
    "line, words",
    [
        (f"{FREE} 10", ["line 2", "2 fields"]),
        ("short-key 10 10", ["line 2", "at least 16"]),
        (f"{FREE}x 0 10", ["line 2", "positive integer"]),
        (f"{FREE}x 10 {'9' * 5000}", ["line 2", "at most"]),  # had been a ValueError traceback
        (f"{FREE}x 10 {10**12 + 1}", ["line 2", "at most 1,000,000,000,000"]),
        (f"{FREE}x 10 lots", ["line 2", "characters per minute"]),
        (f"{FREE} 10 10", ["line 2", "earlier line"]),
    ],
)
def test_a_bad_line_is_named_without_its_key(line, words):
    with pytest.raises(KeysFileError) as caught:
        parse_keys(f"{FREE} - -\n{line}\n", "keys.txt")
    message = str(caught.value)
    assert all(word in message for word in words) and FREE not in message


def test_a_keys_file_that_does_not_read_stops_the_start(tmp_path):
    with pytest.raises(SettingError) as caught:
        ApiKeys(str(tmp_path / "absent.txt"))
    assert caught.value.setting == "api_keys" and "cannot read" in caught.value.reason
    with pytest.raises(SettingError, match="line 1"):
        ApiKeys(keys_file(tmp_path, "one-field-only-0123456789\n"))


@pytest.mark.parametrize("text", ["", "\n\n", "# key  requests  characters\n"])
def test_a_keys_file_without_a_key_stops_the_start(tmp_path, text):
    """Every request would be refused 403: the server does not start."""
    with pytest.raises(SettingError) as caught:
        ApiKeys(keys_file(tmp_path, text))
    assert "holds no key, so every request would be refused" in caught.value.reason


def test_a_byte_order_mark_is_removed_with_a_warning(tmp_path, caplog):
    path = keys_file(tmp_path, "\ufeff" + KEYS)
    with caplog.at_level(logging.WARNING, logger="transformer_mt.serve"):
        api_keys = ApiKeys(path)
    assert api_keys.lookup(FREE) is not None and len(api_keys) == 3
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING] == [
        f"{path}: starts with a UTF-8 byte order mark; it was removed"
    ]


def test_a_keys_file_that_is_not_utf8_is_refused_naming_its_line(tmp_path):
    path = tmp_path / "keys.txt"
    path.write_bytes(KEYS.encode() + b"k\xe9y-of-latin1-editor 10 100\n")
    with pytest.raises(SettingError) as caught:
        ApiKeys(str(path))
    line = KEYS.count("\n") + 1
    assert caught.value.reason == f"{path}:{line}: not valid UTF-8 (byte 0xe9 at column 2)"


def test_a_comment_holding_a_unicode_line_separator_is_one_line(tmp_path):
    """U+2028 or U+0085 in a comment had ended its line (`str.splitlines`): the comment's rest
    was read as a key's line and the error named the next line of the file."""
    api_keys = ApiKeys(keys_file(tmp_path, "# Schl\u00fcssel\u2028Team Nord\u0085x\n" + KEYS))
    assert api_keys.lookup(FREE) is not None and len(api_keys) == 3
    with pytest.raises(SettingError) as caught:
        ApiKeys(keys_file(tmp_path, "# ok\u2028still a comment\nshort 1 1\n"))
    assert " line 2: a key must be" in caught.value.reason


def test_a_file_emptied_while_serving_keeps_the_keys_before(tmp_path, caplog):
    path = keys_file(tmp_path)
    api_keys = ApiKeys(path)
    with open(path, "w") as file:
        file.write("# every key revoked by mistake\n")
    with caplog.at_level(logging.ERROR, logger="transformer_mt.serve"):
        assert api_keys.lookup(FREE) is not None
    (error,) = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert "holds no key" in error and "keeping the 3 keys" in error


def test_a_changed_file_is_read_again_and_a_broken_one_keeps_the_keys_before(tmp_path, caplog):
    path = keys_file(tmp_path)
    api_keys = ApiKeys(path)
    new = "a-key-added-later-0123456789"
    assert api_keys.lookup(new) is None
    with open(path, "a") as file:
        file.write(f"{new} 5 -\n")
    assert api_keys.lookup(new).requests_per_minute == 5
    with open(path, "a") as file:
        file.write(f"{new}-broken five -\n")
    with caplog.at_level(logging.ERROR, logger="transformer_mt.serve"):
        for _ in range(3):
            assert api_keys.lookup(new) is not None and api_keys.lookup(FREE) is not None
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and "line 6" in errors[0] and "keeping the 4 keys" in errors[0]
    assert new not in errors[0]


def test_sighup_reads_the_file_again_even_when_it_looks_unchanged(tmp_path):
    path = keys_file(tmp_path)
    api_keys = ApiKeys(path)
    before = os.stat(path)
    swapped = KEYS.replace(FREE, FREE[::-1])  # same size, same inode
    with open(path, "r+") as file:
        file.write(swapped)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert api_keys.lookup(FREE) is not None  # the change cannot be seen
    api_keys.reload_soon()
    assert api_keys.lookup(FREE) is None and api_keys.lookup(FREE[::-1]) is not None


def test_a_lookup_compares_the_digest_with_every_key_through_compare_digest(tmp_path, monkeypatch):
    api_keys = ApiKeys(keys_file(tmp_path))
    compared = []
    real = hmac.compare_digest

    def recording(a: bytes, b: bytes) -> bool:
        compared.append((len(a), len(b)))
        return real(a, b)

    monkeypatch.setattr(keys.hmac, "compare_digest", recording)
    assert api_keys.lookup(FREE) is not None  # the first key: the others are compared too
    assert api_keys.lookup("not-a-key-of-the-file-000") is None
    assert compared == [(32, 32)] * 6


def test_without_compare_digest_saying_yes_no_key_gets_in(keyed, monkeypatch):
    monkeypatch.setattr(keys.hmac, "compare_digest", lambda a, b: False)
    response = keyed.post("/v1/translate", json=V1, headers=bearer(FREE))
    assert response.status_code == 403


# --- 403 and 429 -----------------------------------------------------------------------------


def test_without_a_key_or_with_an_unknown_one_both_apis_answer_403(keyed, engine):
    v1 = keyed.post("/v1/translate", json=V1)
    assert v1.status_code == 403 and v1.json()["error"]["message"] == quotas.MISSING_KEY
    lt = keyed.post("/translate", data=LT)
    assert (lt.status_code, lt.json()) == (403, {"error": quotas.MISSING_KEY})
    wrong = keyed.post("/translate", data={**LT, "api_key": "nobody-has-this-key-00"})
    assert (wrong.status_code, wrong.json()) == (403, {"error": "Invalid API key"})
    detect = keyed.post("/detect", data={"q": "ein hund"})
    assert detect.status_code == 403
    stream = keyed.post("/v1/translate/stream", json=V1, headers=bearer("nobody-has-this-key"))
    assert stream.status_code == 403
    assert engine.jobs == []
    assert keyed.get("/languages").status_code == 200  # free, as LibreTranslate's
    assert keyed.get("/v1/languages").status_code == 200


def test_a_key_in_the_header_or_the_field_is_served(keyed):
    v1 = keyed.post("/v1/translate", json=V1, headers=bearer(FREE))
    assert v1.json()["translations"][0]["text"] == fake_translation(V1["text"])
    lt = keyed.post("/translate", data={**LT, "api_key": FREE})
    assert lt.json() == {"translatedText": fake_translation(LT["q"])}
    assert keyed.post("/translate", json=LT, headers=bearer(FREE)).status_code == 200


def test_each_key_has_its_own_cache_scope_in_both_apis(keyed, engine):
    """The fake engine counts a hit for a text its scope has seen (as the real one does)."""
    for key in (FREE, CHARS):
        assert keyed.post("/v1/translate", json=V1, headers=bearer(key)).status_code == 200
    assert keyed.post("/translate", data={**LT, "api_key": TWO}).status_code == 200
    assert engine.hits == 0  # three keys, one text: three scopes
    assert keyed.post("/translate", data={**LT, "api_key": FREE}).status_code == 200
    assert engine.hits == 1
    unkeyed = client_for(engine)  # without keys: one scope for every client
    assert unkeyed.post("/v1/translate", json=V1, headers=bearer(FREE)).status_code == 200
    assert unkeyed.post("/v1/translate", json=V1).status_code == 200
    assert engine.hits == 2


DETECT = pytest.param(
    "/detect",
    {"q": "ein hund"},
    marks=pytest.mark.skipif(not installed(), reason="lingua (the langid extra)"),
)


@pytest.mark.parametrize(("path", "fields"), [("/translate", LT), DETECT])
def test_a_key_in_the_query_string_is_read_with_a_json_a_form_or_no_body(keyed, path, fields):
    for body in ({"json": fields}, {"data": fields}):
        response = keyed.post(f"{path}?api_key={FREE}", **body)
        assert response.status_code == 200, response.text
    query = "&".join(f"{name}={value}" for name, value in fields.items())
    assert keyed.post(f"{path}?{query}&api_key={FREE}").status_code == 200
    # A key in the body is the key, a key in the query string aside; a null one is none.
    unknown = "nobody-has-this-key-00"
    wrong = keyed.post(f"{path}?api_key={FREE}", json={**fields, "api_key": unknown})
    assert (wrong.status_code, wrong.json()) == (403, {"error": "Invalid API key"})
    assert keyed.post(f"{path}?api_key={unknown}", data={**fields, "api_key": FREE}).is_success
    assert keyed.post(f"{path}?api_key={FREE}", json={**fields, "api_key": None}).is_success
    # The field before the Authorization header.
    header = keyed.post(path, json={**fields, "api_key": unknown}, headers=bearer(FREE))
    assert header.status_code == 403


def test_a_key_that_is_not_one_string_is_refused_naming_the_field(keyed, engine):
    for body in ({"json": {**LT, "api_key": 12345}}, {"data": {**LT, "api_key": [FREE, TWO]}}):
        response = keyed.post("/translate", **body)
        assert response.status_code == 400
        assert response.json() == {"error": "Invalid request: api_key parameter must be a string"}
    assert engine.jobs == []


def test_over_a_keys_requests_429_with_retry_after_and_one_count_for_both_apis(keyed, engine):
    assert keyed.post("/v1/translate", json=V1, headers=bearer(TWO)).status_code == 200
    assert keyed.post("/translate", json={**LT, "api_key": TWO}).status_code == 200
    lt = keyed.post("/translate", json={**LT, "api_key": TWO})
    assert lt.status_code == 429 and 1 <= int(lt.headers["Retry-After"]) <= 60
    assert lt.json() == {"error": "Slowdown: 2 requests per 1 minute for this key"}
    v1 = keyed.post("/v1/translate", json=V1, headers=bearer(TWO))
    assert v1.status_code == 429 and "Retry-After" in v1.headers
    assert len(engine.jobs) == 2
    assert keyed.post("/v1/translate", json=V1, headers=bearer(FREE)).status_code == 200


def test_a_request_of_more_texts_than_a_minute_allows_is_too_large_not_slowed(keyed):
    v1 = keyed.post("/v1/translate", json={"text": ["a", "b", "c"]}, headers=bearer(TWO))
    assert v1.status_code == 413 and "may send 2 per minute" in v1.json()["error"]["message"]
    lt = keyed.post("/translate", json={**LT, "q": ["a", "b", "c"], "api_key": TWO})
    assert lt.status_code == 400 and "may send 2 per minute" in lt.json()["error"]
    assert keyed.post("/translate", json={**LT, "q": ["a", "b"], "api_key": TWO}).status_code == 200


def test_characters_per_minute_count_every_text(keyed):
    fifteen = "zwei hunde rennen"[:15]
    assert keyed.post("/v1/translate", json={"text": fifteen}, headers=bearer(CHARS)).is_success
    again = keyed.post("/translate", json={**LT, "q": fifteen, "api_key": CHARS})
    assert again.status_code == 429 and "20 characters per 1 minute" in again.json()["error"]


def test_requests_per_address_without_keys_and_refusals_are_not_counted(engine):
    client = client_for(engine, req_limit=3)
    assert client.post("/translate", json={**LT, "target": "xx"}).status_code == 400
    assert client.post("/v1/translate", json={"text": ["a", "b"]}).status_code == 200
    assert client.post("/translate", data=LT).status_code == 200
    slowed = client.post("/translate", data=LT)
    assert slowed.status_code == 429 and "this address" in slowed.json()["error"]
    assert int(slowed.headers["Retry-After"]) >= 1


def test_the_char_limit_bounds_the_characters_of_a_request_in_both_apis(engine):
    """As LibreTranslate counts a batch: the sum of its texts. Each text had been bounded, so
    20 texts of 96 characters passed a limit of 100."""
    client = client_for(engine, char_limit=10)
    v1 = client.post("/v1/translate", json={"text": ["kurz", "x" * 7]})
    assert v1.status_code == 413 and v1.json()["error"]["field"] == "text"
    assert "11 characters in this request" in v1.json()["error"]["message"]
    lt = client.post("/translate", json={**LT, "q": ["x" * 5, "x" * 6]})
    assert lt.status_code == 400
    assert lt.json() == {
        "error": "text: 11 characters in this request; the server takes at most 10 per request"
    }
    assert client.post("/translate", json={**LT, "q": ["x" * 5, "x" * 5]}).status_code == 200


def test_keys_are_in_no_log_line_and_no_metric(keyed, caplog):
    with caplog.at_level(logging.DEBUG):
        keyed.post("/v1/translate", json=V1, headers=bearer(FREE))
        keyed.post("/translate", data={**LT, "api_key": TWO})
        keyed.post("/translate", data={**LT, "api_key": "unknown-key-0123456789"})
        keyed.post(f"/translate?api_key={CHARS}", data=LT)
        for _ in range(3):
            keyed.post("/translate", data={**LT, "api_key": TWO})
        metrics = keyed.get("/metrics").text
    # Every logger but the test client's own (httpx logs the URLs it requests).
    server_side = [r for r in caplog.records if not r.name.startswith("httpx")]
    logged = "\n".join(record.getMessage() for record in server_side)
    assert "POST /translate 429" in logged and "POST /translate 403" in logged
    digests = [entry.id for entry in parse_keys(KEYS, "keys.txt")]
    for secret in [FREE, TWO, CHARS, "unknown-key-0123456789", *digests]:
        assert secret not in logged and secret not in metrics
    assert 'status="429"' in metrics


# --- CORS ------------------------------------------------------------------------------------

ORIGIN = "https://app.example"


def test_no_cors_headers_by_default_and_cross_origin_requests_refused(engine):
    client = client_for(engine)
    plain = client.post("/translate", json=LT)
    assert plain.status_code == 200 and "access-control-allow-origin" not in plain.headers
    foreign = client.post("/translate", json=LT, headers={"Origin": ORIGIN})
    assert foreign.status_code == 403 and "access-control-allow-origin" not in foreign.headers
    preflight = client.options(
        "/translate",
        headers={"Origin": ORIGIN, "Access-Control-Request-Method": "POST"},
    )
    assert "access-control-allow-origin" not in preflight.headers


def test_cors_headers_for_a_listed_origin_with_the_authorization_header(engine, tmp_path):
    client = client_for(engine, cors_origins=(ORIGIN,), api_keys=keys_file(tmp_path))
    preflight = client.options(
        "/translate",
        headers={
            "Origin": ORIGIN,
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization, content-type",
        },
    )
    assert preflight.status_code == 200
    assert preflight.headers["access-control-allow-origin"] == ORIGIN
    assert "authorization" in preflight.headers["access-control-allow-headers"].lower()
    answer = client.post("/translate", json=LT, headers={"Origin": ORIGIN, **bearer(FREE)})
    assert answer.status_code == 200
    assert answer.headers["access-control-allow-origin"] == ORIGIN
    other = client.post("/translate", json=LT, headers={"Origin": "https://evil.example"})
    assert other.status_code == 403 and "access-control-allow-origin" not in other.headers


class Clock:
    """The time module of the moving windows, its monotonic clock moved by hand."""

    def __init__(self, now: float):
        self.now = now

    def monotonic(self) -> float:
        return self.now


@pytest.mark.parametrize(
    "moments, cost, retry_after",
    [
        ([(20.0, 3)], 1, 60),  # all three must leave the last 60 s
        ([(10.0, 1), (20.0, 2)], 1, 50),  # the first one must
        ([(10.0, 1), (20.0, 2)], 2, 60),  # and two more
        ([(10.0, 2), (30.0, 1)], 2, 40),  # the first two
    ],
)
def test_retry_after_is_the_first_second_at_which_the_request_passes(
    monkeypatch, moments, cost, retry_after
):
    """Requests sent at moments (seconds, how many), up to a limit of 3 a minute; half a
    second later a request of `cost` texts is refused, refused a second before its
    Retry-After, served at it."""
    clock = Clock(60.0 * 1000)
    monkeypatch.setattr("transformer_mt.serve.http.moving_window.time", clock)
    limited = quotas.Quotas(HttpSettings(req_limit=3))
    start = clock.now
    for seconds, requests in moments:
        clock.now = start + seconds
        for _ in range(requests):
            limited.admit(None, "10.0.0.1", ["a"])
    texts = ["a"] * cost
    clock.now += 0.5  # half a second after the last: no unit leaves at a whole second
    with pytest.raises(quotas.ApiError) as refused:
        limited.admit(None, "10.0.0.1", texts)
    assert (refused.value.status, refused.value.retry_after) == (429, retry_after)
    refused_at = clock.now
    clock.now = refused_at + retry_after - 1
    with pytest.raises(quotas.ApiError):
        limited.admit(None, "10.0.0.1", texts)
    clock.now = refused_at + retry_after
    limited.admit(None, "10.0.0.1", texts)


def test_a_window_keeps_one_entry_per_request_whatever_it_counts(monkeypatch):
    """The limits library's moving window kept one entry per unit: a key of 10^12 characters a
    minute sent 2.5 MB requests and grew the server to 4 GB."""
    clock = Clock(1000.0)
    monkeypatch.setattr("transformer_mt.serve.http.moving_window.time", clock)
    windows = MovingWindows()
    for _ in range(60):
        assert windows.fits("key:a:characters", 10**12, 2_500_000)
        windows.hit("key:a:characters", 2_500_000)
    counted = windows._counted["key:a:characters"]
    assert len(counted.entries) == 60 and counted.total == 150_000_000
    assert not windows.fits("key:a:characters", 150_000_000, 1)
    clock.now += 60.0  # all of them left the window, and an idle holder is forgotten
    assert windows.fits("key:a:characters", 1, 1)
    windows.hit("address:b", 1)
    assert list(windows._counted) == ["address:b"]
