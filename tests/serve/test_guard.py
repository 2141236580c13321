"""What the app answers before any endpoint runs (Host, Origin, headers), what it writes into
the log from a request, and /health once the engine is gone; in process, against the fake
engine."""

from __future__ import annotations

import asyncio
import json
import logging
import socket

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("prometheus_client")
pytest.importorskip("httpx")

from fastapi.testclient import TestClient  # noqa: E402

from tests.serve.fakes import DIE, FakeEngine, fake_translation  # noqa: E402
from transformer_mt.errors import SettingError  # noqa: E402
from transformer_mt.serve.http import libretranslate  # noqa: E402
from transformer_mt.serve.http.app import create_app  # noqa: E402
from transformer_mt.serve.http.guard import HostRule, RequestGuard  # noqa: E402
from transformer_mt.serve.http_settings import HttpSettings  # noqa: E402
from transformer_mt.serve.server import start_in_thread  # noqa: E402

GOOD = {"text": "ein kleiner hund"}


def client_for(engine, settings=None, listen_host="127.0.0.1", host="127.0.0.1:8000"):
    app = create_app(engine, settings, listen_host)
    return TestClient(app, base_url=f"http://{host}", raise_server_exceptions=False)


def translated(response) -> bool:
    return response.status_code == 200 and response.json()["translations"][0]["text"] == (
        fake_translation(GOOD["text"])
    )


@pytest.mark.parametrize("host", ["evil.example", "evil.example:8000", "localhost.evil.example"])
def test_a_host_the_server_does_not_listen_on_is_refused(engine, host):
    """DNS rebinding: a page whose name resolves to 127.0.0.1 sends its own Host."""
    response = client_for(engine, host=host).post("/v1/translate", json=GOOD)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["field"] == "Host" and host in error["message"]
    assert not engine.jobs
    assert client_for(engine, host=host).get("/metrics").status_code == 400


def test_the_guards_refusal_is_written_as_the_routes_write_theirs(engine):
    """One body, whoever refuses: compact JSON."""
    guarded = client_for(engine, host="evil.example").get("/health")
    routed = client_for(engine).post("/v1/translate", json={"text": "a", "beam_sise": 2})
    assert guarded.content.startswith(b'{"error":{"status":400,"field":"Host","message":')
    assert routed.content.startswith(b'{"error":{"status":400,"field":"beam_sise",')


@pytest.mark.parametrize("host", ["127.0.0.1:8000", "127.0.0.1", "localhost:8000", "LOCALHOST"])
def test_the_listening_address_and_localhost_are_answered(engine, host):
    assert translated(client_for(engine, host=host).post("/v1/translate", json=GOOD))


def test_configured_names_are_answered(engine):
    settings = HttpSettings(allowed_hosts=("mt.example.org", "*.corp.example"))
    for host in ("mt.example.org", "a.corp.example:8000", "MT.EXAMPLE.ORG."):
        assert translated(client_for(engine, settings, host=host).post("/v1/translate", json=GOOD))
    refused = client_for(engine, settings, host="corp.example.evil").post(
        "/v1/translate", json=GOOD
    )
    assert refused.status_code == 400


def test_host_rules_by_listener():
    wildcard = HostRule.for_listener("0.0.0.0")
    assert wildcard.allows("10.1.2.3") and wildcard.allows("::1") and wildcard.allows("localhost")
    assert not wildcard.allows("evil.example")
    named = HostRule.for_listener("localhost")
    assert named.allows("127.0.0.1") and named.allows("localhost")
    one = HostRule.for_listener("10.0.0.7", ("mt.example.org",))
    assert one.allows("10.0.0.7") and one.allows("mt.example.org")
    assert not one.allows("10.0.0.8") and not one.allows("localhost")
    assert HostRule.for_listener("127.0.0.1", ("*",)).allows("anything.example")


def test_a_cross_origin_request_is_refused_unless_its_origin_is_allowed(engine):
    own = {"Origin": "http://127.0.0.1:8000"}
    foreign = {"Origin": "http://evil.example"}
    client = client_for(engine)
    assert translated(client.post("/v1/translate", json=GOOD, headers=own))  # the web page
    for headers in (foreign, {"Origin": "null"}, {"Origin": "http://127.0.0.1:3000"}):
        response = client.post("/v1/translate", json=GOOD, headers=headers)
        assert response.status_code == 403, headers
        assert response.json()["error"]["field"] == "Origin"
    assert not any(job.texts == [GOOD["text"]] for job in engine.jobs[1:])
    allowed = client_for(engine, HttpSettings(cors_origins=("http://evil.example",)))
    response = allowed.post("/v1/translate", json=GOOD, headers=foreign)
    assert translated(response)
    assert response.headers["access-control-allow-origin"] == "http://evil.example"
    preflight = allowed.options(
        "/v1/translate",
        headers={**foreign, "Access-Control-Request-Method": "POST"},
    )
    assert preflight.status_code == 200


