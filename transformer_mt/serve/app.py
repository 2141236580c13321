"""The FastAPI application of `tmt serve`: translate, stream, languages, health, metrics, the
web page.

`create_app(engine)` wires the endpoints to one engine. Requests are parsed by api.py (with
`source: "auto"`, each text's language identified by detection.py in a worker thread) and
submitted to the engine (`submit` only queues); the event loop then waits for the job's
future without blocking, so that one process serves many concurrent clients while
the engine's thread decodes. A client that disconnects before its result has its job
cancelled, freeing the engine's work. Every request gets one log line and its metrics from
`RequestLog`, and every refusal the JSON body of `ApiError.body()`. Before a request reaches
an endpoint, guard.py checks its Host, Origin and headers; a body is refused from its
Content-Length when too large, and must arrive within `HttpSettings.body_timeout`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import importlib.resources
import json
import logging
import math
import time
from collections.abc import AsyncIterator, Callable

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.exceptions import HTTPException
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Receive, Scope, Send

from transformer_mt import __version__
from transformer_mt.serve import schema
from transformer_mt.serve.api import (
    AUTO,
    ApiError,
    TranslateRequest,
    engine_error,
    languages_json,
    max_body_bytes,
    parse_request,
    printable,
    translations_json,
)
from transformer_mt.serve.contract import Engine, Job, ShuttingDown
from transformer_mt.serve.detection import SourceDetector
from transformer_mt.serve.guard import HostRule, RequestGuard
from transformer_mt.serve.http_settings import HttpSettings
from transformer_mt.serve.metrics import Metrics

logger = logging.getLogger("transformer_mt.serve")

# nginx's "client closed request": logged and counted for a client that left before its
# result; the client never sees it.
CLIENT_GONE = 499
# Queued after a job's last token event: the job has finished (or failed, or was cancelled).
_FINISHED = object()

_TRANSLATE_DOCS = {
    "openapi_extra": {
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": schema.TranslateBody.model_json_schema()}},
        }
    },
    "responses": {
        status: {"model": schema.ErrorBody, "description": description}
        for status, description in (
            (400, "A malformed body or value, or a language the model lacks; `field` names it"),
            (408, "The body did not arrive in time"),
            (413, "Too many texts, a text too long, or a body too large"),
            (429, "The queue is full; retry after the Retry-After header's seconds"),
            (501, "source auto, and no language identifier installed (the langid extra)"),
            (503, "The server is shutting down; Retry-After says when to retry"),
        )
    },
}


def create_app(
    engine: Engine, settings: HttpSettings | None = None, listen_host: str = "127.0.0.1"
) -> FastAPI:
    """The application serving `engine` (started and stopped by the caller, see server.py),
    for a server listening on `listen_host` (the Host names it answers derive from it);
    `settings` None: the defaults of `HttpSettings`."""
    settings = settings if settings is not None else HttpSettings()
    app = FastAPI(
        title="transformer_mt",
        version=__version__,
        summary="Neural machine translation over HTTP (tmt serve)",
        # Starlette would answer /metrics/ with a redirect built from the client's Host.
        redirect_slashes=False,
    )
    app.state.engine = engine
    app.state.body_timeout = settings.body_timeout
    app.state.draining = False
    app.state.metrics = Metrics(engine)
    app.state.sources = SourceDetector(engine.languages)
    page = importlib.resources.files("transformer_mt.serve") / "static" / "index.html"
    app.state.page = page.read_text(encoding="utf-8")
    app.add_api_route(
        "/v1/translate",
        translate,
        methods=["POST"],
        response_model=schema.TranslateResponse,
        **_TRANSLATE_DOCS,
    )
    stream_docs = {
        200: {"content": {"text/event-stream": {}}, "description": "token, result, done"}
    }
    app.add_api_route(
        "/v1/translate/stream",
        translate_stream,
        methods=["POST"],
        openapi_extra=_TRANSLATE_DOCS["openapi_extra"],
        responses={**_TRANSLATE_DOCS["responses"], **stream_docs},
    )
    app.add_api_route(
        "/v1/languages", languages, methods=["GET"], response_model=schema.LanguagesResponse
    )
    app.add_api_route("/health", health, methods=["GET"], responses={503: {"model": schema.Health}})
    app.add_api_route("/metrics", metrics, methods=["GET"], response_class=Response)
    app.add_api_route("/", index, methods=["GET"], response_class=HTMLResponse)
    app.add_exception_handler(ApiError, _error_response)
    app.add_exception_handler(HTTPException, _http_error_response)
    paths = frozenset(route.path for route in app.routes)
    # The last added runs first: log every request, then refuse foreign hosts and origins,
    # then answer CORS preflights and mark answers for the allowed origins.
    if settings.cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=list(settings.cors_origins),
            allow_methods=["GET", "POST"],
            allow_headers=["Content-Type"],
        )
    hosts = HostRule.for_listener(listen_host, settings.allowed_hosts)
    app.add_middleware(RequestGuard, hosts=hosts, settings=settings)
    app.add_middleware(RequestLog, metrics=app.state.metrics, paths=paths)
    return app


def drain(app: FastAPI) -> None:
    """Refuse new requests (503, and /health 503) and return once the engine has finished
    the work it admitted. Blocks: call it off the event loop."""
    app.state.draining = True
    app.state.engine.stop(drain=True)


async def translate(request: Request) -> JSONResponse:
    """Translate one text or a list of texts; the result lists one translation per text."""
    started = time.perf_counter()
    parsed, job = await _submit(request)
    finished = asyncio.Event()
    _when_done(job.future, finished.set)
    gone = asyncio.ensure_future(_disconnect(request))
    waiting = asyncio.ensure_future(finished.wait())
    try:
        done, _ = await asyncio.wait((waiting, gone), return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
        waiting.cancel()
        if not job.future.done():
            job.cancel()  # the client left, or the server is cancelling this request
    if waiting not in done:
        raise ApiError(CLIENT_GONE, None, "the client disconnected before the result")
    return JSONResponse(_result_json(parsed, job, started))


async def translate_stream(request: Request) -> StreamingResponse:
    """As /v1/translate, as server-sent events: with beam size 1 `token` events ({"index",
    "text"}: the text so far) as the tokens are decided, then `result` (the /v1/translate
    body) or `error` (an error body), then `done`."""
    started = time.perf_counter()
    loop = asyncio.get_running_loop()
    events: asyncio.Queue = asyncio.Queue()

    def on_token(index: int, text: str) -> None:
        _call_in_loop(loop, events.put_nowait, (index, text))

    parsed, job = await _submit(request, on_token)
    _when_done(job.future, lambda: events.put_nowait(_FINISHED))
    headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    return StreamingResponse(
        _events(parsed, job, events, started), media_type="text/event-stream", headers=headers
    )


async def languages(request: Request) -> JSONResponse:
    """The directions the model translates: the default one, those it was trained on, those
    it may try zero-shot, and whether `source: "auto"` can identify a text's language."""
    return JSONResponse(languages_json(request.app.state.engine.languages))


