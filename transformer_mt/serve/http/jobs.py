"""From a request's bytes to its translations: the steps every translation endpoint shares,
whichever API parsed the body (api.py for /v1, libretranslate.py for LibreTranslate's).

`request_body` reads the body within its limits (refused while the server drains); `start`
counts the request against its key and limits (quotas.py), identifies its texts' languages
when asked (`source: "auto"`, detection.py, in a worker thread), and submits it to the engine
(`submit` only queues; a request with glossaries, constraints or much text is submitted from a
worker thread, as matching and tokenizing it would stall the event loop); `finished` waits
for the job's future without blocking the event loop or a thread, so that one process serves
many concurrent clients while the engine's thread decodes, and cancels the job when its
client disconnects first. `translate_documents` does the same for documents (`format` html or
markdown, markup.py). Every refusal is an `ApiError`, which each API renders in its own error
body.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from starlette.requests import ClientDisconnect, Request

from transformer_mt.config import DecodeConfig
from transformer_mt.documents.markdown_parser import MarkdownMissing
from transformer_mt.documents.units import DocumentError
from transformer_mt.errors import printable
from transformer_mt.inference.requests import Texts
from transformer_mt.serve.contract import (
    Engine,
    Job,
    RequestTooLarge,
    ShuttingDown,
    TokenCallback,
)
from transformer_mt.serve.http import markup
from transformer_mt.serve.http.api import AUTO, TranslateRequest, engine_error, max_body_bytes
from transformer_mt.serve.http.body import ApiError
from transformer_mt.serve.http.quotas import bearer_key

if TYPE_CHECKING:  # torch would come with it; a Translation is only passed on here
    from transformer_mt.inference.checked import CheckedLine
    from transformer_mt.inference.translator import Translation

logger = logging.getLogger("transformer_mt.serve")

# nginx's "client closed request": logged and counted for a client that left before its
# result; the client never sees it.
CLIENT_GONE = 499
# The most characters of text a request submitted on the event loop holds (`submit`): the
# engine tokenizes them there, about 5 ms per 100,000 characters (256 texts of 10,000: 120 ms,
# one core of an AMD EPYC).
LOOP_CHARS = 100_000


async def request_body(request: Request) -> bytes:
    """The body of a translation request: 503 while the server drains; refused (413) from its
    Content-Length, or as soon as it outgrows what the largest allowed request needs; 408
    unless it has all arrived `HttpSettings.body_timeout` seconds after the request's head."""
    state = request.app.state
    if state.draining:
        raise engine_error(ShuttingDown("the server is shutting down"), [])
    limit, timeout = max_body_bytes(state.limits), state.body_timeout
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


def request_key(request: Request, given: str | None = None) -> str | None:
    """The API key of a request: `given` (a body's field), else its Authorization header's."""
    return given or bearer_key(request.headers.get("authorization"))


def admit(request: Request, key: str | None, texts: list[str]) -> str | None:
    """Count the request against its key's and its address's limits (quotas.py); raises the
    ApiError of a refusal. Also tells the request log how many texts it holds. The scope of
    the engine's caches the request may use (`Quotas.admit`)."""
    request.state.sentences = len(texts)
    address = request.client.host if request.client else "unknown"
    return request.app.state.quotas.admit(key, address, texts)


async def start(
    request: Request,
    parsed: TranslateRequest,
    key: str | None,
    on_token: TokenCallback | None = None,
) -> tuple[TranslateRequest, Job]:
    """Admit the request (`admit`), identify its texts' languages if asked, and queue its
    texts: the request with its detections, and the job; or an `ApiError`."""
    scope = admit(request, key, parsed.texts)
    parsed = await identify(request, parsed)
    engine: Engine = request.app.state.engine
    try:
        job = await submit(engine, parsed.submitted(), parsed.decode, on_token, scope)
    except Exception as err:  # every refusal, and an engine fault (500), as one error body
        raise failure(err, parsed) from None
    return parsed, job


async def submit(
    engine: Engine,
    texts: Texts,
    decode: DecodeConfig,
    on_token: TokenCallback | None = None,
    scope: str | None = None,
) -> Job:
    """`engine.submit(texts, decode, on_token, scope=scope)`: on the event loop when that is
    quick (`_quick`), else in a worker thread, so that no request holds up every other client.
    Raises what `Engine.submit` raises."""
    if _quick(texts):
        # On the event loop, not in a worker thread: submitting only tokenizes and queues, and
        # while the decoding thread holds the GIL each hand-over between threads costs up to a
        # switch interval, which a request would pay twice more.
        return engine.submit(texts, decode, on_token, scope=scope)
    return await asyncio.to_thread(engine.submit, texts, decode, on_token, scope=scope)


def _quick(texts: Texts) -> bool:
    """Whether submitting `texts` is quick enough for the event loop: no glossary (each is
    matched against every sentence of its text: one of 10,000 entries over 256 texts of
    10,000 characters stalled every client for seconds), no constraints (each phrase is
    encoded), and at most LOOP_CHARS characters to tokenize."""
    if any(texts.glossaries or ()) or any(texts.constraints or ()):
        return False
    return sum(map(len, texts.texts)) <= LOOP_CHARS


