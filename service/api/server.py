"""The HTTP server of `attend serve`: uvicorn with h11, bound to its socket, with the bounds of
service/api/bounded_h11.py (header size and count, read and send deadlines, connections in all
and per client address) and a shutdown's grace (`ATTEND_SHUTDOWN_S`).

h11 is pure Python and slower per request than httptools, but a search costs milliseconds of
encoder and attention work, beside which the parser's share is small (README "Serving").
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import logging
import socket
from collections.abc import Iterator

import uvicorn
from starlette.types import ASGIApp

from service.api.bounded_h11 import MaxHeaders, limits_of, protocol_for
from service.api.connections import connection_bound
from service.config.settings import ServiceSettings

logger = logging.getLogger(__name__)

# uvicorn's exit status when its start-up (our lifespan: the model and the index) failed
STARTUP_FAILURE = 3


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
