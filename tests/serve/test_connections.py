"""Careless and hostile clients against a real server on a loopback port (the fake engine,
short timeouts): idle and slow connections, connection caps, bodies that never end or are
too large, clients that leave mid-body, a dead engine, and the server's memory over 2,000
mixed requests."""

from __future__ import annotations

import json
import logging
import os
import select
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytest.importorskip("prometheus_client")

from tests.serve.fakes import DIE, FakeEngine  # noqa: E402
from tests.serve.test_server import SLOW, call, wait_for  # noqa: E402
from transformer_mt.serve.http.api import max_body_bytes  # noqa: E402
from transformer_mt.serve.http_settings import HttpSettings  # noqa: E402
from transformer_mt.serve.server import listen, start_in_thread  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
GOOD = {"text": ["ein kleiner hund"]}
QUICK = HttpSettings(
    header_timeout=0.4, body_timeout=0.4, keep_alive_timeout=1, max_client_connections=4
)


def serve_fake(settings: HttpSettings = QUICK, step_seconds: float = 0.002):
    engine = FakeEngine(step_seconds=step_seconds)
    url, stop = start_in_thread(engine, settings=settings)
    return engine, url, stop


@pytest.fixture
def served():
    engine, url, stop = serve_fake()
    yield engine, url
    stop(drain=False)


def connect(url: str, source: str | None = None) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    sock = socket.socket()
    if source is not None:
        sock.bind((source, 0))
    sock.settimeout(10)
    sock.connect((host, int(port)))
    return sock


