"""Running the app under uvicorn: `serve` for `tmt serve`, `start_in_thread` for tests and
benchmarks, which need a real server on a free loopback port.

Both own the engine's life: they start it before the first request and stop it at the end.
Shutdown drains: on the first SIGINT or SIGTERM the app answers new requests with 503 (and
/health with 503, so that a load balancer moves on), the engine finishes the work it
admitted, and only then does uvicorn send the last responses and exit. A second signal makes
uvicorn stop without waiting for the engine; a further SIGINT stops without waiting at all.
"""

from __future__ import annotations

import logging
import socket
import sys
import threading
import time
from collections.abc import Callable
from types import FrameType

import uvicorn
from fastapi import FastAPI

from transformer_mt.errors import SettingError, TmtError
from transformer_mt.serve.app import create_app
from transformer_mt.serve.app import drain as drain_app
from transformer_mt.serve.contract import Engine

logger = logging.getLogger("transformer_mt.serve")

# How long `start_in_thread` waits for uvicorn to listen (a cold import can take seconds).
START_TIMEOUT_SECONDS = 30.0


class DrainingServer(uvicorn.Server):
    """uvicorn's server, whose first exit signal drains the app before uvicorn stops."""

    def __init__(self, config: uvicorn.Config, app: FastAPI):
        super().__init__(config)
        self.app = app
        self.draining: threading.Thread | None = None

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self.draining is not None:
            super().handle_exit(sig, frame)
            return
        logger.info("signal %d: refusing new requests, finishing the ones admitted", sig)
        # The signal handler runs on the event loop's thread, which must keep serving the
        # requests being finished: the engine is drained from another thread.
        self.draining = threading.Thread(
            target=self._drain_then_exit, args=(sig, frame), name="tmt-drain", daemon=True
        )
        self.draining.start()

    def _drain_then_exit(self, sig: int, frame: FrameType | None) -> None:
        try:
            drain_app(self.app)
        finally:
            super().handle_exit(sig, frame)


def serve(
    engine: Engine, host: str = "127.0.0.1", port: int = 8000, log_level: str = "info"
) -> None:
    """Serve `engine` over HTTP until SIGINT or SIGTERM, then drain and return.

    Logs (one line per request, uvicorn's own lines) go to stderr at `log_level`.

    Raises:
        SettingError: `port` cannot be listened on (in use, or not allowed).
    """
    logging.basicConfig(
        level=log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    app = create_app(engine)
    sock = listen(host, port)
    server = DrainingServer(_config(app, log_level), app)
    engine.start()
    try:
        logger.info("serving on %s (API docs: /docs, web page: /)", _url(host, sock))
        server.run(sockets=[sock])
    finally:
        engine.stop(drain=False)  # stopped already unless uvicorn failed


def start_in_thread(
    target: FastAPI | Engine, host: str = "127.0.0.1", port: int = 0
) -> tuple[str, Callable[..., None]]:
    """Start the engine and a real server in a background thread (port 0: a free port).

    Returns:
        The base URL ("http://127.0.0.1:PORT"), and `stop(drain=True)`: drain as after a
        signal (new requests 503 until the engine has finished), or with drain=False stop the
        engine at once; then stop uvicorn and join its thread.
    """
    app = target if isinstance(target, FastAPI) else create_app(target)
    engine: Engine = app.state.engine
    sock = listen(host, port)
    server = uvicorn.Server(_config(app, None))
    engine.start()
    thread = threading.Thread(
        target=server.run, kwargs={"sockets": [sock]}, name="tmt-uvicorn", daemon=True
    )
    thread.start()
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            engine.stop(drain=False)
            raise TmtError(f"the server on {_url(host, sock)} did not start")
        time.sleep(0.01)

    def stop(drain: bool = True) -> None:
        if drain:
            drain_app(app)
        else:
            engine.stop(drain=False)
        server.should_exit = True
        thread.join()

    return _url(host, sock), stop


def listen(host: str, port: int) -> socket.socket:
    """A socket bound to (host, port), for uvicorn to listen on; port 0: a free port."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as err:
        sock.close()
        raise SettingError(
            "port", port, f"cannot listen on {host}:{port} ({err.strerror})"
        ) from None
    return sock


def _config(app: FastAPI, log_level: str | None) -> uvicorn.Config:
    # access_log off: the app logs each request itself (with its sentences and milliseconds);
    # log_config None: logging is set up by `serve` (or by the test runner), not by uvicorn.
    return uvicorn.Config(
        app, log_config=None, log_level=log_level, access_log=False, lifespan="off"
    )


def _url(host: str, sock: socket.socket) -> str:
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{sock.getsockname()[1]}"
