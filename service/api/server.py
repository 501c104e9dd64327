"""The HTTP server of `attend serve`: uvicorn with h11, and bounds that no client can lift.

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
import contextlib
import dataclasses
import errno
import json
import logging
import socket
from collections.abc import Iterator

import h11
import uvicorn
from starlette.types import ASGIApp, Receive, Scope, Send
from uvicorn.protocols.http.h11_impl import STATUS_PHRASES, H11Protocol

from service.api.connections import PerClient, Refusals, connection_bound
from service.api.guards import send_error
from service.config.settings import ServiceSettings

logger = logging.getLogger(__name__)

# uvicorn's exit status when its start-up (our lifespan: the model and the index) failed
STARTUP_FAILURE = 3


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


class PortUnavailableError(OSError):
    """The host and port `attend serve` was given cannot be listened on; the message says what
    to change."""


def bind(host: str, port: int) -> socket.socket:
    """A socket bound to `host:port`, before the model and the index load (3-54 s): a port in
    use fails at once, with what to do, instead of after the load with uvicorn's traceback-like
    `[Errno 98]`. It listens only once uvicorn starts, so a client meanwhile is refused, as
    before, rather than queued behind the load."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as e:
        raise PortUnavailableError(
            f"cannot listen on {host!r}: not an address or a known host name ({e.strerror}); "
            "give an interface with --host or ATTEND_HOST (e.g. 127.0.0.1)"
        ) from e
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as asyncio's create_server
    try:
        sock.bind(address)
    except OSError as e:
        sock.close()
        raise PortUnavailableError(_bind_problem(host, port, e)) from e
    return sock


def _bind_problem(host: str, port: int, e: OSError) -> str:
    where = f"{host}:{port}"
    if e.errno == errno.EADDRINUSE:
        return (
            f"port {port} is already in use on {host} (another `attend serve`?): stop it, or "
            f"serve on another port with --port N or ATTEND_PORT=N"
        )
    if e.errno == errno.EACCES:
        return (
            f"not allowed to listen on {where} (ports below 1024 need privileges): serve on "
            "another port with --port N or ATTEND_PORT=N"
        )
    if e.errno == errno.EADDRNOTAVAIL:
        return (
            f"cannot listen on {where}: {host} is not an address of this machine; give one of "
            "its interfaces with --host or ATTEND_HOST (e.g. 127.0.0.1, or 0.0.0.0 for all)"
        )
    return (
        f"cannot listen on {where} ({e.strerror}): check --host or ATTEND_HOST, and --port or "
        "ATTEND_PORT"
    )


def serve(app: ASGIApp, settings: ServiceSettings, sock: socket.socket) -> None:
    """Serve `app` on `sock` (bound by `bind` to the settings' host and port) until SIGINT or
    SIGTERM, within their limits."""
    server = _Server(server_config(app, settings))
    try:
        server.run(sockets=[sock])  # what uvicorn.run does, on our socket
    except KeyboardInterrupt:
        pass
    finally:
        sock.close()
    if not server.started:  # the lifespan failed, and logged why
        raise SystemExit(STARTUP_FAILURE)


def server_config(app: ASGIApp, settings: ServiceSettings) -> uvicorn.Config:
    """uvicorn's configuration of `attend serve`: the bounds of `settings` (the connections
    lowered to what the file limit allows), the protocol that keeps them, and the shutdown's
    grace, past which the requests still running are answered 503
    (service/api/client_gone.py)."""
    host, port = settings.host, settings.port
    limits = limits_of(settings)
    most = connection_bound(limits.max_connections)
    bounded = dataclasses.replace(
        limits,
        max_connections=most,
        max_connections_per_client=min(limits.max_connections_per_client, most),
    )
    logger.info(
        "bound %s:%d; headers ≤ %d bytes and %d fields, in %.0f s; bodies in %.0f s; "
        "≤ %d connections, %d per client address; serving once the index is loaded",
        host,
        port,
        bounded.max_header_bytes,
        bounded.max_headers,
        bounded.header_timeout_s,
        bounded.body_timeout_s,
        bounded.max_connections,
        bounded.max_connections_per_client,
    )
    return uvicorn.Config(
        MaxHeaders(app, bounded.max_headers),
        host=host,
        port=port,
        http=protocol_for(bounded),
        h11_max_incomplete_event_size=bounded.max_header_bytes,
        timeout_keep_alive=bounded.keep_alive_s,
        ws="none",  # no route is a WebSocket; an Upgrade header is then just a header
        lifespan="on",
        log_level=settings.log_level.lower(),
        log_config=None,  # uvicorn's loggers propagate to ours (configure_logging)
        access_log=False,  # service.api.telemetry logs every request, without its query string
        timeout_graceful_shutdown=bounded.shutdown_s,
    )


class _Server(uvicorn.Server):
    """uvicorn's server, which says where it serves once it does (with sockets of its caller's,
    uvicorn says nothing), and for which SIGTERM and SIGINT end a graceful shutdown, exit 0."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        # uvicorn raises the signal it shut down for again once it has restored the handlers it
        # found: the default one kills the process (-15), and under `--engine ray` Ray's exits
        # 15, both before the caller's clean-up (Ray's shutdown) ran. The shutdown was graceful.
        with super().capture_signals():
            yield
            self._captured_signals.clear()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        if self.started:
            host = f"[{self.config.host}]" if ":" in self.config.host else self.config.host
            logger.info("serving on http://%s:%d", host, self.config.port)
