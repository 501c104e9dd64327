"""Work for a client that has hung up is dropped: the request's task is cancelled.

uvicorn tells an app that its client left only when the app asks for more of the request
(`receive()` answers `http.disconnect`), and a route waiting on the searcher never asks: an
abandoned POST of 64 queries, or an explanation, ran to its end and was logged as 200 minutes
later, and a shutdown waited for all of it. Here, once the app has read the whole request body,
a watcher waits on `receive()` in its place; if the client leaves before the response is
complete, the request's task is cancelled. The searcher's queue drops a cancelled request's
queries not yet in a batch, and a cancelled book query is never run (service/engine/tickets.py);
a batch already in the worker finishes. The request is logged and counted with status 499, as
nginx names a request whose client closed it, and nothing is sent.

A request the server itself cancels (a shutdown past ATTEND_SHUTDOWN_S: uvicorn cancels what
still runs) is answered 503 with `Retry-After`, JSON like every error, where uvicorn would log a
traceback and answer a plain-text 500.

Not for a response that has completed: its background work (after the last byte) runs on.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.api.telemetry import printable

logger = logging.getLogger(__name__)

CLIENT_CLOSED = 499  # nginx's status for a request whose client closed the connection
STOPPING = 503


class DropWhenClientGone:
    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        read_whole = asyncio.Event()  # the app has the request's last body message
        gone: asyncio.Future[Message] = asyncio.get_running_loop().create_future()
        started = complete = False

        async def app_receive() -> Message:
            if read_whole.is_set():  # the watcher waits on the client; share what it hears
                return await asyncio.shield(gone)
            message = await receive()
            if message["type"] != "http.request" or not message.get("more_body", False):
                read_whole.set()
            return message

        async def app_send(message: Message) -> None:
            nonlocal started, complete
            if message["type"] == "http.response.start":
                started = True
            elif message["type"] == "http.response.body" and not message.get("more_body", False):
                complete = True
            await send(message)

        work = asyncio.ensure_future(self.app(scope, app_receive, app_send))

        async def watch() -> None:
            await read_whole.wait()
            message = await receive()  # returns at a disconnect, or once the response is sent
            if not gone.done():
                gone.set_result(message)
            if message["type"] == "http.disconnect" and not complete:
                work.cancel()

        watcher = asyncio.ensure_future(watch())
        where = printable(scope["path"])  # a client's path, escaped for the log
        try:
            await work
        except asyncio.CancelledError:
            if not gone.done():  # the server's: a shutdown past its grace (ATTEND_SHUTDOWN_S)
                if started:
                    raise
                logger.warning("%s %s: stopped before its answer", scope["method"], where)
                await _answer(send, STOPPING, {"detail": "the service is stopping: ask again"})
                return
            logger.info("%s %s: the client left before its answer", scope["method"], where)
            if not started:  # sends nothing to a closed connection; the log and metrics see it
                await _answer(send, CLIENT_CLOSED, None)
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher


async def _answer(send: Send, status: int, body: dict[str, str] | None) -> None:
    payload = b"" if body is None else json.dumps(body).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(payload)).encode()),
        (b"connection", b"close"),
        (b"retry-after", b"1"),
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": payload})
