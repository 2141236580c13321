"""uvicorn's h11 connection, with the limits a server facing careless or hostile clients needs
(`HttpSettings`) where uvicorn has no setting of its own.

uvicorn bounds the head's size (h11's max_incomplete_event_size) and idle kept-alive
connections (timeout_keep_alive), but a connection that never completes a head, a client
address holding hundreds of connections, and a body left unread all keep a descriptor for
ever. `GuardedH11Protocol` adds:

- caps on open connections, in all and per client address: at a cap, a new connection
  closes the oldest idle one (no request in progress) of its scope, or, when none is idle,
  is answered 503 (all) or 429 (its address) and closed;
- a head timeout from the moment a connection opens or its last response ends: 408, or a
  quiet close when the client sent nothing;
- a lingering close when the server answers before it has read the whole request (a body
  refused or too slow, a refused connection, a head refused): the server stops writing,
  reads and drops what the client still sends, and closes after the keep-alive timeout (a
  refused connection: after `LINGER_SECONDS`), so that the client reads its answer instead
  of a connection reset (closing a socket with unread input resets the connection);
- the JSON error body of every other refusal, 431 for a head over the size limit.

uvicorn's own `limit_concurrency` is not used: it answers 503 only once a connection has sent
a whole head, keeps idle connections open, and refuses every request once the connections
reach it, so it frees no descriptor.
"""

from __future__ import annotations

import asyncio
import http
import time
from typing import Any

import h11
from uvicorn.config import Config
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.server import ServerState

from transformer_mt.serve.http.body import ApiError
from transformer_mt.serve.http_settings import HttpSettings

# Seconds a connection the server refused outside a response cycle stays open to drop what
# the client still sends. Short: at a cap, refused connections must not pile up.
LINGER_SECONDS = 1.0


class GuardedH11Protocol(H11Protocol):
    """One HTTP/1.1 connection; see the module docstring. uvicorn makes one per connection
    through `functools.partial(GuardedH11Protocol, settings=...)` (`server.uvicorn_config`)."""

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
        *,
        settings: HttpSettings,
    ):
        super().__init__(config, server_state, app_state, _loop)
        self.settings = settings
        self.max_connections, self.max_client_connections = settings.connection_caps()
        self.opened = time.monotonic()
        self.head_timer: asyncio.TimerHandle | None = None
        self.lingering = False

    @property
    def idle(self) -> bool:
        """No request in progress: waiting for a head (or part of one), or between requests."""
        return self.cycle is None or self.cycle.response_complete

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        refusal = self._make_room()
        if refusal is not None:
            self._close_with(*refusal)
            return
        self._arm_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_head_timer()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self.lingering:
            return  # the answer is sent: what the client still sends is dropped
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE:
            self._cancel_head_timer()  # the head has arrived (the body has its own timeout)

    def on_response_complete(self) -> None:
        answered = self.cycle
        super().on_response_complete()  # may start a pipelined request's cycle
        if self.transport.is_closing():
            return
        if self.cycle is not answered:
            self._cancel_head_timer()
        elif self.conn.their_state is h11.SEND_BODY:  # answered before the body was read
            self._linger()  # closed by uvicorn's keep-alive timer
        elif self.conn.their_state is h11.IDLE:
            self._arm_head_timer()

    def send_400_response(self, msg: str) -> None:
        """h11 refused the head: too large (431) or malformed (400)."""
        buffered = len(self.conn.trailing_data[0])
        if buffered > self.settings.max_header_bytes:
            limit = self.settings.max_header_bytes
            self._close_with(431, f"request head: more than {limit} bytes")
        else:
            # h11 gives uvicorn its reason, and uvicorn passes on none (`msg` is one text for
            # all): a missing or repeated Host is refused here, before the guard names it.
            self._close_with(400, "request head: not valid HTTP/1.1")

    def _make_room(self) -> tuple[int, str] | None:
        """Close the oldest idle connection where a cap is reached; the refusal when none is."""
        others = [
            c for c in self.connections if c is not self and isinstance(c, GuardedH11Protocol)
        ]
        same_client = [c for c in others if self._client_host(c) == self._client_host(self)]
        caps = (
            (same_client, self.max_client_connections, 429, "from this address"),
            (others, self.max_connections, 503, ""),
        )
        for peers, cap, status, where in caps:
            if len(peers) + 1 <= cap:
                continue
            idle = [c for c in peers if c.idle and not c.transport.is_closing()]
            if not idle:
                return status, f"too many connections {where}: {cap} open; try again later"
            oldest = min(idle, key=lambda c: c.opened)
            oldest.transport.close()
            others.remove(oldest)
            if oldest in same_client:
                same_client.remove(oldest)
        return None

    @staticmethod
    def _client_host(connection: H11Protocol) -> str | None:
        return connection.client[0] if connection.client else None

    def _arm_head_timer(self) -> None:
        self._cancel_head_timer()
        self.head_timer = self.loop.call_later(self.settings.header_timeout, self._head_late)

    def _cancel_head_timer(self) -> None:
        if self.head_timer is not None:
            self.head_timer.cancel()
            self.head_timer = None

    def _head_late(self) -> None:
        self.head_timer = None
        if self.transport.is_closing() or self.conn.their_state is not h11.IDLE:
            return
        if self.conn.trailing_data[0]:
            seconds = self.settings.header_timeout
            self._close_with(408, f"request head: not complete within {seconds:g} s")
        else:
            self.transport.close()  # an idle connection: nothing to answer

    def _close_with(self, status: int, message: str) -> None:
        """Answer `status` with the API's error body outside h11 (which has no request to
        answer, or has given up on it), then close after `LINGER_SECONDS`."""
        body = ApiError(status, None, message).encoded()
        head = [
            f"HTTP/1.1 {status} {http.HTTPStatus(status).phrase}",
            "content-type: application/json",
            f"content-length: {len(body)}",
            "connection: close",
        ]
        if status in (429, 503):
            head.append("retry-after: 1")
        self.transport.write("\r\n".join(head).encode() + b"\r\n\r\n" + body)
        self._linger()
        self.loop.call_later(LINGER_SECONDS, self.transport.close)

    def _linger(self) -> None:
        """Stop writing (the client sees the end of the answer) and drop what it still sends."""
        self._cancel_head_timer()
        self.lingering = True
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self.flow.resume_reading()