def test_a_cors_origin_must_be_an_origin():
    with pytest.raises(SettingError, match="scheme://host"):
        HttpSettings(cors_origins=("evil.example",))


def test_a_path_with_a_slash_is_not_redirected_to_the_clients_host(engine):
    response = client_for(engine).get("/metrics/", follow_redirects=False)
    assert response.status_code == 404 and "location" not in response.headers


def test_more_headers_than_the_limit_are_refused(engine):
    client = client_for(engine, HttpSettings(max_headers=20))
    headers = {f"x-h{i}": "1" for i in range(30)}
    response = client.post("/v1/translate", json=GOOD, headers=headers)
    assert response.status_code == 431 and "at most 20" in response.json()["error"]["message"]
    assert translated(client.post("/v1/translate", json=GOOD))


def test_a_head_over_the_size_limit_is_refused(engine):
    client = client_for(engine)
    response = client.post("/v1/translate", json=GOOD, headers={"X-Big": "a" * 100_000})
    assert response.status_code == 431 and "at most 16384" in response.json()["error"]["message"]
    assert translated(client.post("/v1/translate", json=GOOD, headers={"X-Small": "a" * 1000}))


def test_control_characters_from_the_request_are_escaped_in_the_log(engine, caplog):
    forged = "2026-12-03 00:00:00,000 INFO transformer_mt.serve: POST /v1/translate 200"
    path = "/x%0a" + forged.replace(" ", "%20") + "%1b[2J%e2%80%ae"
    with caplog.at_level(logging.INFO, logger="transformer_mt.serve"):
        assert client_for(engine).get(path).status_code == 404
    (line,) = [r.getMessage() for r in caplog.records if "404" in r.getMessage()]
    assert "\n" not in line and "\x1b" not in line and "\u202e" not in line
    assert line.startswith("GET /x\\n2026-12-03") and "\\x1b[2J\\u202e" in line


def test_health_says_when_the_engine_has_died(engine):
    client = client_for(engine)
    assert client.get("/health").json() == {"status": "ok"}
    response = client.post("/v1/translate", json={"text": DIE})
    assert response.status_code == 503
    assert client.get("/health").status_code == 503
    assert client.get("/health").json() == {"status": "engine stopped"}
    assert client.post("/v1/translate", json=GOOD).status_code == 503


def guard_answer(headers: list[tuple[bytes, bytes]], settings=None, http_version="1.1"):
    """RequestGuard's refusal of a GET /health with `headers`, as (status, error body); None
    when it passes the request on. At the ASGI level, so that headers an HTTP server would
    refuse first (two Hosts, for h11) reach the guard as another server may pass them on."""
    passed, sent = [], []

    async def app(scope, receive, send):
        passed.append(scope)

    async def send(message):
        sent.append(message)

    async def receive():
        return {"type": "http.request", "body": b""}

    settings = settings if settings is not None else HttpSettings()
    guard = RequestGuard(app, HostRule.for_listener("127.0.0.1", settings.allowed_hosts), settings)
    scope = {
        "type": "http",
        "http_version": http_version,
        "method": "GET",
        "scheme": "http",
        "path": "/health",
        "raw_path": b"/health",
        "query_string": b"",
        "headers": headers,
    }
    asyncio.run(guard(scope, receive, send))
    if passed:
        return None
    return sent[0]["status"], json.loads(sent[1]["body"])["error"]


@pytest.mark.parametrize(
    ("headers", "message"),
    [
        ([], "Host: missing"),
        ([(b"host", b"")], "Host: empty"),
        ([(b"host", b" \t ")], "Host: empty"),
        ([(b"host", b"127.0.0.1"), (b"host", b"127.0.0.1")], "Host: given 2 times"),
        ([(b"host", b"evil.example"), (b"host", b"127.0.0.1")], "Host: given 2 times"),
        ([(b"host", b"127.0.0.1"), (b"host", b"")], "Host: given 2 times"),
        ([(b"host", b"127.0.0.1 evil.example")], "not a host[:port]"),
        ([(b"host", b"127.0.0.1:x")], "not a host[:port]"),
        ([(b"host", b"127.0.0.1:80:80")], "not a host[:port]"),
        ([(b"host", b"evil.example@127.0.0.1")], "not a host[:port]"),
        ([(b"host", b"[::1")], "not a host[:port]"),
        ([(b"host", b"127.0.0.1/x")], "not a host[:port]"),
    ],
)
def test_a_host_header_missing_empty_repeated_or_malformed_is_refused(headers, message):
    """Whatever the Host rule: with --allowed-hosts '*' too, a request names one host."""
    for settings in (HttpSettings(), HttpSettings(allowed_hosts=("*",))):
        for version in ("1.0", "1.1"):
            status, error = guard_answer(headers, settings, version)
            assert (status, error["field"]) == (400, "Host")
            assert message in error["message"], error


