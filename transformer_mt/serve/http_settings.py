"""How the server treats connections and requests before any reach the engine: how many
connections it keeps, how long a client may take to send a request, which Host and Origin
headers it answers, which API keys and how many requests and characters it takes. One home for
these defaults; `tmt serve` sets some of them by flag.

Of serve/http/, connections.py applies the connection fields under uvicorn, app.py the
request fields (body_timeout), guard.py the Host and Origin ones, quotas.py the keys and
limits.
"""

from __future__ import annotations

import resource
from dataclasses import dataclass

from transformer_mt.errors import SettingError

# The most connections kept open when `max_connections` is not given; lower when the
# process may open fewer descriptors (see `HttpSettings.connection_caps`).
DEFAULT_MAX_CONNECTIONS = 1024


@dataclass(frozen=True)
class HttpSettings:
    """Connection and request limits, and the names the server answers to."""

    # Connections open at once (None: DEFAULT_MAX_CONNECTIONS, or 3/4 of the descriptor
    # limit when that is lower: the rest is for the checkpoint, logs and the engine). At the
    # cap a new connection closes the oldest idle one, or is refused with 503.
    max_connections: int | None = None
    # Connections open at once from one client address (None: half of max_connections, so
    # that one address never holds them all); beyond it as above, with 429.
    max_client_connections: int | None = None
    # Seconds a client has to send a request's head (line and headers), from the moment it
    # connects or has received its last response; then 408 (or a quiet close when it sent
    # nothing). Slow-header clients cannot hold connections for ever.
    header_timeout: float = 10.0
    # Seconds a client has to send a request's body, from the end of its head; then 408.
    # The largest body the server takes (about 60 MB) arrives in well under that at 10 MB/s.
    body_timeout: float = 30.0
    # Seconds an idle kept-alive connection stays open after a response (uvicorn's setting).
    keep_alive_timeout: int = 5
    # Bytes of a request's head (h11's limit; beyond it 431), and headers in one request.
    max_header_bytes: int = 16 * 1024
    max_headers: int = 100
    # Host names answered besides the addresses the server listens on (and "localhost" when
    # it listens on a loopback address); "*" answers any. Refusing other names stops DNS
    # rebinding: a web page whose own name resolves to this machine cannot reach the server.
    allowed_hosts: tuple[str, ...] = ()
    # Browser origins ("https://app.example:8443") whose pages may call the API; "*": any.
    # Other cross-origin requests are refused with 403.
    cors_origins: tuple[str, ...] = ()
    # The keys file (http/keys.py): with one, every translation and detection needs a key of it
    # (else 403) and is limited as the file says for that key (http/quotas.py). None: no keys.
    api_keys: str | None = None
    # Requests per minute from one client address, a request of n texts counting n
    # (LibreTranslate's --req-limit); beyond it 429. None: no limit.
    req_limit: int | None = None
    # Characters per request, the sum of its texts, as LibreTranslate's --char-limit counts
    # a batch; over it, 413 (LibreTranslate's API: 400). None: no limit but the engine's
    # characters per text.
    char_limit: int | None = None

    def __post_init__(self) -> None:
        for name in (
            "max_connections",
            "max_client_connections",
            "max_headers",
            "req_limit",
            "char_limit",
        ):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise SettingError(name, value, "must be at least 1")
        for name in ("header_timeout", "body_timeout", "keep_alive_timeout", "max_header_bytes"):
            if not getattr(self, name) > 0:
                raise SettingError(name, getattr(self, name), "must be more than 0")
        for origin in self.cors_origins:
            if origin != "*" and "://" not in origin:
                raise SettingError(
                    "cors_origins", origin, "an origin is scheme://host[:port], or *"
                )

    def connection_caps(self) -> tuple[int, int]:
        """(connections in all, connections per client address), the defaults resolved."""
        total = self.max_connections
        if total is None:
            soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
            fitting = DEFAULT_MAX_CONNECTIONS if soft == resource.RLIM_INFINITY else soft * 3 // 4
            total = max(1, min(DEFAULT_MAX_CONNECTIONS, fitting))
        per_client = self.max_client_connections
        if per_client is None:
            per_client = max(1, total // 2)
        return total, min(per_client, total)
