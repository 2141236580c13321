"""A real server on a loopback port (start_in_thread, and `serve` in a child process): many
concurrent clients, clients that leave early, and the draining shutdown."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from email.message import Message
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytest.importorskip("prometheus_client")

from tests.serve.fakes import FakeEngine, fake_translation  # noqa: E402
from transformer_mt.serve.server import listen, start_in_thread  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
STEP_SECONDS = 0.01
SLOW = "w " * 100  # 100 steps: a second in the engine
GOOD = {"text": ["ein kleiner hund", "zwei katzen"]}


def call(url: str, body: dict | None = None, timeout: float = 10.0) -> tuple[int, Message, dict]:
    """(status, headers, JSON body) of a GET, or of a POST of `body`."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data, {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.headers, json.load(response)
    except urllib.error.HTTPError as err:
        return err.code, err.headers, json.load(err)


def wait_for(condition, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


@pytest.fixture
def served():
    engine = FakeEngine(step_seconds=STEP_SECONDS)
    url, stop = start_in_thread(engine)
    yield engine, url, stop
    stop(drain=False)


def test_32_concurrent_clients_each_get_their_own_translations(served):
    engine, url, _ = served
    words = " ".join(f"w{k}" for k in range(10))  # 10 steps: 0.1 s in the engine
    bodies = [{"text": [f"{i} {words}", f"c {i}"]} for i in range(32)]
    with ThreadPoolExecutor(32) as pool:
        answers = list(pool.map(lambda body: call(f"{url}/v1/translate", body), bodies))
    for (status, _, answer), body in zip(answers, bodies, strict=True):
        assert status == 200
        texts = [t["text"] for t in answer["translations"]]
        assert texts == [fake_translation(text) for text in body["text"]]
    # Decoded together, not one by one (32 when the clients all connect within 0.1 s).
    assert engine.most_running >= 8


def open_request(url: str, path: str, body: dict) -> socket.socket:
    """A raw connection that has sent one POST, so that a test can drop it mid-answer."""
    host, port = url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=10)
    data = json.dumps(body).encode()
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(data)}\r\n\r\n"
    )
    sock.sendall(head.encode() + data)
    return sock


def test_a_client_that_leaves_mid_stream_has_its_job_cancelled(served, caplog):
    """And it is logged and counted as 499, the client's leaving; it had been a 200."""
    engine, url, _ = served
    with caplog.at_level(logging.INFO, logger="transformer_mt.serve"):
        sock = open_request(url, "/v1/translate/stream", {"text": SLOW, "beam_size": 1})
        received = b""
        while b"event: token" not in received:
            received += sock.recv(4096)
        sock.close()
        (job,) = engine.jobs
        wait_for(job.future.cancelled)
        wait_for(lambda: any("/v1/translate/stream 499 " in r.getMessage() for r in caplog.records))
    assert job.steps < len(SLOW.split()) and engine.cancelled == 1
    status, _, _ = call(f"{url}/v1/translate", GOOD)
    assert status == 200
    metrics = urllib.request.urlopen(f"{url}/metrics", timeout=10).read().decode()
    assert 'path="/v1/translate/stream",status="499"' in metrics
    assert 'path="/v1/translate/stream",status="200"' not in metrics


@pytest.mark.parametrize(
    "path", ["/health", "/v1/languages", "/languages", "/metrics", "/", "/docs"]
)
def test_head_answers_as_get_without_a_body(served, path):
    """Load balancers check a server with HEAD; every GET endpoint had answered it 405."""
    _, url, _ = served
    with urllib.request.urlopen(f"{url}{path}", timeout=10) as response:
        got = (response.status, response.headers.get_content_type())
    head = urllib.request.Request(f"{url}{path}", method="HEAD")
    with urllib.request.urlopen(head, timeout=10) as response:
        assert (response.status, response.headers.get_content_type()) == got
        assert response.read() == b""
    post_only = urllib.request.Request(f"{url}/v1/translate", method="HEAD")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(post_only, timeout=10)
    assert refused.value.code == 405


def test_a_client_that_leaves_before_its_result_has_its_job_cancelled(served, caplog):
    engine, url, _ = served
    with caplog.at_level(logging.INFO, logger="transformer_mt.serve"):
        sock = open_request(url, "/v1/translate", {"text": SLOW})
        wait_for(lambda: engine.jobs and engine.jobs[0].steps > 0)
        sock.close()
        (job,) = engine.jobs
        wait_for(job.future.cancelled)
        wait_for(lambda: any(" 499 " in r.getMessage() for r in caplog.records))
    assert job.steps < len(SLOW.split())


