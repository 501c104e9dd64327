"""Per-request telemetry: one log line and the request metrics for every HTTP request.

A plain ASGI middleware, outermost, so it also sees requests the guards refuse and errors that
become 500s. The line names the method, the path without its query string (search text is
logged only at DEBUG, by the searcher), the route template, the status and the latency; no header
is ever logged, so neither is an `Authorization: Bearer` admin token.
"""

from __future__ import annotations

import logging
import re
import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.api.metrics import Metrics, route_label

logger = logging.getLogger(__name__)
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def printable(path: str) -> str:
    """`path` (percent-decoded) with its control characters written `\\xNN`: a `%0A` in a
    URL made a line of its own in the plain-text log, one a client wrote."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", path)


class RequestTelemetry:
    def __init__(self, app: ASGIApp, *, metrics: Metrics):
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        t0 = time.perf_counter()
        arrived = dict(scope)  # the router and mounts update `scope` (route_label)
        status = 500  # what the client gets if the app raises before answering

        async def watched_send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, watched_send)
        finally:
            seconds = time.perf_counter() - t0
            route = route_label(scope, arrived)
            self.metrics.observe_request(scope["method"], route, status, seconds)
            logger.info(
                "%s %s %d %.1f ms",
                scope["method"],
                printable(scope["path"]),
                status,
                seconds * 1000,
                extra={
                    "method": scope["method"],
                    "path": scope["path"],
                    "route": route,
                    "status": status,
                    "latency_ms": round(seconds * 1000, 3),
                    "client": (scope.get("client") or ("", 0))[0],
                },
            )
