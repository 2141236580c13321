"""Running the app under uvicorn: `serve` for `tmt serve`, `start_in_thread` for tests and
benchmarks, which need a real server on a free loopback port.

Both own the engine's life: they start it before the first request and stop it at the end.
Shutdown drains: on the first SIGINT or SIGTERM the app answers new requests with 503 (and
/health with 503, so that a load balancer moves on), the engine finishes the work it
admitted, and only then does uvicorn send the last responses and exit. A second signal makes
uvicorn stop without waiting for the engine; a further SIGINT stops without waiting at all.
Should the engine's decoding thread die, the server stops too (`serve` raises
`EngineStopped`, and `tmt serve` exits non-zero), so that a supervisor starts a new one.
SIGHUP makes `serve` read its API keys file again (http/keys.py).

Connections go through http/connections.py's `GuardedH11Protocol` (caps, timeouts) with the
limits of `HttpSettings`.
"""

from __future__ import annotations

import errno
import functools
import logging
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from types import FrameType

import uvicorn
from fastapi import FastAPI

from transformer_mt.errors import MachineError, SettingError, TmtError, one_line
from transformer_mt.serve.contract import Engine
from transformer_mt.serve.http.app import create_app
from transformer_mt.serve.http.app import drain as drain_app
from transformer_mt.serve.http.connections import GuardedH11Protocol
from transformer_mt.serve.http_settings import HttpSettings

logger = logging.getLogger("transformer_mt.serve")

# How long `start_in_thread` waits for uvicorn to listen (a cold import can take seconds).
START_TIMEOUT_SECONDS = 30.0


class EngineStopped(MachineError):
    """The engine's decoding thread died, and the server with it: `tmt serve` exits 1, so
    that a supervisor restarts it."""


class EngineServer(uvicorn.Server):
    """uvicorn's server, which stops when the app's engine has died."""

    def __init__(self, config: uvicorn.Config, app: FastAPI):
        super().__init__(config)
        self.app = app

    async def on_tick(self, counter: int) -> bool:
        # uvicorn's main loop asks this every 0.1 s whether to stop.
        failure = self.app.state.engine.failure
        if failure is not None and not self.should_exit:
            logger.critical("the decoding engine stopped (%s): stopping the server", failure)
            self.should_exit = True
        return await super().on_tick(counter)


