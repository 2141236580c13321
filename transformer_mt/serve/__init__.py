"""`tmt serve`: translations over HTTP from a decoding engine shared by concurrent requests.

api.py reads and checks request bodies (terms.py their glossaries and constraints), app.py
is the FastAPI application (translate, stream, languages, health, metrics, the web page),
libretranslate.py and libretranslate_routes.py LibreTranslate's API beside it, jobs.py the
steps both share, keys.py and quotas.py the API keys and rate limits, detection.py
identifies the language of texts sent with `source: "auto"`, server.py runs it under uvicorn
with a draining shutdown, and engine.py decodes (each text sentence by sentence, texts.py).
Only this package imports the `serve` extra (fastapi, uvicorn, prometheus_client, limits,
fastapi_offline),
and importing the package itself imports none of them, so that `missing_dependencies` can
say what to install.
"""

from __future__ import annotations

import importlib.util

# The import names of the `serve` extra (pyproject.toml).
EXTRA_MODULES = ("fastapi", "uvicorn", "prometheus_client", "limits", "fastapi_offline")


def missing_dependencies() -> list[str]:
    """The modules of the `serve` extra that are not installed."""
    return [name for name in EXTRA_MODULES if importlib.util.find_spec(name) is None]
