"""Request guards that run before routing: a bound on the body's size and a URL that is UTF-8.

Both are plain ASGI middleware, so a refused request never reaches a route and a large body is
never held in memory: a declared Content-Length over the limit is refused before a byte of the
body is read, and a body without one (chunked) is counted as it streams in and cut off as soon as
it passes the limit. Refusals are JSON `{"detail": "…"}` like every other error.
"""

from __future__ import annotations

import json
import logging
from urllib.parse import unquote_to_bytes

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

logger = logging.getLogger(__name__)


async def send_error(send: Send, status: int, detail: str) -> None:
    """A complete `{"detail": …}` response, sent straight from middleware."""
    body = json.dumps({"detail": detail}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


class BodyTooLargeError(HTTPException):
    """Raised from `receive` when a streamed body passes the limit. An HTTPException, so
    FastAPI's body reader passes it on and its handler answers 413."""

    def __init__(self, limit: int):
        super().__init__(413, f"the request body is larger than the limit of {limit:,} bytes")


class BodySizeLimit:
    """413 for a body over `max_bytes` (or, under a path prefix of `prefix_limits`, that
    prefix's limit), declared or streamed; 400 for a Content-Length that is not a number."""

    def __init__(
        self, app: ASGIApp, *, max_bytes: int, prefix_limits: dict[str, int] | None = None
    ):
        self.app = app
        self.max_bytes = max_bytes
        self.prefix_limits = prefix_limits or {}

    def limit(self, path: str) -> int:
        matches = [prefix for prefix in self.prefix_limits if path.startswith(prefix)]
        return self.prefix_limits[max(matches, key=len)] if matches else self.max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.limit(scope["path"])
        declared = _header(scope, b"content-length")
        if declared is not None:
            if not declared.isdigit():
                await send_error(send, 400, "the Content-Length header is not a number")
                return
            if int(declared) > limit:
                logger.info("refused a body of %s bytes", declared)
                await send_error(send, 413, BodyTooLargeError(limit).detail)
                return
        received = 0
        started = False

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise BodyTooLargeError(limit)
            return message

        async def watched_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, limited_receive, watched_send)
        except BodyTooLargeError as e:  # read outside FastAPI's body reader (its own handler)
            if started:
                raise
            await send_error(send, 413, e.detail)


class Utf8Url:
    """400 for a path or query string whose percent-escapes are not UTF-8. Left alone, they
    would be decoded with U+FFFD replacement characters and searched for as text."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            for part, raw in (
                ("path", scope.get("raw_path") or b""),
                ("query string", scope.get("query_string", b"")),
            ):
                try:
                    unquote_to_bytes(raw).decode("utf-8")
                except UnicodeDecodeError:
                    await send_error(
                        send,
                        400,
                        f"the URL's {part} is not valid UTF-8: percent-encode text as UTF-8",
                    )
                    return
        await self.app(scope, receive, send)


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key.lower() == name:
            return bytes(value).decode("latin-1").strip()
    return None