class DrainingServer(EngineServer):
    """The server of `serve`, whose first exit signal drains the app before uvicorn stops."""

    def __init__(self, config: uvicorn.Config, app: FastAPI):
        super().__init__(config, app)
        self.draining: threading.Thread | None = None

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self.draining is not None:
            # The second signal: the admitted requests are dropped (their clients get 503)
            # and uvicorn does not wait for their connections. Handed to uvicorn alone, a
            # second SIGTERM had still waited for every admitted request to finish.
            logger.warning("signal %d again: stopping without finishing the admitted requests", sig)
            self.force_exit = True
            engine = self.app.state.engine
            threading.Thread(
                target=engine.stop, args=(False,), name="tmt-stop", daemon=True
            ).start()
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
    engine: Engine,
    sock: socket.socket,
    host: str,
    log_level: str = "info",
    settings: HttpSettings | None = None,
) -> None:
    """Serve `engine` over HTTP on `sock` (`listen(host, port)`, bound before the model was
    loaded, so that an address it cannot have stops at once) until SIGINT or SIGTERM, then
    drain and return.

    Logs (one line per request, uvicorn's own lines) go to stderr at `log_level`.
    `settings` None: the defaults of `HttpSettings`.

    Raises:
        EngineStopped: the engine's decoding thread died; the server stopped with it.
    """
    logging.basicConfig(
        level=log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    settings = settings if settings is not None else HttpSettings()
    app = create_app(engine, settings, host)
    if hasattr(signal, "SIGHUP"):  # the keys file is read again (http/quotas.py); not on Windows
        signal.signal(signal.SIGHUP, lambda sig, frame: app.state.quotas.reload_keys())
    server = DrainingServer(uvicorn_config(app, log_level, settings), app)
    engine.start()
    try:
        logger.info("serving on %s (API docs: /docs, web page: /)", socket_url(host, sock))
        server.run(sockets=[sock])
    finally:
        engine.stop(drain=False)  # stopped already unless uvicorn failed
    if engine.failure is not None:
        raise EngineStopped(f"the decoding engine stopped: {one_line(engine.failure)}")


def start_in_thread(
    target: FastAPI | Engine,
    host: str = "127.0.0.1",
    port: int = 0,
    settings: HttpSettings | None = None,
) -> tuple[str, Callable[..., None]]:
    """Start the engine and a real server in a background thread (port 0: a free port).
    The server stops by itself should the engine die. `settings` None: the defaults of
    `HttpSettings` (an app given as `target` has its own request settings already).

    Returns:
        The base URL ("http://127.0.0.1:PORT"), and `stop(drain=True)`: drain as after a
        signal (new requests 503 until the engine has finished), or with drain=False stop the
        engine at once; then stop uvicorn and join its thread.
    """
    settings = settings if settings is not None else HttpSettings()
    app = target if isinstance(target, FastAPI) else create_app(target, settings, host)
    engine: Engine = app.state.engine
    sock = listen(host, port)
    try:
        engine.start()  # a stopped engine is refused (it would answer every request 503)
    except BaseException:
        sock.close()
        raise
    server = EngineServer(uvicorn_config(app, None, settings), app)
    thread = threading.Thread(
        target=server.run, kwargs={"sockets": [sock]}, name="tmt-uvicorn", daemon=True
    )
    thread.start()
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            engine.stop(drain=False)
            raise TmtError(f"the server on {socket_url(host, sock)} did not start")
        time.sleep(0.01)

    def stop(drain: bool = True) -> None:
        if drain:
            drain_app(app)
        else:
            engine.stop(drain=False)
        server.should_exit = True
        thread.join()

    return socket_url(host, sock), stop


def listen(host: str, port: int) -> socket.socket:
    """A socket bound to (host, port), for uvicorn to listen on; port 0: a free port.

    Raises:
        SettingError: naming `host` when it is not an address of this machine, `port` when
            it is out of range, in use or not allowed.
    """
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise SettingError("port", port, "must be a port number from 0 to 65535")
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except (OSError, UnicodeError) as err:
        reason = getattr(err, "strerror", None) or one_line(err)
        raise SettingError("host", host, f"not an address to listen on ({reason})") from None
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError as err:
        sock.close()
        if err.errno == errno.EADDRNOTAVAIL:
            raise SettingError(
                "host", host, f"not an address of this machine ({err.strerror})"
            ) from None
        raise SettingError(
            "port", port, f"cannot listen on {host}:{port} ({err.strerror})"
        ) from None
    return sock


def uvicorn_config(app: FastAPI, log_level: str | None, settings: HttpSettings) -> uvicorn.Config:
    """uvicorn's configuration: its own knobs where it has them (keep-alive timeout, head
    size), `GuardedH11Protocol` for the rest of `settings`."""
    # access_log off: the app logs each request itself (with its sentences and milliseconds);
    # log_config None: logging is set up by `serve` (or by the test runner), not by uvicorn.
    return uvicorn.Config(
        app,
        log_config=None,
        log_level=log_level,
        access_log=False,
        lifespan="off",
        http=functools.partial(GuardedH11Protocol, settings=settings),
        timeout_keep_alive=settings.keep_alive_timeout,
        h11_max_incomplete_event_size=settings.max_header_bytes,
    )


def socket_url(host: str, sock: socket.socket) -> str:
    """The URL of the server on `sock` (bound by `listen`): the port it holds (a free one, for
    port 0), an IPv6 host in brackets."""
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{sock.getsockname()[1]}"
