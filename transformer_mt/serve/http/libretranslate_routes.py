"""LibreTranslate's endpoints, beside /v1 and served by the same engine: POST /translate, GET
/languages, POST /detect (GET /health is the app's own, which answers as LibreTranslate's).

Each parses its request with libretranslate.py and goes through the steps every translation
endpoint shares (jobs.py: body limits, keys and limits, language identification, the engine),
so that a LibreTranslate client and a /v1 client are translated, counted and refused alike;
HTML documents go through markup.py to the same engine, as /v1's do. Every refusal reaches
the client in LibreTranslate's error body (`libre_error`).
"""

from __future__ import annotations

import asyncio

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from transformer_mt.documents.units import DocumentError
from transformer_mt.serve.contract import Engine
from transformer_mt.serve.http import jobs, schema
from transformer_mt.serve.http.api import TEXT, TranslateRequest
from transformer_mt.serve.http.body import ApiError
from transformer_mt.serve.http.libretranslate import (
    LibreError,
    LibreRequest,
    detect_json,
    languages_json,
    libre_error,
    parse_detect,
    parse_translate,
    request_fields,
    translate_json,
)


def _docs(body: type, description: str) -> dict:
    """OpenAPI for an endpoint taking `body` as JSON or a form, refusing in LibreTranslate's
    error body."""
    content = {
        media: {"schema": schema.request_schema(body)}
        for media in ("application/json", "application/x-www-form-urlencoded")
    }
    refusals = {
        400: "A missing or malformed field, an unknown language, a request too large",
        403: "No API key, or one the server does not know, where keys are required",
        429: "Over a limit of the key or the address; retry after Retry-After seconds",
        500: "The engine failed",
    }
    return {
        "description": description,
        "openapi_extra": {"requestBody": {"required": True, "content": content}},
        "responses": {
            status: {"model": schema.LibreErrorBody, "description": text}
            for status, text in refusals.items()
        },
    }


def add_routes(app: FastAPI) -> None:
    """Serve LibreTranslate's endpoints from `app` (whose state create_app has set)."""
    app.add_api_route(
        "/translate",
        translate,
        methods=["POST"],
        response_model=schema.LibreTranslateResponse,
        response_model_exclude_none=True,
        tags=["LibreTranslate"],
        **_docs(schema.LibreTranslateBody, "Translate text (LibreTranslate's API)."),
    )
    app.add_api_route(
        "/languages",
        languages,
        methods=["GET"],
        response_model=list[schema.LibreLanguage],
        tags=["LibreTranslate"],
    )
    app.add_api_route(
        "/detect",
        detect,
        methods=["POST"],
        response_model=list[schema.LibreDetected],
        tags=["LibreTranslate"],
        **_docs(schema.LibreDetectBody, "Identify a text's language (LibreTranslate's API)."),
    )


async def translate(request: Request) -> JSONResponse:
    """LibreTranslate's /translate: one text or a list, from `source` (or auto) into
    `target`, with alternatives; or HTML documents, their markup kept."""
    engine: Engine = request.app.state.engine
    try:
        fields = await _fields(request)
        libre = parse_translate(fields, engine.defaults, request.app.state.limits, engine.languages)
        key = jobs.request_key(request, libre.api_key)
        if libre.request.format != TEXT:
            parsed, hypotheses = await _documents(request, libre, key)
        else:
            parsed, job = await jobs.start(request, libre.request, key)
            translations = await jobs.finished(request, parsed, job)
            hypotheses = [t.texts for t in translations]
    except ApiError as err:
        raise libre_error(err) from None
    return JSONResponse(translate_json(libre, parsed.detected, hypotheses))


async def languages(request: Request) -> JSONResponse:
    """Every language of the model, with the languages it may be asked to translate it into."""
    return JSONResponse(languages_json(request.app.state.engine.languages))


async def detect(request: Request) -> JSONResponse:
    """LibreTranslate's /detect: the language of `q` among those the model translates from,
    confidence 0 to 100; an empty list when `q` is in none of them, 400 without lingua."""
    try:
        fields = await _fields(request)
        texts, key = parse_detect(fields, request.app.state.limits)
        jobs.admit(request, jobs.request_key(request, key), texts)
        detect_any = request.app.state.sources.detect_any
        detections = await asyncio.to_thread(detect_any, texts)
    except ApiError as err:
        raise libre_error(err) from None
    return JSONResponse(detect_json(detections))


async def _documents(
    request: Request, libre: LibreRequest, key: str | None
) -> tuple[TranslateRequest, list[list[str]]]:
    """The HTML documents of `libre` translated (jobs.py), each the one hypothesis of its
    text; one that does not parse is LibreTranslate's 400."""
    try:
        parsed, documents = await jobs.translate_documents(request, libre.request, key)
    except DocumentError as err:
        which = "" if len(libre.request.texts) == 1 else f"q[{err.document}]: "
        message = f"Invalid request: {which}the html does not parse ({err})"
        raise LibreError(400, "q", message) from None
    return parsed, [[document] for document in documents]


async def _fields(request: Request) -> dict:
    body = await jobs.request_body(request)
    content_type = request.headers.get("content-type", "")
    return request_fields(body, content_type, request.scope.get("query_string", b""))