@pytest.mark.parametrize(
    "host", [b"127.0.0.1", b" 127.0.0.1 ", b"127.0.0.1:", b"127.0.0.1:8000", b"LOCALHOST.:80"]
)
def test_one_host_the_server_answers_passes_with_either_http_version(host):
    for version in ("1.0", "1.1"):
        assert guard_answer([(b"host", host)], http_version=version) is None


def test_two_origin_headers_are_refused_even_when_one_is_allowed():
    own = (b"origin", b"http://127.0.0.1")
    assert guard_answer([(b"host", b"127.0.0.1"), own]) is None
    for origins in ([own, (b"origin", b"http://evil.example")], [own, own]):
        status, error = guard_answer([(b"host", b"127.0.0.1"), *origins])
        assert (status, error["field"]) == (400, "Origin")
        assert "given 2 times" in error["message"]


def test_two_authorization_headers_are_refused():
    """The first had been taken as the key: which of two keys is the client's (a proxy may
    add its own) is not the server's to guess."""
    key = (b"authorization", b"Bearer one")
    assert guard_answer([(b"host", b"127.0.0.1"), key]) is None
    status, error = guard_answer([(b"host", b"127.0.0.1"), key, (b"authorization", b"Bearer two")])
    assert (status, error["field"]) == (400, "Authorization")
    assert error["message"] == "Authorization: given 2 times; a request has one key"


@pytest.mark.parametrize(
    ("header", "field", "words"),
    [
        ((b"content-encoding", b"gzip"), "Content-Encoding", "gzip; the server reads bodies as"),
        ((b"content-type", b"application/json; charset=iso-8859-1"), "Content-Type", "iso-8859-1"),
        ((b"content-type", b'text/plain; charset="latin1"'), "Content-Type", "latin1"),
    ],
)
def test_a_compressed_body_or_another_charset_is_a_415_naming_the_header(header, field, words):
    """Both had been read as UTF-8 and refused as `body: not UTF-8 (byte 0x8b at offset 1)`."""
    status, error = guard_answer([(b"host", b"127.0.0.1"), header])
    assert (status, error["field"]) == (415, field) and words in error["message"]


def test_the_guard_knows_every_libretranslate_endpoint(engine):
    app = create_app(engine)
    served = {r.path for r in app.routes if "LibreTranslate" in getattr(r, "tags", [])}
    assert served == libretranslate.PATHS


@pytest.mark.parametrize(
    ("path", "headers", "message"),
    [
        (
            "/translate",
            {"content-type": "application/x-www-form-urlencoded; charset=latin1"},
            "Content-Type: charset=latin1; the server reads UTF-8: send the text in UTF-8",
        ),
        ("/detect", {"content-encoding": "gzip"}, "Content-Encoding: gzip; the server reads"),
        ("/languages", {"origin": "http://evil.example"}, "Origin http://evil.example: cross-"),
    ],
)
def test_a_refusal_before_a_libretranslate_endpoint_is_in_its_error_body(
    engine, path, headers, message
):
    """LibreTranslate's clients read {"error": "message"} and know 400, 403, 429 and 500 only:
    the guard's refusals there are written as the endpoint's own are."""
    client = client_for(engine)
    if path == "/languages":
        answer = client.get(path, headers=headers)
    else:
        answer = client.post(path, headers=headers, content=b"q=a&source=de&target=en")
    assert answer.status_code == (403 if "origin" in headers else 400)
    assert list(answer.json()) == ["error"] and answer.json()["error"].startswith(message)


@pytest.mark.parametrize(
    "header",
    [
        (b"content-encoding", b"identity"),
        (b"content-type", b"application/json; charset=UTF-8"),
        (b"content-type", b"application/x-www-form-urlencoded"),
    ],
)
def test_an_uncompressed_utf8_body_passes(header):
    assert guard_answer([(b"host", b"127.0.0.1"), header]) is None


def exchange(url: str, request: bytes) -> tuple[int, dict]:
    """Send `request` as raw bytes; the status and JSON body of the answer (the server closes
    the connection after it: the request says HTTP/1.0 or Connection: close)."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(request)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)


def test_a_real_server_refuses_http_1_0_without_host_and_empty_hosts_and_keeps_serving():
    engine = FakeEngine()
    url, stop = start_in_thread(engine)
    try:
        refused = (
            b"GET /health HTTP/1.0\r\n\r\n",
            b'POST /v1/translate HTTP/1.0\r\nContent-Length: 13\r\n\r\n{"text": "a"}',
            b"GET /health HTTP/1.1\r\nHost:\r\nConnection: close\r\n\r\n",
            b"GET /health HTTP/1.1\r\nHost:  \t \r\nConnection: close\r\n\r\n",
            b"GET /health HTTP/1.0\r\nHost: 127.0.0.1:x\r\n\r\n",
        )
        for request in refused:
            status, body = exchange(url, request)
            assert status == 400 and body["error"]["field"] == "Host", request
        assert not engine.jobs
        served = b"GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n"
        assert exchange(url, served) == (200, {"status": "ok"})
    finally:
        stop(drain=False)
