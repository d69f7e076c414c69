"""ASGI middleware: the request body bound, and the open-mode banner on every response."""

from __future__ import annotations

import json

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from sealflow.server.problems import MEDIA_TYPE, TYPE_PREFIX, TYPES

OPEN_HEADER = b"sealflow-open-mode"
OPEN_TEXT = b"anonymous requests are served and no access policy may apply: development only"


async def _too_large(send: Send, limit: int, path: str) -> None:
    status, title = TYPES["body-too-large"]
    body = json.dumps({"type": TYPE_PREFIX + "body-too-large", "title": title, "status": status,
                       "detail": f"the request body is over {limit} bytes", "instance": path}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", MEDIA_TYPE.encode()), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


class BodyLimit:
    """Read at most ``limit`` bytes of a request body (``Content-Length`` checked first), then hand the body
    on; a larger one is answered 413 before the application sees it."""

    def __init__(self, app: ASGIApp, limit: int):
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", ()):
            if name == b"content-length" and (not value.isdigit() or int(value) > self.limit):
                await _too_large(send, self.limit, scope.get("path", ""))
                return
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.limit:
                await _too_large(send, self.limit, scope.get("path", ""))
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


class OpenBanner:
    """Add ``Sealflow-Open-Mode`` to every response of a server started with ``--allow-open``."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def banner(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", ()), (OPEN_HEADER, OPEN_TEXT)]}
            await send(message)

        await self.app(scope, receive, banner)