async def health(request: Request) -> JSONResponse:
    """{"status": "ok"}; 503 {"status": "shutting down"} while the server drains, 503
    {"status": "engine stopped"} once the decoding engine has died (the server then exits)."""
    if request.app.state.engine.failure is not None:
        return JSONResponse({"status": "engine stopped"}, status_code=503)
    if request.app.state.draining:
        return JSONResponse({"status": "shutting down"}, status_code=503)
    return JSONResponse({"status": "ok"})


async def metrics(request: Request) -> Response:
    """The engine's and the app's metrics in the Prometheus text format."""
    return Response(request.app.state.metrics.render(), media_type=CONTENT_TYPE_LATEST)


async def index(request: Request) -> HTMLResponse:
    """A page to try translations, with a live view of the metrics."""
    return HTMLResponse(request.app.state.page)


async def _submit(
    request: Request, on_token: Callable[[int, str], None] | None = None
) -> tuple[TranslateRequest, Job]:
    """Parse the body, identify its texts' languages if asked, and queue its texts: the job,
    or an `ApiError`."""
    engine: Engine = request.app.state.engine
    if request.app.state.draining:
        raise engine_error(ShuttingDown("the server is shutting down"), [])
    body = await _read_body(request, max_body_bytes(engine.limits), request.app.state.body_timeout)
    parsed = parse_request(body, engine.defaults, engine.limits, engine.languages)
    request.state.sentences = len(parsed.texts)
    if parsed.source == AUTO:  # lingua may load its models first: off the event loop
        detect = request.app.state.sources.detect
        detected = await asyncio.to_thread(detect, parsed.texts, parsed.target)
        parsed = dataclasses.replace(parsed, detected=detected)
    try:
        # On the event loop, not in a worker thread: submitting only tokenizes and queues, and
        # while the decoding thread holds the GIL each hand-over between threads costs up to a
        # switch interval, which a request would pay twice more.
        job = engine.submit(
            parsed.texts, parsed.decode, parsed.prefixes, on_token, parsed.directions()
        )
    except Exception as err:  # every refusal, and an engine fault (500), as one error body
        raise _failure(err, parsed) from None
    return parsed, job


