"""The real engine of a checkpoint for the module-scoped fixtures of the tests that need it:
built and started once per module, stopped without draining after its last test, either
running in this process (`running`) or behind the real server on a loopback port (`serving`),
and `post` to ask that server."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from transformer_mt.serve.engine import Engine, ServeLimits


def running(checkpoint: Path, limits: ServeLimits) -> Iterator[Engine]:
    """For a fixture to `yield from`: the started engine while the module's tests run."""
    engine = Engine.from_checkpoint(str(checkpoint), limits=limits)
    engine.start()
    yield engine
    engine.stop(drain=False)


def serving(checkpoint: Path, limits: ServeLimits) -> Iterator[tuple[str, Engine]]:
    """For a fixture to `yield from`: (url, engine) while the module's tests run."""
    # Here, not at the top: the server needs fastapi and uvicorn, tests of `running` do not.
    from transformer_mt.serve.server import start_in_thread

    engine = Engine.from_checkpoint(str(checkpoint), limits=limits)
    url, stop = start_in_thread(engine)
    yield url, engine
    stop(drain=False)


def post(url: str, body: bytes | dict) -> tuple[int, dict]:
    """POST `body` (JSON bytes, or a dict to encode) to a served `url`: (status, JSON answer),
    4xx and 5xx answers included."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    request = urllib.request.Request(url, data, {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as err:
        return err.code, json.load(err)
