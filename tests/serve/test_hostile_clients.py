"""Clients that would hold the server for others: a stream client that reads nothing, document
clients that leave or wait long, a request whose glossary takes long to match. Against the fake
engine, in process: at the ASGI level where a client must read slowly or leave at a chosen
moment. Timeouts here only guard against a hang; nothing depends on how long a step takes."""

from __future__ import annotations

import asyncio
import json
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("httpx")

from fastapi.testclient import TestClient  # noqa: E402

from tests.serve.fakes import LIMITS, FakeEngine, fake_translation  # noqa: E402
from transformer_mt.inference.requests import Texts  # noqa: E402
from transformer_mt.serve.contract import TextRefused  # noqa: E402
from transformer_mt.serve.http.app import create_app  # noqa: E402

BASE_URL = "http://127.0.0.1:8000"
HANG_GUARD = 20.0  # seconds; only reached when the server would hang
GLOSSARY = [{"source": "hund", "target": "dog"}]


class RawClient:
    """One POST of `body` to `path` at the ASGI level: the body arrives at once, then the
    client stays until `leave` is set. `sent` holds what the app sent it; `on_body`, when
    given, is awaited before each body message is taken (a client that reads slowly)."""

    def __init__(self, app, path: str, body: dict, on_body=None):
        self.app, self.path, self.on_body = app, path, on_body
        self.body = json.dumps(body).encode()
        self.leave = asyncio.Event()
        self.sent: list[dict] = []
        self._asked = False

    async def call(self) -> None:
        headers = [
            (b"host", b"127.0.0.1:8000"),
            (b"content-type", b"application/json"),
            (b"content-length", str(len(self.body)).encode()),
        ]
        scope = {
            "type": "http",
            "http_version": "1.1",
            "method": "POST",
            "scheme": "http",
            "path": self.path,
            "raw_path": self.path.encode(),
            "query_string": b"",
            "headers": headers,
            "client": ("127.0.0.1", 50000),
            "server": ("127.0.0.1", 8000),
        }
        await self.app(scope, self._receive, self._send)

    async def _receive(self) -> dict:
        if not self._asked:
            self._asked = True
            return {"type": "http.request", "body": self.body, "more_body": False}
        await self.leave.wait()
        return {"type": "http.disconnect"}

    async def _send(self, message: dict) -> None:
        if message["type"] == "http.response.body" and self.on_body is not None:
            await self.on_body()
        self.sent.append(message)

    def status(self) -> int:
        return self.sent[0]["status"]

    def events(self) -> list[tuple[str, dict]]:
        text = b"".join(m.get("body", b"") for m in self.sent[1:]).decode()
        found = []
        for block in text.strip().split("\n\n"):
            lines = dict(line.split(": ", 1) for line in block.split("\n"))
            found.append((lines["event"], json.loads(lines["data"])))
        return found


def test_a_stream_client_that_reads_nothing_is_held_a_bounded_number_of_events(engine):
    """It reads nothing until its job is done (800 token events later): then it is sent
    each text's latest text after those of a few steps, not every event, and the result."""
    texts = [" ".join(["a"] * 100)] * LIMITS.max_request_sentences  # 100 steps each

    async def until_translated() -> None:
        await asyncio.wrap_future(engine.jobs[-1].future)

    async def stream() -> RawClient:
        body = {"text": texts, "beam_size": 1}
        client = RawClient(create_app(engine), "/v1/translate/stream", body, until_translated)
        await asyncio.wait_for(client.call(), HANG_GUARD)
        return client

    events = asyncio.run(stream()).events()
    assert [name for name, _ in events[-2:]] == ["result", "done"]
    tokens = [data for name, data in events if name == "token"]
    assert len(tokens) <= 6 * LIMITS.max_request_sentences  # a few steps' events, not 800
    for index, text in enumerate(texts):
        growing = [t["text"] for t in tokens if t["index"] == index]
        assert [len(t) for t in growing] == sorted({len(t) for t in growing})
        assert growing[-1] == fake_translation(text)
    found = [t["text"] for t in events[-2][1]["translations"]]
    assert found == [fake_translation(text) for text in texts]


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/translate", {"text": ["<p>ein hund</p>", "<p>zwei <b>katzen</b></p>"]}),
        (
            "/translate",
            {"q": ["<p>ein hund</p>", "<p>zwei katzen</p>"], "source": "de", "target": "en"},
        ),
    ],
)
def test_a_document_client_that_leaves_has_its_engine_work_cancelled(path, body):
    engine = FakeEngine()  # not started: its jobs wait until cancelled

    async def leave_at_once() -> RawClient:
        client = RawClient(create_app(engine), path, {**body, "format": "html"})
        client.leave.set()
        try:
            await asyncio.wait_for(client.call(), HANG_GUARD)
        finally:
            engine.stop(drain=False)  # after a hang, frees a thread waiting for the jobs
        return client

    client = asyncio.run(leave_at_once())
    assert client.status() == 499
    assert len(engine.jobs) == 2 and engine.cancelled == 2
    assert all(job.future.cancelled() for job in engine.jobs)