def head(path: str, body_length: int | None = None, method: str = "POST") -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1", "Content-Type: application/json"]
    if body_length is not None:
        lines.append(f"Content-Length: {body_length}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def read_all(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection."""
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def read_response(sock: socket.socket, stream=None) -> bytes:
    """One response, whole: its head and Content-Length bytes of body. `stream`: the
    socket's buffered reader, to read several responses (one reader reads ahead)."""
    stream = stream if stream is not None else sock.makefile("rb")
    lines = []
    while (line := stream.readline()) not in (b"\r\n", b""):
        lines.append(line)
    assert lines, "closed without an answer"
    length = next(
        int(line.split(b":")[1]) for line in lines if line.lower().startswith(b"content-length:")
    )
    return b"".join(lines) + b"\r\n" + stream.read(length)


def status_and_body(response: bytes) -> tuple[int, dict]:
    top, _, body = response.partition(b"\r\n\r\n")
    return int(top.split()[1]), json.loads(body)


def closed(sock: socket.socket) -> bool:
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def test_an_idle_connection_is_closed_after_the_head_timeout(served):
    _, url = served
    sock = connect(url)
    started = time.monotonic()
    assert read_all(sock) == b""  # closed without an answer: it asked nothing
    assert 0.3 < time.monotonic() - started < 5


def test_a_head_sent_too_slowly_gets_408_and_the_connection_closes(served):
    _, url = served
    sock = connect(url)
    sock.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n")
    time.sleep(0.2)
    sock.sendall(b"X-Slow: 1\r\n")  # still sending, too slowly: the timeout runs from the start
    started = time.monotonic()
    status, body = status_and_body(read_all(sock))
    assert status == 408 and "head" in body["error"]["message"]
    assert time.monotonic() - started < 5


def test_a_kept_alive_connection_sending_a_slow_second_head_gets_408(served):
    _, url = served
    sock = connect(url)
    sock.sendall(head("/health", method="GET"))
    assert b"200 OK" in read_response(sock)
    sock.sendall(b"GET /health HTTP/1.1\r\n")  # the second request's head, never finished
    status, _ = status_and_body(read_all(sock))
    assert status == 408


def test_pipelined_requests_are_all_answered(served):
    _, url = served
    body = json.dumps(GOOD).encode()
    sock = connect(url)
    sock.sendall(head("/v1/translate", len(body)) + body + head("/health", method="GET"))
    stream = sock.makefile("rb")
    assert status_and_body(read_response(sock, stream))[0] == 200
    assert status_and_body(read_response(sock, stream)) == (200, {"status": "ok"})


@pytest.mark.parametrize("sent", [0, 10])
def test_a_body_shorter_than_its_content_length_gets_408(served, sent):
    _, url = served
    sock = connect(url)
    sock.sendall(head("/v1/translate", 100) + b"x" * sent)
    started = time.monotonic()
    status, body = status_and_body(read_response(sock))
    assert status == 408 and body["error"]["field"] == "body"
    assert time.monotonic() - started < 5
    assert read_all(sock) == b""  # then closed (after the keep-alive timeout at most)


def test_a_body_sent_byte_by_byte_is_cut_off_at_the_body_timeout(served):
    _, url = served
    body = json.dumps(GOOD).encode()
    sock = connect(url)
    sock.sendall(head("/v1/translate", len(body)))
    started = time.monotonic()
    for byte in body:
        if select.select([sock], [], [], 0.05)[0]:  # answered
            break
        sock.sendall(bytes([byte]))
    assert status_and_body(read_response(sock))[0] == 408
    assert time.monotonic() - started < 5


def test_a_declared_body_over_the_limit_is_refused_before_it_is_read(served):
    """413 with the limit, from the Content-Length: the server reads and drops what the
    client still sends, so that the client gets its answer, not a connection reset."""
    engine, url = served
    limit = max_body_bytes(engine.limits)
    size = 16 * 2**20
    sock = connect(url)
    sock.sendall(head("/v1/translate", size))
    chunk = b"x" * 2**20
    for _ in range(size // len(chunk)):
        sock.sendall(chunk)
    status, body = status_and_body(read_all(sock))
    assert status == 413 and body["error"]["field"] == "body"
    assert str(limit) in body["error"]["message"] and str(size) in body["error"]["message"]
    assert not engine.jobs
    assert call(f"{url}/v1/translate", GOOD)[0] == 200


def test_a_client_leaving_mid_body_is_a_499_without_a_traceback(served, caplog):
    engine, url = served
    with caplog.at_level(logging.INFO):
        sock = connect(url)
        sock.sendall(head("/v1/translate", 1000) + b'{"text": "ein')
        time.sleep(0.1)
        sock.close()
        wait_for(lambda: any(" 499 " in r.getMessage() for r in caplog.records))
    assert not any("Exception in ASGI application" in r.getMessage() for r in caplog.records)
    assert not any(r.exc_info for r in caplog.records)
    assert not engine.jobs and call(f"{url}/v1/translate", GOOD)[0] == 200


def test_idle_connections_from_one_address_make_room_for_a_new_request(served):
    """At the per-address cap (4) a new connection closes the oldest idle one."""
    _, url = served
    idle = [connect(url) for _ in range(10)]
    assert call(f"{url}/v1/translate", GOOD)[0] == 200
    assert sum(closed(sock) for sock in idle[:-3]) == 7  # the newest 3 may still be open
    for sock in idle:
        sock.close()


def test_beyond_the_per_address_cap_of_busy_connections_a_client_gets_429(served):
    engine, url = served
    engine.step_seconds = 0.01  # SLOW: 1 s in the engine
    with ThreadPoolExecutor(4) as pool:
        busy = [pool.submit(call, f"{url}/v1/translate", {"text": SLOW}) for _ in range(4)]
        wait_for(lambda: engine.stats().running_sentences == 4)
        status, headers, body = call(f"{url}/v1/translate", GOOD)
        assert status == 429 and "from this address" in body["error"]["message"]
        assert int(headers["Retry-After"]) >= 1
        assert all(future.result(timeout=10)[0] == 200 for future in busy)
    assert call(f"{url}/v1/translate", GOOD)[0] == 200


def test_the_total_cap_counts_every_address():
    settings = HttpSettings(max_connections=3, max_client_connections=3, header_timeout=5)
    engine, url, stop = serve_fake(settings, step_seconds=0.01)
    try:
        with ThreadPoolExecutor(3) as pool:
            busy = [pool.submit(call, f"{url}/v1/translate", {"text": SLOW}) for _ in range(3)]
            wait_for(lambda: engine.stats().running_sentences == 3)
            other = connect(url, source="127.0.0.2")  # another address, same server
            other.sendall(head("/health", method="GET"))
            status, body = status_and_body(read_all(other))
            assert status == 503 and "3 open" in body["error"]["message"]
            assert all(future.result(timeout=10)[0] == 200 for future in busy)
    finally:
        stop(drain=False)


@pytest.mark.parametrize("end", [b"", b"\r\n\r\n"], ids=["arriving", "whole"])
def test_a_head_over_the_size_limit_gets_431(served, end):
    _, url = served
    sock = connect(url)
    sock.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"a" * 100_000 + end)
    status, body = status_and_body(read_response(sock))
    assert status == 431 and str(16 * 1024) in body["error"]["message"]


def test_the_server_stops_by_itself_when_the_engine_dies(caplog):
    engine, url, stop = serve_fake()
    with caplog.at_level(logging.INFO):
        assert call(f"{url}/v1/translate", {"text": DIE})[0] == 503
        wait_for(lambda: not _answers(url))
    assert any("decoding engine stopped" in r.getMessage() for r in caplog.records)
    stop(drain=False)


def _answers(url: str) -> bool:
    try:
        call(f"{url}/health", timeout=1)
    except OSError:
        return False
    return True


SERVE = """
import sys
from tests.serve.fakes import FakeEngine
from transformer_mt.serve.server import listen, serve
serve(FakeEngine(), listen("127.0.0.1", int(sys.argv[1])), "127.0.0.1")
"""


def test_a_server_whose_engine_died_exits_non_zero(tmp_path):
    probe = listen("127.0.0.1", 0)
    port = probe.getsockname()[1]
    probe.close()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    child = subprocess.Popen(
        [sys.executable, "-c", SERVE, str(port)],
        cwd=ROOT,
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(lambda: _answers(url) or child.poll() is not None, timeout=60)
        assert call(f"{url}/v1/translate", {"text": DIE})[0] == 503
        assert child.wait(timeout=20) == 1  # a machine failure: a supervisor restarts it
    finally:
        child.kill()
        child.wait()
    assert "EngineStopped: the decoding engine stopped" in child.stderr.read()


def rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def post_raw(url: str, body: bytes, host: str = "127.0.0.1") -> int:
    """The status of a POST of `body` as given (0: no answer, the connection was reset)."""
    sock = connect(url)
    try:
        sock.sendall(head("/v1/translate", len(body)).replace(b"127.0.0.1", host.encode()) + body)
        return int(read_all_or_first(sock).split()[1])
    except (OSError, IndexError):
        return 0
    finally:
        sock.close()


def read_all_or_first(sock: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data and (chunk := sock.recv(65536)):
        data += chunk
    return data


def mixed_request(url: str, i: int) -> int:
    """One of 2,000 requests: good ones (some repeated, answered from the caches) and bad
    ones of every kind."""
    words = ["ein", "hund", "zwei", "katzen", "spielen", "im", "schnee", "mann", "liest"]
    text = " ".join(words[(i * 7 + k) % len(words)] for k in range(1 + i % 6))
    kind = i % 10
    if kind == 0:
        return post_raw(url, b'{"text": "a",')  # not JSON
    if kind == 1:
        return post_raw(url, json.dumps({"text": text, "beam_sise": 2}).encode())
    if kind == 2:
        return post_raw(url, json.dumps({"text": [text] * 300}).encode())  # too many texts
    if kind == 3:
        return post_raw(url, json.dumps({"text": text, "length_penalty": 1e308}).encode())
    if kind == 4:
        return post_raw(url, json.dumps({"text": text}).encode(), host="evil.example")
    if kind == 5:  # gone mid-body
        sock = connect(url)
        sock.sendall(head("/v1/translate", 500) + b'{"text": "')
        sock.close()
        return 499
    beam = 1 + i % 3
    return post_raw(
        url, json.dumps({"text": [text, f"{text} {i % 50}"], "beam_size": beam}).encode()
    )


@pytest.mark.slow  # 16 s on two idle cores (800 beam searches), minutes when they are busy
@pytest.mark.skipif(not Path("/proc/self/statm").exists(), reason="reads /proc/self/statm")
def test_memory_holds_over_2000_mixed_good_and_bad_requests(checkpoint):
    from transformer_mt.serve.engine import Engine, ServeLimits

    limits = ServeLimits(kv_blocks=2000, cache_entries=64)
    engine = Engine.from_checkpoint(str(checkpoint), limits=limits)
    url, stop = start_in_thread(engine, settings=HttpSettings(keep_alive_timeout=1))
    try:
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda i: mixed_request(url, i), range(400)))  # warm: caches full
            before = rss_bytes()
            statuses = list(pool.map(lambda i: mixed_request(url, i), range(2000)))
        wait_for(lambda: engine.stats().running_sentences == 0, timeout=30)
        after = rss_bytes()
    finally:
        stop(drain=False)
    assert statuses.count(200) == 800 and {400, 413, 499} <= set(statuses)
    assert abs(after - before) <= 0.05 * before, (before, after)
