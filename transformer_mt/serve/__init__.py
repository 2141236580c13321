"""`tmt serve`: translations over HTTP from a decoding engine shared by concurrent requests.

Two sides meet through one contract:

- engine/ decodes: the `Engine` takes texts from any thread and translates them on one
  decoding thread (continuous batching over a paged KV cache, prefix and translation caches,
  admission within the KV and token budgets);
- http/ is the FastAPI application in front of it (/v1 and LibreTranslate's API, their
  request bodies, API keys and rate limits, Host and Origin checks, connection limits);
- contract.py is all that http/ knows of the engine (protocols `Engine` and `Job`, the
  errors an engine refuses work with, `EngineStats`), so that http/ is tested against a
  small fake; tests/test_layering.py holds both sides to it.

server.py runs the application under uvicorn with a draining shutdown, for an engine its
caller built (`tmt serve`), with the connection and request settings of http_settings.py.
Only this package imports the `serve` extra (fastapi, uvicorn, prometheus_client,
fastapi_offline), and importing the package itself imports none of them, so that
`missing_dependencies` can say what to install.
"""

from __future__ import annotations

import importlib.util

# The import names of the `serve` extra (pyproject.toml).
EXTRA_MODULES = ("fastapi", "uvicorn", "prometheus_client", "fastapi_offline")


def missing_dependencies() -> list[str]:
    """The modules of the `serve` extra that are not installed."""
    return [name for name in EXTRA_MODULES if importlib.util.find_spec(name) is None]