def test_documents_waiting_for_the_engine_leave_worker_threads_to_other_requests():
    """More document requests than the default executor has threads wait for the engine at
    once; a worker thread (what /detect, `source: "auto"` and `report` wait for) is still to
    be had, and the documents' clients leaving cancels all their jobs."""
    engine = FakeEngine()  # not started: its jobs wait until cancelled
    n_documents = 40  # more than min(32, cpus + 4) threads
    submit = engine.submit

    async def documents_waiting() -> list[RawClient]:
        loop = asyncio.get_running_loop()
        all_queued = asyncio.Event()

        def counted(*args, **kwargs):
            job = submit(*args, **kwargs)
            if len(engine.jobs) == n_documents:
                loop.call_soon_threadsafe(all_queued.set)
            return job

        engine.submit = counted
        app = create_app(engine)
        body = {"text": "<p>ein hund</p>", "format": "html"}
        clients = [RawClient(app, "/v1/translate", body) for _ in range(n_documents)]
        calls = [asyncio.ensure_future(client.call()) for client in clients]
        try:
            await asyncio.wait_for(all_queued.wait(), HANG_GUARD)
            free = await asyncio.wait_for(asyncio.to_thread(lambda: "free"), HANG_GUARD)
            for client in clients:
                client.leave.set()
            await asyncio.wait_for(asyncio.gather(*calls), HANG_GUARD)
        finally:
            engine.stop(drain=False)  # after a hang, frees the threads waiting for jobs
        assert free == "free"
        return clients

    clients = asyncio.run(documents_waiting())
    assert [client.status() for client in clients] == [499] * n_documents
    assert engine.cancelled == n_documents


def test_a_request_with_a_glossary_is_submitted_off_the_event_loop_and_refused_as_before(engine):
    """While its glossary is matched (the fake's submit waits), /health is answered; a
    refusal of the engine's is the same 400 as on the event loop."""
    matching, release, matched = threading.Event(), threading.Event(), threading.Event()
    submit = engine.submit

    def slow_to_match(texts, decode, on_token=None, scope=None):
        if Texts.plain(texts).glossaries is not None:
            matching.set()
            release.wait(HANG_GUARD)
            matched.set()
        return submit(texts, decode, on_token, scope=scope)

    engine.submit = slow_to_match
    body = {"text": "ein hund", "glossary": GLOSSARY}
    with TestClient(create_app(engine), base_url=BASE_URL) as client:
        with ThreadPoolExecutor(1) as pool:
            translating = pool.submit(client.post, "/v1/translate", json=body)
            assert matching.wait(HANG_GUARD)
            assert client.get("/health").status_code == 200
            assert not matched.is_set()  # answered while the glossary was matched
            release.set()
            assert translating.result(HANG_GUARD).status_code == 200

        def refusing(texts, decode, on_token=None, scope=None):
            raise TextRefused(0, "glossary", "its terms cannot all be met")

        engine.submit = refusing
        response = client.post("/v1/translate", json=body)
    assert response.status_code == 400
    assert response.json()["error"]["field"] == "glossary"
