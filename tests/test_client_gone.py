"""Issue 50 item 2: work for a client that hung up is dropped (service/api/client_gone.py). A
real uvicorn server with the service's HTTP protocol, in this process, over SQLite with an
encoder that holds one text until the test lets it go: a POST of many queries whose client
leaves while its first batch is held has none of its later queries encoded, the request is
logged with status 499, and the server answers the next client. A client that stays gets its
whole answer."""

from __future__ import annotations

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
from service.api.server import limits_of, protocol_for
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


@pytest.fixture
def served(engine: Engine, tmp_path: Path) -> Iterator[tuple[int, Held]]:
    url = index_books(engine, tmp_path, BOOKS)
    settings = ServiceSettings(
        database_url=url, device="cpu", generation_poll_s=0, max_batch=MAX_BATCH
    )
    encoder = Held()
    port = free_port()
    config = uvicorn.Config(
        create_app(settings, encoder=encoder),
        host="127.0.0.1",
        port=port,
        http=protocol_for(limits_of(settings)),
        lifespan="on",
        log_config=None,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
        time.sleep(0.05)
    try:
        yield port, encoder
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
    served: tuple[int, Held], caplog: pytest.LogCaptureFixture
) -> None:
    port, encoder = served
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
    served: tuple[int, Held], caplog: pytest.LogCaptureFixture
) -> None:
    port, encoder = served
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
