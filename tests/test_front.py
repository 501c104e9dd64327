"""The engine's front pins a request to the generation it started on: a swap while the request
waits for the worker is seen by the next request, never by this one; and the book-as-query work
waits its turn on the one worker beside the searches."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine

from conftest import FakeEncoder, InProcessShards, index_books
from service.api.main import create_app
from service.config.settings import ServiceSettings
from service.engine.batching import Slice
from service.engine.tickets import Call

BOOKS = [
    {"id": f"b{i}", "title": f"Book {i}", "description": f"a tale of {w}", "authors": [f"A{i}"]}
    for i, w in enumerate(["wizards", "the sea", "deserts", "wizards at sea", "gardens"] * 2)
]
NEW = {"id": "new", "title": "Wizards of the sea", "description": "a tale of wizards at sea"}
ASKED = {
    "similar": ("GET", "/books/b3/similar", {"params": {"k": 20}}),
    "recommend": ("POST", "/recommend", {"json": {"liked": ["b3"], "k": 20}}),
    "explain": ("GET", "/books/b3/explain", {"params": {"q": "wizards"}}),
}


def _waiting_calls(client: TestClient) -> int:
    return len(client.app.state.searcher.line._calls)  # type: ignore[attr-defined]


@pytest.mark.parametrize("keys", ["local", "shards"])
@pytest.mark.parametrize("kind", list(ASKED))
def test_a_swap_while_a_request_waits_is_not_seen_by_it(
    engine: Engine, tmp_path: Path, kind: str, keys: str
) -> None:
    """With the keys in this process, and on shards (`--engine ray`'s router over in-process
    shards: the new generation's keys on new shards, the pinned request on the old ones)."""
    url = index_books(engine, tmp_path, BOOKS)
    settings = ServiceSettings(database_url=url, device="cpu", generation_poll_s=0)
    method, path, kwargs = ASKED[kind]
    placement = InProcessShards() if keys == "shards" else None
    with TestClient(create_app(settings, encoder=FakeEncoder(), placement=placement)) as client:
        state = client.app.state  # type: ignore[attr-defined]
        before = state.searcher.index
        gate, busy = threading.Event(), threading.Event()
        state.searcher.line.call(Call(lambda: (busy.set(), gate.wait(30))))  # the worker, held
        assert busy.wait(30)
        answer: dict[str, Any] = {}
        asking = threading.Thread(
            target=lambda: answer.setdefault("r", client.request(method, path, **kwargs))
        )
        asking.start()
        deadline = time.monotonic() + 30
        while _waiting_calls(client) == 0:  # the request has pinned its index, and waits
            assert time.monotonic() < deadline and asking.is_alive()
            time.sleep(0.01)
        (tmp_path / "next").mkdir()
        revised = [{**b, "title": "Book 3, revised"} if b["id"] == "b3" else b for b in BOOKS]
        index_books(engine, tmp_path / "next", [*revised[1:], NEW])  # b0 out, "new" in
        assert state.watcher.check() or state.searcher.index is not before
        assert "new" in state.searcher.index.books.ids
        gate.set()
        asking.join(30)
        r: httpx.Response = answer["r"]
        assert r.status_code == 200, r.text
        after = client.request(method, path, **kwargs)
    if kind == "explain":  # the book as the generation it started on had it
        assert (r.json()["title"], after.json()["title"]) == ("Book 3", "Book 3, revised")
        return
    got = [h["id"] for h in r.json()["results"]]
    assert "b0" in got and "new" not in got  # the old generation, whole
    now = [h["id"] for h in after.json()["results"]]
    assert "new" in now and "b0" not in now


def test_book_as_query_work_takes_turns_with_searches(engine: Engine, tmp_path: Path) -> None:
    """With searches and a similar request waiting, the worker answers the call after at most
    one batch: it does not wait for the line of searches to empty. What the worker takes from
    the line is noted there, in its order (the clients' threads see their answers in any order:
    which thread wakes first is not the worker's doing)."""
    url = index_books(engine, tmp_path, BOOKS)
    settings = ServiceSettings(database_url=url, device="cpu", generation_poll_s=0)
    log: list[str] = []
    with TestClient(create_app(settings, encoder=FakeEncoder())) as client:
        line = client.app.state.searcher.line  # type: ignore[attr-defined]
        gate, busy = threading.Event(), threading.Event()
        line.call(Call(lambda: (busy.set(), gate.wait(30))))
        assert busy.wait(30)
        take: Callable[..., list[Slice] | Call | None] = line.next_batch

        def noted(*, wait: bool) -> list[Slice] | Call | None:  # what the worker takes, in turn
            work = take(wait=wait)
            if isinstance(work, Call):
                log.append("similar")
            elif work:
                log.append(f"{sum(s.stop - s.start for s in work)} queries")
            return work

        line.next_batch = noted
        threads = [
            threading.Thread(
                target=client.post,
                args=("/search",),
                kwargs={"json": {"queries": [q] * 32, "k": 1}},
            )
            for q in ("wizards", "sea", "deserts", "gardens")
        ]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 30
        while sum(ticket.left for ticket in line._waiting) < 128:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        similar = threading.Thread(target=client.get, args=("/books/b3/similar",))
        similar.start()
        while _waiting_calls(client) == 0:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        gate.set()
        for t in [*threads, similar]:
            t.join(30)
    assert "similar" in log, log
    before = log[: log.index("similar")]
    # the 128 queries are answered in batches of at most 64: the call came after one batch at most
    assert sum(int(entry.split()[0]) for entry in before) <= 64, log
    assert sum(int(entry.split()[0]) for entry in log if entry != "similar") == 128, log
