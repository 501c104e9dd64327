"""The bounds no client can lift, as uvicorn's h11 protocol keeps them (service/api/server.py
serves with it).

uvicorn's defaults (httptools) put no bound on a request's headers, and the cost of parsing them
grew with the square of their size: one 150 MiB header stalled every other request for 18 s.
Nothing timed out a client that sent its headers or body slowly, and nothing bounded the
connections, so about 20,000 idle ones used up the process's file descriptors. Here:

- **Header size**: h11 refuses (431) a request whose line and headers are still unfinished
  past `max_header_bytes`, so it buffers at most that plus one socket read (a whole header block
  that arrives in one read is parsed); its search for the end of a line is linear.
- **Header count**: at most `max_headers` headers, else 431, before the app sees the request.
- **Read timeouts**: a request's line and headers must arrive within `header_timeout_s` of the
  connection (or of the previous response), its body within `body_timeout_s` of the headers.
  They are deadlines, not idle timers, so a byte every few seconds does not keep a slot open.
- **Clients that do not read**: once a connection's output is past the transport's high-water
  mark, the client must take some of it within `send_timeout_s`, else the connection is cut
  and what it held freed (asyncio buffers a whole answer for a client that never reads: 100 of
  them took a replica from 889 to 2,402 MB).
- **Connections**: past `max_connections` open at once a new connection is closed as soon as it
  is accepted, and the file limit is raised (or the bound lowered) to leave room for the
  database, the model and logs; one address may hold at most `max_connections_per_client` of
  them (service/api/connections.py).

h11 is pure Python and slower per request than httptools, but a search costs milliseconds of
encoder and attention work, beside which the parser's share is small (README "Serving").
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging

import h11
from starlette.types import ASGIApp, Receive, Scope, Send
from uvicorn.protocols.http.h11_impl import STATUS_PHRASES, H11Protocol

from service.api.connections import PerClient, Refusals
from service.api.guards import send_error
from service.config.settings import ServiceSettings

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Limits:
    max_header_bytes: int
    max_headers: int
    header_timeout_s: float
    body_timeout_s: float
    keep_alive_s: int
    send_timeout_s: float
    shutdown_s: int
    max_connections: int
    max_connections_per_client: int


class MaxHeaders:
    """431 for a request with more than `limit` headers, before routing."""

    def __init__(self, app: ASGIApp, limit: int):
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and len(scope["headers"]) > self.limit:
            await send_error(send, 431, f"the request has more than {self.limit} headers")
            return
        await self.app(scope, receive, send)


def protocol_for(limits: Limits) -> type[H11Protocol]:
    """uvicorn's h11 protocol with `limits`' read deadlines and connection bounds (in all, and
    per client address)."""
    refused = Refusals(limits.max_connections, "%d connections open, the most allowed")
    per_client = PerClient(limits.max_connections_per_client)
    refused_client = Refusals(
        per_client.limit, "a client address holds %d connections, the most one may"
    )

    class BoundedH11Protocol(H11Protocol):
        # "headers": waiting for a request's line and headers; "body": for its body; "app":
        # the app has the request (no read deadline: the app decides how long it reads).
        _phase = "headers"
        _deadline: asyncio.TimerHandle | None = None
        _send_deadline: asyncio.TimerHandle | None = None  # while the output buffer is full
        _address: str | None = None  # the client's, while it counts towards its bound

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            if len(self.connections) > limits.max_connections:
                refused.note()
                transport.close()
                return
            address = self.client[0] if self.client else None  # None: a Unix socket
            if address is not None:
                if not per_client.admit(address):
                    refused_client.note()
                    transport.close()
                    return
                self._address = address
            self._arm(limits.header_timeout_s)

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            self._resumed()
            if self._address is not None:
                per_client.leave(self._address)
                self._address = None
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            self._follow()

        def pause_writing(self) -> None:
            super().pause_writing()
            if self._send_deadline is None:
                self._send_deadline = self.loop.call_later(limits.send_timeout_s, self._unread)

        def resume_writing(self) -> None:
            super().resume_writing()
            self._resumed()

        def _resumed(self) -> None:
            if self._send_deadline is not None:
                self._send_deadline.cancel()
                self._send_deadline = None

        def _unread(self) -> None:
            self._send_deadline = None
            if not self.transport.is_closing():
                logger.info(
                    "cut a connection whose client took none of its answer for %.0f s",
                    limits.send_timeout_s,
                )
                self.transport.abort()  # close() would keep the buffer until it is sent

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._follow()

        def send_400_response(self, msg: str) -> None:
            """uvicorn's answer to a request h11 cannot parse, as JSON like every other error,
            and 431 where the request line and headers passed max_header_bytes."""
            status, detail = 400, "the request is not valid HTTP/1.1"
            if len(self.conn.trailing_data[0]) > limits.max_header_bytes:
                status = 431
                detail = f"the request's headers are larger than {limits.max_header_bytes:,} bytes"
            logger.info("refused a request: %s", detail)
            body = json.dumps({"detail": detail}).encode()
            headers = [(b"content-type", b"application/json"), (b"connection", b"close")]
            for event in (
                h11.Response(status_code=status, headers=headers, reason=STATUS_PHRASES[status]),
                h11.Data(data=body),
                h11.EndOfMessage(),
            ):
                self.transport.write(self.conn.send(event) or b"")
            self.transport.close()

        def _follow(self) -> None:
            """Move the read deadline along with h11's view of the client's side."""
            state = self.conn.their_state
            if self._phase == "headers" and state is not h11.IDLE:
                self._phase = "body" if state is h11.SEND_BODY else "app"
                self._disarm()
                if self._phase == "body":
                    self._arm(limits.body_timeout_s)
            elif self._phase == "body" and state is not h11.SEND_BODY:
                self._phase = "app"
                self._disarm()
            elif self._phase == "app" and state is h11.IDLE:  # a keep-alive connection's next
                self._phase = "headers"
                self._arm(limits.header_timeout_s)

        def _arm(self, seconds: float) -> None:
            self._disarm()
            self._deadline = self.loop.call_later(seconds, self._timed_out)

        def _disarm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _timed_out(self) -> None:
            self._deadline = None
            if not self.transport.is_closing():
                logger.info("closed a connection slower than its %s deadline", self._phase)
                # an app waiting on the body is told http.disconnect (connection_lost)
                self.transport.close()

    return BoundedH11Protocol


def limits_of(settings: ServiceSettings) -> Limits:
    return Limits(
        max_header_bytes=settings.max_header_bytes,
        max_headers=settings.max_headers,
        header_timeout_s=settings.header_timeout_s,
        body_timeout_s=settings.body_timeout_s,
        keep_alive_s=settings.keep_alive_s,
        send_timeout_s=settings.send_timeout_s,
        shutdown_s=settings.shutdown_s,
        max_connections=settings.max_connections,
        max_connections_per_client=settings.max_connections_per_client,  # ≤ the bound: serve
    )
