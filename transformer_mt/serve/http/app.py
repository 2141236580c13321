"""The FastAPI application of `tmt serve`: translate, stream, languages, health, metrics, the
web page, and LibreTranslate's endpoints (libretranslate_routes.py).

`create_app(engine)` wires the endpoints to one engine. Request bodies are parsed by api.py,
then jobs.py counts them against the keys and limits (quotas.py), identifies their texts'
languages with `source: "auto"` and submits them to the engine, and waits for the result
without blocking the event loop, so that one process serves many concurrent clients while the
engine's thread decodes. A client that disconnects before its result has its job cancelled,
freeing the engine's work; a stream holds a bounded backlog of token events for a client
that reads slowly or not at all (`TokenEvents`). Every request gets one log line and its
metrics from `RequestLog`, and every refusal the JSON body of `ApiError.body()`. Before a
request reaches an endpoint, guard.py checks its Host, Origin and headers; a body is refused
from its Content-Length when too large, and must arrive within `HttpSettings.body_timeout`.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import importlib.resources
import json
import logging
import math
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from fastapi_offline import FastAPIOffline
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.exceptions import HTTPException
from starlette.middleware.cors import CORSMiddleware
from starlette.types import ASGIApp, Receive, Scope, Send

from transformer_mt import __version__
from transformer_mt.config import DecodeConfig
from transformer_mt.documents.units import DocumentError
from transformer_mt.errors import printable
from transformer_mt.serve.contract import Engine, Job
from transformer_mt.serve.http import jobs, libretranslate_routes, schema
from transformer_mt.serve.http.answers import documents_json, languages_json, translations_json
from transformer_mt.serve.http.api import TEXT, TranslateRequest, parse_request
from transformer_mt.serve.http.body import ApiError
from transformer_mt.serve.http.detection import SourceDetector
from transformer_mt.serve.http.guard import HostRule, RequestGuard
from transformer_mt.serve.http.head import HeadAsGet
from transformer_mt.serve.http.metrics import Metrics
from transformer_mt.serve.http.quotas import Quotas
from transformer_mt.serve.http_settings import HttpSettings

if TYPE_CHECKING:  # torch would come with it; a Translation is only read here
    from transformer_mt.inference.checked import CheckedLine
    from transformer_mt.inference.translator import Translation

logger = logging.getLogger("transformer_mt.serve")

# The token events a stream holds for its client, in steps of the engine decoding the most
# texts one request may hold (`TokenEvents`): a prompt reader is never that far behind.
_BACKLOG_STEPS = 4
# Where static/index.html holds its beam size field's starting value (`page_html`); a page
# shown without the server (the mark left in) starts with an empty field, the server's default.
BEAM_SIZE_MARK = "{{beam_size}}"

_TRANSLATE_DOCS = {
    "openapi_extra": {
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {"schema": schema.request_schema(schema.TranslateBody)}
            },
        }
    },
    "responses": {
        status: {"model": schema.ErrorBody, "description": description}
        for status, description in (
            (400, "A malformed body or value, or a language the model lacks; `field` names it"),
            (403, "No API key, or one the server does not know, where keys are required"),
            (408, "The body did not arrive in time"),
            (413, "Too many texts, a text too long, a body too large, or over a minute's limit"),
            (429, "The queue is full, or over a limit; retry after Retry-After seconds"),
            (501, "source auto without lingua, or markdown without markdown-it-py installed"),
            (503, "The server is shutting down; Retry-After says when to retry"),
        )
    },
}


def create_app(
    engine: Engine, settings: HttpSettings | None = None, listen_host: str = "127.0.0.1"
) -> FastAPI:
    """The application serving `engine` (started and stopped by the caller, see serve/server.py),
    for a server listening on `listen_host` (the Host names it answers derive from it);
    `settings` None: the defaults of `HttpSettings`."""
    settings = settings if settings is not None else HttpSettings()
    app = _fastapi(
        title="transformer_mt",
        version=__version__,
        summary="Neural machine translation over HTTP (tmt serve)",
        # Starlette would answer /metrics/ with a redirect built from the client's Host.
        redirect_slashes=False,
    )
    app.state.engine = engine
    app.state.body_timeout = settings.body_timeout
    app.state.limits = engine.limits
    app.state.quotas = Quotas(settings)
    app.state.draining = False
    app.state.metrics = Metrics(engine)
    app.state.sources = SourceDetector(engine.languages)
    app.state.page = page_html(engine.defaults)
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
    libretranslate_routes.add_routes(app)
    app.add_exception_handler(ApiError, _error_response)
    app.add_exception_handler(HTTPException, _http_error_response)
    app.add_exception_handler(Exception, _internal_error_response)
    paths = frozenset(route.path for route in app.routes)
    # The last added runs first: log every request, then refuse foreign hosts and origins,
    # then answer HEAD as GET, then answer CORS preflights and mark answers for the allowed
    # origins.
    if settings.cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=list(settings.cors_origins),
            allow_methods=["GET", "POST"],
            allow_headers=["Content-Type", "Authorization"],
        )
    app.add_middleware(HeadAsGet)
    hosts = HostRule.for_listener(listen_host, settings.allowed_hosts)
    app.add_middleware(RequestGuard, hosts=hosts, settings=settings)
    app.add_middleware(RequestLog, metrics=app.state.metrics, paths=paths)
    return app


def _fastapi(**fields: object) -> FastAPI:
    """The application object; `fields` are FastAPI's. Its API page, /docs, loads its script,
    style and icon from this server (fastapi-offline's packaged copies under
    /static-offline-docs), not from a CDN: FastAPI's own page is blank without the internet.
    There is no /redoc: ReDoc always loads its maker's logo from the internet."""
    # The online validator badge would send the schema's address to validator.swagger.io.
    return FastAPIOffline(redoc_url=None, swagger_ui_parameters={"validatorUrl": None}, **fields)


