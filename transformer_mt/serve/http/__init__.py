"""The HTTP side of `tmt serve`: the FastAPI application, its request bodies and the limits in
front of them.

app.py is the application (translate, stream, languages, health, metrics, the web page),
api.py reads and checks /v1's request bodies (terms.py their glossaries and constraints;
body.py the JSON of any body, and ApiError, the one way every route refuses a request),
answers.py writes its answers,
libretranslate.py and libretranslate_routes.py LibreTranslate's API beside it, jobs.py the
steps both share, markup.py documents through the engine, detection.py identifies the
language of texts sent with `source: "auto"`, keys.py and quotas.py the API keys and rate
limits, guard.py the Host and Origin checks, connections.py the connection limits under
uvicorn, schema.py the bodies for OpenAPI and metrics.py /metrics.

It knows the decoding engine only through serve/contract.py (tested: tests/test_layering.py),
so that its tests run against a small fake and the engine (serve/engine/) changes how it
batches and caches without touching it.
"""