def test_drain_refuses_new_requests_and_finishes_the_ones_in_flight(served):
    engine, url, stop = served
    with ThreadPoolExecutor(2) as pool:
        slow = pool.submit(call, f"{url}/v1/translate", {"text": SLOW})
        wait_for(lambda: engine.stats().running_sentences == 1)
        stopping = pool.submit(stop)
        wait_for(lambda: call(f"{url}/health")[0] == 503)
        assert call(f"{url}/health")[2] == {"status": "shutting down"}
        status, headers, answer = call(f"{url}/v1/translate", GOOD)
        assert (status, answer["error"]["status"]) == (503, 503)
        assert int(headers["Retry-After"]) >= 1
        assert not slow.done()  # refused while the admitted request still runs
        status, _, answer = slow.result(timeout=10)
        assert status == 200
        assert answer["translations"][0]["text"] == fake_translation(SLOW)
        stopping.result(timeout=10)
    with pytest.raises(OSError):  # the server has gone
        call(f"{url}/health", timeout=1)


SERVE = """
import sys
from tests.serve.fakes import FakeEngine
from transformer_mt.serve.server import listen, serve
sock = listen("127.0.0.1", int(sys.argv[1]))
serve(FakeEngine(step_seconds=float(sys.argv[2])), sock, "127.0.0.1")
"""


def running_sentences(url: str) -> float:
    with urllib.request.urlopen(f"{url}/metrics", timeout=5) as response:
        for line in response.read().decode().splitlines():
            if line.startswith("tmt_running_sentences "):
                return float(line.split()[1])
    raise AssertionError("no tmt_running_sentences in /metrics")


def up(url: str) -> bool:
    try:
        return call(f"{url}/health", timeout=1)[0] == 200
    except OSError:
        return False


@contextlib.contextmanager
def served_in_a_process(tmp_path, step_seconds: float):
    """(url, process, log path) of `tmt serve`'s server of a fake engine taking `step_seconds`
    a step, started in a process of its own and killed after the block."""
    probe = listen("127.0.0.1", 0)
    port = probe.getsockname()[1]
    probe.close()
    url = f"http://127.0.0.1:{port}"
    log = tmp_path / "serve.log"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with open(log, "w") as stderr:
        child = subprocess.Popen(
            [sys.executable, "-c", SERVE, str(port), str(step_seconds)],
            cwd=ROOT,
            env=env,
            stderr=stderr,
        )
    try:
        wait_for(lambda: up(url) or child.poll() is not None, timeout=60)
        assert child.poll() is None, log.read_text()
        yield url, child, log
    finally:
        child.kill()
        child.wait()


def test_sigterm_drains_the_server_then_it_exits(tmp_path):
    with served_in_a_process(tmp_path, STEP_SECONDS) as (url, child, log):
        with ThreadPoolExecutor(1) as pool:
            slow = pool.submit(call, f"{url}/v1/translate", {"text": SLOW})
            wait_for(lambda: running_sentences(url) == 1)
            child.send_signal(signal.SIGTERM)
            wait_for(lambda: call(f"{url}/health")[0] == 503)
            assert call(f"{url}/v1/translate", GOOD)[0] == 503
            status, _, answer = slow.result(timeout=10)
        assert status == 200 and answer["translations"][0]["text"] == fake_translation(SLOW)
        assert child.wait(timeout=10) == -signal.SIGTERM  # uvicorn re-raises the signal
    text = log.read_text()
    assert "refusing new requests" in text and "POST /v1/translate 200" in text, text


def test_a_second_signal_stops_without_finishing_the_admitted_requests(tmp_path):
    """A second SIGTERM had been handed to uvicorn, which waited for every admitted request
    (100 steps of 2 s here) before it exited."""
    with served_in_a_process(tmp_path, 2.0) as (url, child, log), ThreadPoolExecutor(1) as pool:
        slow = pool.submit(call, f"{url}/v1/translate", {"text": SLOW}, 120)
        wait_for(lambda: running_sentences(url) == 1)
        child.send_signal(signal.SIGTERM)
        wait_for(lambda: call(f"{url}/health")[0] == 503)
        child.send_signal(signal.SIGTERM)
        assert child.wait(timeout=60) == -signal.SIGTERM
        try:
            status = slow.result(timeout=30)[0]
        except OSError:  # the connection closed without an answer
            status = None
        assert status != 200
    assert "stopping without finishing the admitted requests" in log.read_text()
