"""Which requests the server answers at all: Host and Origin checks, and a bound on headers.

A web page the user visits may make the browser send requests to a server on the user's
machine: by DNS rebinding (the page's own name made to resolve to 127.0.0.1, so that the
browser lets the page read the answers) or plainly cross-origin (the browser sends the request
and withholds the answer, but the server still does the work). `RequestGuard` answers only
Host names the server listens on or was given (`HostRule`), and refuses a request whose
Origin is neither the server's own nor one of `HttpSettings.cors_origins` (browsers send
Origin with every cross-origin request they let a page make, and with every POST).

Starlette's TrustedHostMiddleware checks Host only, with a plain-text refusal and without
the any-address rule of a wildcard listener; this module answers in the API's error body.
"""

from __future__ import annotations

import ipaddress
import json
import socket
from dataclasses import dataclass

from transformer_mt.serve.api import ApiError, printable
from transformer_mt.serve.http_settings import HttpSettings


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
    for a Host the server does not answer, 403 for a cross-origin request from an origin not
    allowed."""

    def __init__(self, app, hosts: HostRule, settings: HttpSettings):
        self.app, self.hosts, self.settings = app, hosts, settings
        self.origins = frozenset(origin.lower().rstrip("/") for origin in settings.cors_origins)

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http":
            refusal = self._refusal(scope)
            if refusal is not None:
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
        values = {name: value for name, value in headers if name in (b"host", b"origin")}
        host = values.get(b"host", b"").decode("latin-1")
        if host and not self.hosts.allows(_host_name(host)):
            return ApiError(400, "Host", f"Host {printable(host)}: not a name this server answers")
        origin = values.get(b"origin")
        if origin is not None:
            origin_text = origin.decode("latin-1").lower().rstrip("/")
            own = f"{scope.get('scheme', 'http')}://{host.lower()}"
            if origin_text != own and "*" not in self.origins and origin_text not in self.origins:
                return ApiError(
                    403,
                    "Origin",
                    f"Origin {printable(origin_text)}: cross-origin requests from it are refused",
                )
        return None


def _host_name(host: str) -> str:
    """The host of a Host header value, without its port, lower case, without a final dot."""
    host = host.strip().lower()
    if host.startswith("["):  # [IPv6]:port
        return host[1 : host.find("]")] if "]" in host else host
    if host.count(":") == 1:
        host = host.rsplit(":", 1)[0]
    return host.rstrip(".")


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
    body = json.dumps(err.body()).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": err.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
