"""HEAD requests: answered as GET, without the body (RFC 9110 section 9.3.2).

Load balancers and uptime monitors check a server with `HEAD /health`; FastAPI routes answer
only the methods they list, so every GET endpoint (the API's, LibreTranslate's, the page,
/metrics, /docs) would answer HEAD with 405. One middleware makes each answer HEAD as it
answers GET, with the same status and headers (Content-Length included, as the RFC allows),
rather than each route listing HEAD, which would also put a HEAD operation in the API schema.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send


class HeadAsGet:
    """Run a HEAD request as GET and send its answer's head only."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "HEAD":
            await self.app(scope, receive, send)
            return
        ended = False

        async def send_head(message: Message) -> None:
            nonlocal ended
            if message["type"] != "http.response.body":
                await send(message)
            elif not ended:  # the body's first message ends the answer, empty
                ended = True
                await send({"type": "http.response.body", "body": b"", "more_body": False})

        await self.app({**scope, "method": "GET"}, receive, send_head)