async def _read_body(request: Request, limit: int, timeout: float) -> bytes:
    """The body: refused (413) from its Content-Length, or as soon as it outgrows `limit`
    bytes; 408 unless it has all arrived `timeout` seconds after the request's head."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise ApiError(413, "body", f"body: {int(declared)} bytes; at most {limit}")

    async def read() -> bytes:
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise ApiError(413, "body", f"body: more than {limit} bytes; at most {limit}")
            chunks.append(chunk)
        return b"".join(chunks)

    try:
        return await asyncio.wait_for(read(), timeout)
    except asyncio.TimeoutError:
        raise ApiError(408, "body", f"body: not complete within {timeout:g} s") from None
    except ClientDisconnect:
        raise ApiError(
            CLIENT_GONE, None, "the client disconnected while sending its body"
        ) from None


async def _disconnect(request: Request) -> None:
    """Return when the client disconnects (the body has been read: nothing else comes)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def _events(
    parsed: TranslateRequest, job: Job, events: asyncio.Queue, started: float
) -> AsyncIterator[str]:
    # Starlette cancels this generator when the client disconnects: `finally` frees the job.
    try:
        while (item := await events.get()) is not _FINISHED:
            index, text = item
            yield _event("token", {"index": index, "text": text})
        try:
            yield _event("result", _result_json(parsed, job, started))
        except ApiError as err:
            yield _event("error", err.body())
        yield _event("done", {})
    finally:
        if not job.future.done():
            job.cancel()


def _result_json(parsed: TranslateRequest, job: Job, started: float) -> dict:
    """The response body of a finished job, or its `ApiError`."""
    future = job.future
    if future.cancelled():
        raise engine_error(ShuttingDown("the translation was cancelled by the engine"), [])
    if future.exception() is not None:
        raise _failure(future.exception(), parsed)
    timing = {"total_ms": round(1000 * (time.perf_counter() - started), 3)}
    if job.queue_seconds is not None:
        timing["queue_ms"] = round(1000 * job.queue_seconds, 3)
    return {
        "translations": translations_json(future.result(), parsed.decode.n_best, parsed.detected),
        "timing": timing,
    }


def _failure(err: BaseException, parsed: TranslateRequest) -> ApiError:
    """`err` as a refusal; an engine fault (500) is logged with its traceback."""
    failure = engine_error(err, list(parsed.decode_keys))
    if failure.status == 500:
        logger.error("engine failure: %s", printable(failure.message), exc_info=err)
    return failure


def _event(name: str, data: dict) -> str:
    return f"event: {name}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n"


def _when_done(future: concurrent.futures.Future, callback: Callable[[], None]) -> None:
    """Run `callback` on the event loop once `future` is done (it resolves in the engine's
    thread)."""
    loop = asyncio.get_running_loop()
    future.add_done_callback(lambda _: _call_in_loop(loop, callback))


def _call_in_loop(loop: asyncio.AbstractEventLoop, callback: Callable, *args: object) -> None:
    # RuntimeError: the loop has closed (server stopped), so nobody is waiting any more.
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(callback, *args)


async def _error_response(request: Request, err: ApiError) -> JSONResponse:
    headers = None
    if err.retry_after is not None:
        headers = {"Retry-After": str(max(1, math.ceil(err.retry_after)))}
    return JSONResponse(err.body(), status_code=err.status, headers=headers)


async def _http_error_response(request: Request, err: HTTPException) -> JSONResponse:
    """Starlette's own refusals (404, 405) in the same error body."""
    body = ApiError(err.status_code, None, str(err.detail)).body()
    return JSONResponse(body, status_code=err.status_code, headers=err.headers)


class RequestLog:
    """One log line (method, path, status, milliseconds, sentences) and the metrics of every
    HTTP request, measured from its arrival to its last response byte (a stream's last event).

    A plain ASGI middleware, as it must see streamed responses end and must not buffer them.
    """

    def __init__(self, app: ASGIApp, metrics: Metrics, paths: frozenset[str]):
        self.app, self.metrics, self.paths = app, metrics, paths

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        state = scope.setdefault("state", {})
        status = 500  # unless a response starts: an exception escaped the app

        async def send_and_note(message: dict) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_and_note)
        finally:
            seconds = time.perf_counter() - started
            path = scope["path"] if scope["path"] in self.paths else "other"
            self.metrics.observe(path, status, seconds)
            # The path is the client's, percent-decoded: escaped, it cannot start a line.
            logger.info(
                "%s %s %d %.1f ms %d sentences",
                printable(scope["method"]),
                printable(scope["path"]),
                status,
                1000 * seconds,
                state.get("sentences", 0),
            )