async def translate_documents(
    request: Request, parsed: TranslateRequest, key: str | None
) -> tuple[TranslateRequest, list[str]]:
    """Admit the request (`admit`), identify the language of each document's text (not of
    its markup) if asked, and translate its documents (markup.py): the request with its
    detections, and one translated document per text. Parsing the documents and putting
    their markup back (which runs the model) take a worker thread each; the engine's jobs
    are waited for on the event loop, and cancelled when the client leaves (`until_done`).

    Raises:
        ApiError: a refusal (501 naming format for Markdown without markdown-it-py).
        DocumentError: a document that does not parse, which each API words its own way.
    """
    scope = admit(request, key, parsed.texts)
    parsed = dataclasses.replace(parsed, options=markup.without_bom(parsed.options))
    engine: Engine = request.app.state.engine
    try:
        units = await asyncio.to_thread(markup.units, parsed.texts, parsed.format)
        total = sum(map(len, units))
        if total > engine.limits.max_queue:  # all at once, as a text's sentences: never 429
            raise RequestTooLarge(
                f"{total} units of text in the documents; the queue holds {engine.limits.max_queue}"
            )
        parsed = await identify(request, parsed, ["\n".join(texts) for texts in units])
        documents = parsed.submitted()
        asked = markup.unit_requests(documents, units, engine.limits.max_request_sentences)
        submitted = await _submit_each(engine, asked, parsed.decode, scope)
        await until_done(request, submitted)
        translations = [t for job in submitted for t in outcome(parsed, job)]
        translated = await asyncio.to_thread(
            markup.translate_documents, engine, documents, parsed.format, translations
        )
    except MarkdownMissing as err:
        raise ApiError(501, "format", str(err)) from None
    except (ApiError, DocumentError):
        raise
    except Exception as err:  # the engine's refusals, and its faults (500), as error bodies
        raise failure(err, parsed) from None
    return parsed, translated


async def _submit_each(
    engine: Engine, asked: list[Texts], decode: DecodeConfig, scope: str | None
) -> list[Job]:
    """A job for each of `asked` (`submit`); when one is refused, the others are cancelled:
    their work is of no use any more."""
    submitted: list[Job] = []
    try:
        for texts in asked:
            submitted.append(await submit(engine, texts, decode, scope=scope))
    except BaseException:
        for job in submitted:
            job.cancel()
        raise
    return submitted


async def identify(
    request: Request, parsed: TranslateRequest, shown: list[str] | None = None
) -> TranslateRequest:
    """`parsed` with each text's language identified when its source is AUTO (detection.py),
    from `shown` (one text per text: what of it is language, an HTML document's text) or the
    texts themselves."""
    if parsed.source != AUTO:
        return parsed
    # lingua may load its models first: off the event loop
    detect = request.app.state.sources.detect
    detected = await asyncio.to_thread(detect, shown or parsed.texts, parsed.target)
    return dataclasses.replace(parsed, detected=detected)


async def finished(request: Request, parsed: TranslateRequest, job: Job) -> list[Translation]:
    """The translations of `job` once done; the job is cancelled if the client leaves first
    (or the server cancels this request)."""
    await until_done(request, [job])
    return outcome(parsed, job)


async def until_done(request: Request, submitted: list[Job]) -> None:
    """Return once every job of `submitted` is done, without holding a thread. Those not done
    are cancelled if the client leaves first (then an `ApiError` of status CLIENT_GONE) or
    the server cancels this request."""
    gone = asyncio.ensure_future(_disconnect(request))
    waiting = asyncio.ensure_future(_each_done(submitted))
    try:
        done, _ = await asyncio.wait((waiting, gone), return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
        waiting.cancel()
        for job in submitted:
            if not job.future.done():
                job.cancel()
    if waiting not in done:
        raise ApiError(CLIENT_GONE, None, "the client disconnected before the result")


async def _each_done(submitted: list[Job]) -> None:
    """Return once every job of `submitted` is done (they resolve in the engine's thread)."""
    for job in submitted:
        done = asyncio.Event()
        when_done(job.future, done.set)
        await done.wait()


async def checked(engine: Engine, parsed: TranslateRequest, job: Job) -> list[CheckedLine]:
    """The dropped-content check of finished `job` (`Engine.check`), in a worker thread: it
    runs the model; a failure as its `ApiError`."""
    try:
        return await asyncio.to_thread(engine.check, job)
    except Exception as err:  # an engine fault (500)
        raise failure(err, parsed) from None


def outcome(parsed: TranslateRequest, job: Job) -> list[Translation]:
    """The translations of a finished job, or its `ApiError`."""
    future = job.future
    if future.cancelled():
        raise engine_error(ShuttingDown("the translation was cancelled by the engine"), [])
    if future.exception() is not None:
        raise failure(future.exception(), parsed)
    return future.result()


def failure(err: BaseException, parsed: TranslateRequest) -> ApiError:
    """`err` as a refusal; an engine fault (500) is logged with its traceback."""
    refusal = engine_error(err, list(parsed.decode_keys))
    if refusal.status == 500:
        logger.error("engine failure: %s", printable(refusal.message), exc_info=err)
    return refusal


def when_done(future: concurrent.futures.Future, callback: Callable[[], None]) -> None:
    """Run `callback` on the event loop once `future` is done (it resolves in the engine's
    thread)."""
    loop = asyncio.get_running_loop()
    future.add_done_callback(lambda _: call_in_loop(loop, callback))


def call_in_loop(loop: asyncio.AbstractEventLoop, callback: Callable, *args: object) -> None:
    # RuntimeError: the loop has closed (server stopped), so nobody is waiting any more.
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(callback, *args)


async def _disconnect(request: Request) -> None:
    """Return when the client disconnects (the body has been read: nothing else comes)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass
