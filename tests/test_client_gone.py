"""Issue 50 item 2: work for a client that hung up is dropped (service/api/client_gone.py), and
a shutdown waits ATTEND_SHUTDOWN_S for the rest. `attend serve`'s uvicorn configuration
(service/api/server.py `server_config`) in this process, over SQLite with an encoder that holds
one text until the test lets it go: a POST of many queries whose client leaves while its first
batch is held has none of its later queries encoded, the request is logged with status 499, and
the server answers the next client. A client that stays gets its whole answer. A request still
held when the shutdown's grace ends is answered 503 in JSON, and the server stops."""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import torch
import uvicorn
from sqlalchemy import Engine

from conftest import FakeEncoder, free_port, index_books
from service.api.client_gone import CLIENT_CLOSED
from service.api.main import create_app
from service.api.server import server_config
from service.config.settings import ServiceSettings

BOOKS: list[dict[str, object]] = [
    {"id": f"b{i}", "title": f"Book {i}", "description": f"about topic {i}"} for i in range(20)
]
MAX_BATCH = 4
QUERIES = ["HELD query", *(f"later query {i}" for i in range(23))]


class Held(FakeEncoder):
    """Records every text it encodes; holds a text with "HELD" in it until `go` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.go, self.holding = threading.Event(), threading.Event()
        self.seen: list[str] = []

    def encode(self, texts: list[str]) -> torch.Tensor:
        self.seen += texts
        if any("HELD" in t for t in texts):
            self.holding.set()
            assert self.go.wait(30)
        return super().encode(texts)


SHUTDOWN_S = 1


@pytest.fixture
def served(engine: Engine, tmp_path: Path) -> Iterator[tuple[int, Held, uvicorn.Server]]:
    url = index_books(engine, tmp_path, BOOKS)
    settings = ServiceSettings(
        database_url=url,
        device="cpu",
        generation_poll_s=0,
        max_batch=MAX_BATCH,
        host="127.0.0.1",
        port=free_port(),
        shutdown_s=SHUTDOWN_S,
    )
    encoder = Held()
    server = uvicorn.Server(server_config(create_app(settings, encoder=encoder), settings))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
        time.sleep(0.05)
    try:
        yield settings.port, encoder, server
    finally:
        encoder.go.set()
        server.should_exit = True
        thread.join(30)


def _post(port: int, queries: list[str]) -> socket.socket:
    """A POST /search of `queries` sent whole on a connection left open."""
    body = json.dumps({"queries": queries, "k": 3}).encode()
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(
        b"POST /search HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n"
        + f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )
    return s


def _logged(caplog: pytest.LogCaptureFixture, words: str, seconds: float = 10) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if any(words in r.getMessage() for r in caplog.records):
            return True
        time.sleep(0.02)
    return False


def test_a_client_that_leaves_has_its_waiting_queries_dropped(
    served: tuple[int, Held, uvicorn.Server], caplog: pytest.LogCaptureFixture
) -> None:
    port, encoder, _ = served
    caplog.set_level(logging.INFO)
    client = _post(port, QUERIES)
    assert encoder.holding.wait(30)  # its first batch is in the worker
    client.close()
    assert _logged(caplog, "the client left before its answer")
    assert _logged(caplog, f"POST /search {CLIENT_CLOSED} ")
    encoder.go.set()
    r = httpx.post(f"http://127.0.0.1:{port}/search", json={"queries": ["topic 3"]}, timeout=30)
    assert r.status_code == 200 and r.json()["responses"][0]["results"]
    asked = [t for t in encoder.seen if t in QUERIES]
    assert asked == QUERIES[:MAX_BATCH]  # the held batch finished; the rest never ran
    assert not any("Exception in ASGI application" in r.getMessage() for r in caplog.records)


def test_a_client_that_stays_gets_every_answer(
    served: tuple[int, Held, uvicorn.Server], caplog: pytest.LogCaptureFixture
) -> None:
    port, encoder, _ = served
    caplog.set_level(logging.INFO)
    encoder.go.set()
    r = httpx.post(f"http://127.0.0.1:{port}/search", json={"queries": QUERIES}, timeout=60)
    assert r.status_code == 200, r.text
    assert len(r.json()["responses"]) == len(QUERIES)
    assert [t for t in encoder.seen if t in QUERIES] == QUERIES
    with httpx.Client(base_url=f"http://127.0.0.1:{port}") as keep_alive:
        for i in range(20):  # answered whole, then the connection closed: no client left early
            assert keep_alive.get("/search", params={"q": f"topic {i}"}).status_code == 200
    assert _logged(caplog, "POST /search 200 ")
    assert not _logged(caplog, "the client left", seconds=0.5)


def test_a_request_past_the_shutdowns_grace_is_answered_503(
    served: tuple[int, Held, uvicorn.Server],
) -> None:
    port, encoder, server = served
    with contextlib.closing(_post(port, QUERIES[:1])) as client:
        assert encoder.holding.wait(30)
        t0 = time.monotonic()
        server.should_exit = True  # what SIGTERM does
        client.settimeout(SHUTDOWN_S + 20)
        answer = b""
        while b"\r\n\r\n" not in answer or not answer.endswith(b"}"):
            chunk = client.recv(65_536)  # the answer: the stop then waits for the held batch
            assert chunk, answer
            answer += chunk
        waited = time.monotonic() - t0
    encoder.go.set()
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 503 "), answer
    assert b"retry-after: 1" in head.lower()
    assert json.loads(body) == {"detail": "the service is stopping: ask again"}
    assert SHUTDOWN_S <= waited < SHUTDOWN_S + 5
