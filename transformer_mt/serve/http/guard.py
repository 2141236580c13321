"""Which requests the server answers at all: Host and Origin checks, and a bound on headers.

A web page the user visits may make the browser send requests to a server on the user's
machine: by DNS rebinding (the page's own name made to resolve to 127.0.0.1, so that the
browser lets the page read the answers) or plainly cross-origin (the browser sends the request
and withholds the answer, but the server still does the work). `RequestGuard` answers only
Host names the server listens on or was given (`HostRule`), and refuses a request whose
Origin is neither the server's own nor one of `HttpSettings.cors_origins` (browsers send
Origin with every cross-origin request they let a page make, and with every POST).

A request must carry exactly one Host header holding `host[:port]`, HTTP/1.0 too: a request
without one (which h11 lets through for HTTP/1.0), with an empty one, or with two (an ASGI
server other than uvicorn may pass both on, and this module must not pick one to trust) is
refused before any Host rule is asked, as RFC 9112 section 3.2 asks of HTTP/1.1. Origin,
which a browser sends at most once, is refused when given twice for the same reason, and so
is Authorization: of two keys, the server would have to pick the one to count and trust.

Starlette's TrustedHostMiddleware checks Host only, with a plain-text refusal and without
the any-address rule of a wildcard listener; this module answers in the API's error body.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from dataclasses import dataclass

from transformer_mt.errors import printable
from transformer_mt.serve.http import libretranslate
from transformer_mt.serve.http.body import ApiError
from transformer_mt.serve.http_settings import HttpSettings

# A Content-Type's charset parameter, and the names of UTF-8 (US-ASCII is a part of it).
_CHARSET = re.compile(r";\s*charset\s*=\s*([^;\s]+)", re.IGNORECASE)
_UTF8 = frozenset({"utf-8", "utf8", "us-ascii", "ascii"})

# A Host header's value (RFC 3986 authority without userinfo): a bracketed IPv6 address or a
# name or IPv4 address of unreserved, percent-encoded and sub-delimiter characters, then an
# optional port of digits.
_HOST_VALUE = re.compile(r"(\[[0-9A-Za-z:.%_~-]+\]|[0-9A-Za-z._~%!$&'()*+,;=-]+)(?::[0-9]*)?")


@dataclass(frozen=True)
class HostRule:
    """The Host names a server answers: `names` (lower case; "*.example.org" matches its
    subdomains; "*" any), and with `any_address` every IP address (a wildcard listener:
    the machine's addresses are not known in advance, and an address is never rebound)."""

    names: frozenset[str]
    any_address: bool = False

    @classmethod
    def for_listener(cls, host: str, allowed: tuple[str, ...] = ()) -> HostRule:
        """The rule for a server listening on `host` (an address or a name), with the extra
        names `allowed`: the host itself, the addresses it resolves to, "localhost" for a
        loopback address, and for a wildcard (0.0.0.0, ::) the machine's name."""
        names = {host.lower().strip("[]"), *(name.lower() for name in allowed)}
        addresses = {_address(host)} if _address(host) else _resolve(host)
        names |= {str(address) for address in addresses}
        any_address = any(address.is_unspecified for address in addresses)
        if any_address or any(address.is_loopback for address in addresses):
            names.add("localhost")
        if any_address:
            names.add(socket.gethostname().lower())
        return cls(frozenset(names), any_address)

    def allows(self, host: str) -> bool:
        """Whether a Host header's host (no port, lower case) is answered."""
        if "*" in self.names or host in self.names:
            return True
        if self.any_address and _address(host) is not None:
            return True
        return any(n.startswith("*.") and host.endswith(n[1:]) for n in self.names)


class RequestGuard:
    """ASGI middleware: 431 for more headers than `max_headers` or a head larger than
    `max_header_bytes` (h11 bounds only a head still arriving, not one that came whole), 400
    for a Host header missing, repeated, empty or not `host[:port]`, or naming a host the
    server does not answer, 400 for a repeated Origin or Authorization, 403 for a
    cross-origin request from an origin not allowed."""

    def __init__(self, app, hosts: HostRule, settings: HttpSettings):
        self.app, self.hosts, self.settings = app, hosts, settings
        self.origins = frozenset(origin.lower().rstrip("/") for origin in settings.cors_origins)

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http":
            refusal = self._refusal(scope)
            if refusal is not None:
                if scope["path"] in libretranslate.PATHS:  # in its clients' error body
                    refusal = libretranslate.libre_error(refusal)
                await _send_error(send, refusal)
                return
        await self.app(scope, receive, send)

    def _refusal(self, scope: dict) -> ApiError | None:
        headers = scope["headers"]
        if len(headers) > self.settings.max_headers:
            most = self.settings.max_headers
            return ApiError(431, None, f"{len(headers)} headers; at most {most} per request")
        size = len(scope.get("raw_path", b"")) + len(scope.get("query_string", b""))
        size += sum(len(name) + len(value) + 4 for name, value in headers)  # "name: value\r\n"
        if size > self.settings.max_header_bytes:
            most = self.settings.max_header_bytes
            return ApiError(431, None, f"request head: {size} bytes; at most {most}")
        hosts = _values(headers, b"host")
        refusal = self._host_refusal(hosts)
        if refusal is not None:
            return refusal
        keys = len(_values(headers, b"authorization"))
        if keys > 1:  # which one is the client's (a proxy may add its own)?
            return ApiError(
                400, "Authorization", f"Authorization: given {keys} times; a request has one key"
            )
        refusal = _encoding_refusal(headers)
        if refusal is not None:
            return refusal
        return self._origin_refusal(_values(headers, b"origin"), scope, hosts[0])

    def _host_refusal(self, hosts: list[str]) -> ApiError | None:
        """400 unless `hosts` (the Host headers' values) is one `host[:port]` that
        `self.hosts` answers."""
        if len(hosts) != 1:
            problem = "missing" if not hosts else f"given {len(hosts)} times"
            return ApiError(400, "Host", f"Host: {problem}; a request names one host[:port]")
        host = hosts[0]
        if not host:
            return ApiError(400, "Host", "Host: empty; a request names one host[:port]")
        if _HOST_VALUE.fullmatch(host) is None:
            return ApiError(400, "Host", f"Host {printable(host)}: not a host[:port]")
        if not self.hosts.allows(_host_name(host)):
            return ApiError(400, "Host", f"Host {printable(host)}: not a name this server answers")
        return None

    def _origin_refusal(self, origins: list[str], scope: dict, host: str) -> ApiError | None:
        """400 for several Origin headers; 403 for one that is neither the server's own
        (`scheme://host`) nor allowed; None without one (not a browser's cross-origin
        request)."""
        if not origins:
            return None
        if len(origins) > 1:
            return ApiError(
                400, "Origin", f"Origin: given {len(origins)} times; a browser sends one"
            )
        origin = origins[0].lower().rstrip("/")
        own = f"{scope.get('scheme', 'http')}://{host.lower()}"
        if origin != own and "*" not in self.origins and origin not in self.origins:
            return ApiError(
                403,
                "Origin",
                f"Origin {printable(origin)}: cross-origin requests from it are refused",
            )
        return None


def _encoding_refusal(headers: list[tuple[bytes, bytes]]) -> ApiError | None:
    """415 for a body the server would misread: compressed (Content-Encoding), or text in a
    charset other than UTF-8. Both had been read as UTF-8 and refused for a byte that is not
    (`body: not UTF-8 (byte 0x8b at offset 1)` for gzip), which names the wrong cause."""
    for coding in _values(headers, b"content-encoding"):
        if coding.strip().lower() not in ("", "identity"):
            return ApiError(
                415,
                "Content-Encoding",
                f"Content-Encoding: {printable(coding, 100)}; the server reads bodies as sent: "
                "send it uncompressed",
            )
    for media in _values(headers, b"content-type"):
        charset = _CHARSET.search(media)
        if charset is not None and charset.group(1).strip("\"'").lower() not in _UTF8:
            return ApiError(
                415,
                "Content-Type",
                f"Content-Type: charset={printable(charset.group(1), 100)}; the server reads "
                "UTF-8: send the text in UTF-8",
            )
    return None


def _values(headers: list[tuple[bytes, bytes]], name: bytes) -> list[str]:
    """The values of every header `name` (lower case, as ASGI gives names), without the
    whitespace around them (which an ASGI server may leave)."""
    return [value.decode("latin-1").strip(" \t") for key, value in headers if key == name]


def _host_name(host: str) -> str:
    """The host of a Host header value (`_HOST_VALUE`), without its port, lower case, without
    a final dot."""
    host = host.lower()
    if host.startswith("["):  # [IPv6]:port
        return host[1 : host.index("]")]
    return host.partition(":")[0].rstrip(".")


def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text.strip("[]"))
    except ValueError:
        return None


def _resolve(host: str) -> set:
    try:
        found = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except OSError:
        return set()
    return {ipaddress.ip_address(info[4][0].split("%")[0]) for info in found}


async def _send_error(send, err: ApiError) -> None:
    body = err.encoded()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": err.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