def page_html(defaults: DecodeConfig) -> str:
    """The web page, its beam size field set to the checkpoint's (`defaults`), so that the
    page translates as the CLI and the API do unless its user changes it."""
    page = importlib.resources.files("transformer_mt.serve") / "static" / "index.html"
    html = page.read_text(encoding="utf-8")
    return html.replace(BEAM_SIZE_MARK, str(defaults.beam_size))


def drain(app: FastAPI) -> None:
    """Refuse new requests (503, and /health 503) and return once the engine has finished
    the work it admitted. Blocks: call it off the event loop."""
    app.state.draining = True
    app.state.engine.stop(drain=True)


async def translate(request: Request) -> JSONResponse:
    """Translate one text or a list of texts; the result lists one translation per text."""
    started = time.perf_counter()
    parsed = await _parse(request)
    if parsed.format != TEXT:
        return JSONResponse(await _documents_json(request, parsed, started))
    parsed, job = await jobs.start(request, parsed, jobs.request_key(request))
    translations = await jobs.finished(request, parsed, job)
    checks = None
    if parsed.report:
        checks = await jobs.checked(request.app.state.engine, parsed, job)
    return JSONResponse(_result_json(parsed, job, translations, started, checks))


async def translate_stream(request: Request) -> StreamingResponse:
    """As /v1/translate, as server-sent events: with beam size 1 `token` events ({"index",
    "text"}: the text so far) as the tokens are decided (to a client that falls behind, each
    text's latest: `TokenEvents`), then `result` (the /v1/translate body) or `error` (an
    error body), then `done`. Documents have no token events: their `result` comes once they
    are translated (a refusal before that: an error response)."""
    started = time.perf_counter()
    loop = asyncio.get_running_loop()
    engine: Engine = request.app.state.engine
    events = TokenEvents(_BACKLOG_STEPS * engine.limits.max_request_sentences)
    headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    parsed = await _parse(request)
    if parsed.format != TEXT:
        result = await _documents_json(request, parsed, started)
        body = iter([_event("result", result), _event("done", {})])
        return StreamingResponse(body, media_type="text/event-stream", headers=headers)

    def on_token(index: int, text: str) -> None:
        jobs.call_in_loop(loop, events.put, index, text)

    parsed, job = await jobs.start(request, parsed, jobs.request_key(request), on_token)
    jobs.when_done(job.future, events.finish)
    return StreamingResponse(
        _events(request, parsed, job, events, started),
        media_type="text/event-stream",
        headers=headers,
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


async def _parse(request: Request) -> TranslateRequest:
    """Read and parse the body (jobs.py, api.py): the request, or an `ApiError`."""
    engine: Engine = request.app.state.engine
    body = await jobs.request_body(request)
    return parse_request(body, engine.defaults, request.app.state.limits, engine.languages)


async def _documents_json(request: Request, parsed: TranslateRequest, started: float) -> dict:
    """The response body of a request for documents (`format` html or markdown), translated
    through markup.py as LibreTranslate's html is (jobs.py)."""
    try:
        parsed, documents = await jobs.translate_documents(
            request, parsed, jobs.request_key(request)
        )
    except DocumentError as err:
        where = "text" if len(parsed.texts) == 1 else f"text[{err.document}]"
        raise ApiError(400, "text", f"{where}: not {parsed.format} that parses ({err})") from None
    return {
        "translations": documents_json(documents, parsed.detected),
        "timing": {"total_ms": round(1000 * (time.perf_counter() - started), 3)},
    }


async def _events(
    request: Request, parsed: TranslateRequest, job: Job, events: TokenEvents, started: float
) -> AsyncIterator[str]:
    # Starlette cancels this generator when the client disconnects: `finally` frees the job,
    # and the request is logged and counted as the client's leaving (`RequestLog`).
    ended = False
    try:
        while (token := await events.next()) is not None:
            yield _event("token", {"index": token.index, "text": token.text})
        try:
            translations = jobs.outcome(parsed, job)
            engine = request.app.state.engine
            checks = await jobs.checked(engine, parsed, job) if parsed.report else None
            yield _event("result", _result_json(parsed, job, translations, started, checks))
        except ApiError as err:
            yield _event("error", err.body())
        yield _event("done", {})
        ended = True
    finally:
        if not job.future.done():
            job.cancel()
        if not ended:
            request.state.status = jobs.CLIENT_GONE


@dataclasses.dataclass(slots=True)
class _Token:
    """A token event: text `index` of the request translated so far, `text`."""

    index: int
    text: str


class TokenEvents:
    """The token events of one stream that its client has not been sent yet, bounded whatever
    the client does. Used on the event loop only (the engine's thread reaches it through
    `jobs.call_in_loop`, as the job's end does).

    The engine decides tokens whether or not the client reads them, and each event holds its
    text so far: kept one by one for a client that does not read, they would grow with the
    square of the translations' length. Up to `backlog` events wait in the order they came;
    beyond that a text's new event takes the place of its latest waiting one, which it
    supersedes, so at most `backlog` and one per text wait. A client that reads as fast as
    the engine decodes is sent every event; one that falls behind, each text's latest.
    """

    def __init__(self, backlog: int):
        self._backlog = backlog
        self._waiting: collections.deque[_Token] = collections.deque()
        self._latest: dict[int, _Token] = {}  # each text's last waiting event
        self._changed = asyncio.Event()
        self._finished = False

    def put(self, index: int, text: str) -> None:
        """Text `index` translated so far is `text`."""
        latest = self._latest.get(index)
        if latest is not None and len(self._waiting) >= self._backlog:
            latest.text = text
        else:
            self._latest[index] = _Token(index, text)
            self._waiting.append(self._latest[index])
        self._changed.set()

    def finish(self) -> None:
        """The job is done: no event comes after those put."""
        self._finished = True
        self._changed.set()

    async def next(self) -> _Token | None:
        """The oldest waiting event, once there is one; None once the job is done and every
        event has been taken."""
        while not self._waiting:
            if self._finished:
                return None
            self._changed.clear()
            await self._changed.wait()
        token = self._waiting.popleft()
        if self._latest.get(token.index) is token:
            del self._latest[token.index]
        return token


def _result_json(
    parsed: TranslateRequest,
    job: Job,
    translations: list[Translation],
    started: float,
    checks: list[CheckedLine] | None = None,
) -> dict:
    """The response body of a finished job; with `checks` (report), each text's sentences'
    reports come with its translation."""
    timing = {"total_ms": round(1000 * (time.perf_counter() - started), 3)}
    if job.queue_seconds is not None:
        timing["queue_ms"] = round(1000 * job.queue_seconds, 3)
    found = translations_json(translations, parsed.decode.n_best, parsed.detected, checks)
    return {"translations": found, "timing": timing}


def _event(name: str, data: dict) -> str:
    return f"event: {name}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n"


async def _error_response(request: Request, err: ApiError) -> JSONResponse:
    headers = None
    if err.retry_after is not None:
        headers = {"Retry-After": str(max(1, math.ceil(err.retry_after)))}
    return JSONResponse(err.body(), status_code=err.status, headers=headers)


async def _http_error_response(request: Request, err: HTTPException) -> JSONResponse:
    """Starlette's own refusals (404, 405) in the same error body."""
    body = ApiError(err.status_code, None, str(err.detail)).body()
    return JSONResponse(body, status_code=err.status_code, headers=err.headers)


async def _internal_error_response(request: Request, err: Exception) -> JSONResponse:
    """A fault of the server's own (a bug: every refusal is an `ApiError`) in the same error
    body, not Starlette's plain text; Starlette logs its traceback after this answer."""
    body = ApiError(500, None, f"internal error ({type(err).__name__}); the log has more").body()
    return JSONResponse(body, status_code=500)


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
            status = state.get("status", status)  # a stream its client left: CLIENT_GONE
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
