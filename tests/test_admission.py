"""Fair admission of the work with books as the query (issue 25, finding 6): a bounded number of
similar-book and recommend requests at once, 429 with Retry-After past them, health and
readiness answered whatever fills the routes' thread pool or the book-query turns, a budget in
liked books × k × heads, and responses that name each liked book's title once.

Requests that must block are held inside the ranking (`Gate`) and waited on with events; a
thread that should have been answered at once is given a generous join, so a server without
the bound fails the test instead of hanging it.
"""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine

from conftest import serve_books
from service.api.admission import Turns
from service.api.search_schemas import MAX_SHOWN_AUTHORS, MAX_SHOWN_TITLE_CHARS
from service.engine import book_ranking

BOOKS: list[dict[str, object]] = [
    {"id": "dune", "title": "Dune Zqx", "description": "desert planet spice empire sandworms"},
    {"id": "messiah", "title": "Messiah Wvb", "description": "desert planet spice emperor"},
    {"id": "found", "title": "Foundation Kjh", "description": "galactic empire psychohistory"},
    {"id": "empire", "title": "Empire Plm", "description": "galactic empire mule"},
    {"id": "hobbit", "title": "Hobbit Rty", "description": "wizard dragon treasure"},
    {"id": "long", "title": "A very long title " * 300, "description": "wizard desert empire"},
]
ANSWERED_S = 30.0  # a request that must not wait is answered well within this


class Gate:
    """Stands in for `real`: every call waits, inside, until `opened` is set. As a context
    manager (inside the client's) it opens on the way out and waits for every request `send`
    started: the app must not stop under a request still in its worker's line."""

    def __init__(self, real: Callable[..., Any]):
        self.real = real
        self.inside = threading.Semaphore(0)  # released once per call that reached it
        self.opened = threading.Event()
        self.threads: list[threading.Thread] = []

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.inside.release()
        assert self.opened.wait(120), "the gate was never opened"
        return self.real(*args, **kwargs)

    def send(
        self, request: Callable[[], httpx.Response], done: threading.Semaphore | None = None
    ) -> tuple[threading.Thread, list[Any]]:
        """`request` sent from a thread of its own; its response lands in the list, and
        `done` is released once it has."""

        def send() -> None:
            answer.append(request())
            if done is not None:
                done.release()

        answer: list[Any] = []
        thread = threading.Thread(target=send, daemon=True)
        self.threads.append(thread)
        thread.start()
        return thread, answer

    def __enter__(self) -> Gate:
        return self

    def __exit__(self, *_: object) -> None:
        self.opened.set()
        for thread in self.threads:
            thread.join(120)


def answered(thread: threading.Thread, answer: list[Any]) -> httpx.Response:
    thread.join(ANSWERED_S)
    assert not thread.is_alive(), "the request waited instead of being answered"
    response: httpx.Response = answer[0]
    return response


@pytest.fixture
def gate(monkeypatch: pytest.MonkeyPatch) -> Gate:
    held = Gate(book_ranking.recommend)
    monkeypatch.setattr(book_ranking, "recommend", held)
    return held


def turns(engine: Engine, tmp_path: Path, queue: int = 0) -> AbstractContextManager[TestClient]:
    """The app with one book query at a time and `queue` waiting."""
    return serve_books(engine, tmp_path, BOOKS, book_query_concurrency=1, book_query_queue=queue)


def recommend(client: TestClient, *liked: str, **body: object) -> httpx.Response:
    return client.post("/recommend", json={"liked": list(liked), **body})


def test_past_the_turns_a_book_query_is_answered_429_with_retry_after(
    engine: Engine, tmp_path: Path, gate: Gate
) -> None:
    with turns(engine, tmp_path) as client, gate:
        first = gate.send(lambda: recommend(client, "dune"))
        assert gate.inside.acquire(timeout=ANSWERED_S)  # it ranks (held at the gate)
        for request in (
            lambda: recommend(client, "found"),
            lambda: client.get("/books/dune/similar"),  # the same turns
            lambda: client.get("/books/dune/explain", params={"q": "a desert"}),  # and these
        ):
            r = answered(*gate.send(request))
            assert r.status_code == 429, r.text
            assert int(r.headers["retry-after"]) >= 1
            assert "busy" in r.json()["detail"]
        gate.opened.set()
        assert answered(*first).status_code == 200


def test_a_request_may_wait_for_a_turn_in_the_queue(
    engine: Engine, tmp_path: Path, gate: Gate
) -> None:
    with turns(engine, tmp_path, queue=1) as client, gate:
        first = gate.send(lambda: recommend(client, "dune"))
        assert gate.inside.acquire(timeout=ANSWERED_S)
        # one of these two waits for the turn, the other finds the queue full: answered first
        done = threading.Semaphore(0)
        others = [gate.send(lambda: recommend(client, "found"), done) for _ in range(2)]
        assert done.acquire(timeout=ANSWERED_S), "neither was refused"
        assert [a[0].status_code for _, a in others if a] == [429]
        gate.opened.set()
        assert sorted(answered(*t).status_code for t in [first, *others]) == [200, 200, 429]


def test_health_and_readiness_answer_with_every_worker_thread_and_turn_taken(
    engine: Engine, tmp_path: Path, gate: Gate
) -> None:
    """/healthz and /readyz answer while the book-query turn is held and every thread of the
    routes' pool (FastAPI's plain `def` routes, anyio's default limiter) is busy: as `def`
    routes they queued there behind a /recommend flood for seconds."""

    async def pool_size() -> int:
        return int(anyio.to_thread.current_default_thread_limiter().total_tokens)

    busy, release = threading.Semaphore(0), threading.Event()

    def hold_a_thread() -> None:
        busy.release()
        release.wait(120)

    with turns(engine, tmp_path) as client, gate:
        assert client.portal is not None
        first = gate.send(lambda: recommend(client, "dune"))
        try:
            assert gate.inside.acquire(timeout=ANSWERED_S)
            threads = client.portal.call(pool_size)
            for _ in range(threads):
                client.portal.start_task_soon(anyio.to_thread.run_sync, hold_a_thread)
            for _ in range(threads):
                assert busy.acquire(timeout=ANSWERED_S)
            for path in ("/healthz", "/readyz"):
                r = answered(*gate.send(functools.partial(client.get, path)))
                assert r.status_code == 200, r.text
            assert answered(*gate.send(lambda: recommend(client, "found"))).status_code == 429
        finally:
            release.set()
        gate.opened.set()
        assert answered(*first).status_code == 200


def test_a_recommend_request_over_the_budget_is_422_naming_it(
    engine: Engine, tmp_path: Path
) -> None:
    with serve_books(engine, tmp_path, BOOKS, book_query_budget=100) as client:
        r = recommend(client, "dune", "found", k=10)  # 2 × 10 × 6 heads = 120
        assert r.status_code == 422
        detail = r.json()["detail"]
        assert "2 liked books × k=10 × 6 heads = 120" in detail
        assert "ATTEND_BOOK_QUERY_BUDGET" in detail
        # fewer heads fit; one liked book always does, as a similar-books request
        assert recommend(client, "dune", "found", k=10, heads="title:1").status_code == 200
        assert recommend(client, "dune", k=100).status_code == 200
        assert client.get("/books/dune/similar", params={"k": 100}).status_code == 200


def test_the_recommend_budget_parses_no_setting_per_request(
    engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ATTEND_SIMILAR_HEADS is parsed once per settings object (at the app's start), not by the
    budget check of every /recommend (issue 31): the settings' parser, counted from the start
    on, is not called again by any request, and the budget still counts the default's heads."""
    from service.config import ranking_settings as config

    calls: list[str] = []
    real = config.parse_heads

    def counted(text: str) -> dict[str, float]:
        calls.append(text)
        return real(text)

    with serve_books(engine, tmp_path, BOOKS, book_query_budget=100) as client:
        monkeypatch.setattr(config, "parse_heads", counted)
        for _ in range(3):
            assert recommend(client, "dune", "found", k=10).status_code == 422  # 6 heads: 120
            assert recommend(client, "dune", "found", k=8).status_code == 200  # 96
    assert calls == []


def test_a_recommendation_names_each_liked_title_once(engine: Engine, tmp_path: Path) -> None:
    with serve_books(engine, tmp_path, BOOKS) as client:
        r = recommend(client, "dune", "found", k=3, disliked=["hobbit"])
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["liked"] == [
        {"id": "dune", "title": "Dune Zqx"},
        {"id": "found", "title": "Foundation Kjh"},
    ]
    assert body["disliked"] == [{"id": "hobbit", "title": "Hobbit Rty"}]
    assert len(body["results"]) == 3
    for hit in body["results"]:
        assert {b["id"] for b in hit["because"]} == {"dune", "found"}
        assert all(set(b) == {"id", "share", "heads"} for b in hit["because"])
    assert r.text.count("Dune Zqx") == r.text.count("Foundation Kjh") == 1


def test_a_long_title_is_cut_in_ranked_answers_and_whole_in_the_book(
    engine: Engine, tmp_path: Path
) -> None:
    whole = str(BOOKS[-1]["title"]).strip()
    assert len(whole) > MAX_SHOWN_TITLE_CHARS
    shown = whole[: MAX_SHOWN_TITLE_CHARS - 1] + "…"
    with serve_books(engine, tmp_path, BOOKS) as client:
        search = client.get("/search", params={"q": "wizard desert empire", "k": 10}).json()
        similar = client.get("/books/long/similar").json()
        liked = recommend(client, "long", "dune").json()
        book = client.get("/books/long").json()
    assert [h["title"] for h in search["results"] if h["id"] == "long"] == [shown]
    assert similar["title"] == shown
    assert liked["liked"][0] == {"id": "long", "title": shown}
    assert book["title"] == whole


def test_the_heap_goes_back_once_a_burst_of_turns_ends() -> None:
    trimmed = threading.Event()

    async def burst() -> None:
        turns = Turns("tests", running=2, waiting=2, on_idle=trimmed.set)
        go = [asyncio.Event() for _ in range(3)]

        async def one(i: int) -> None:
            async with turns.turn():
                await go[i].wait()

        tasks = [asyncio.create_task(one(i)) for i in range(3)]
        while turns.held < 2:
            await asyncio.sleep(0)
        go[0].set()
        await tasks[0]  # its turn passes to the third, which holds it with the second
        assert turns.held == 2
        assert not trimmed.is_set()
        for event in go:
            event.set()
        await asyncio.gather(*tasks)
        assert await asyncio.to_thread(trimmed.wait, ANSWERED_S)

    asyncio.run(burst())


def test_a_hit_shows_its_first_authors_and_counts_the_rest(engine: Engine, tmp_path: Path) -> None:
    """Issue 50, finding 6: a book crediting thousands of names listed all of them in every
    hit. A hit, a similar book, a recommendation and a suggestion show MAX_SHOWN_AUTHORS, the
    book itself all of them; a book with exactly as many shows them all."""
    many = [f"Writer {i:05d}" for i in range(5_000)]
    edge = [f"Hand {i}" for i in range(MAX_SHOWN_AUTHORS)]
    books = [
        *BOOKS,
        {"id": "crowd", "title": "Crowd Wizard", "authors": many, "description": "a wizard"},
        {"id": "edge", "title": "Edge Wizard", "authors": edge, "description": "a wizard too"},
    ]
    with serve_books(engine, tmp_path, books) as client:
        hits = client.get("/search", params={"q": "wizard", "k": 20}).json()["results"]
        similar = client.get("/books/edge/similar", params={"k": 20}).json()["results"]
        liked = recommend(client, "edge", "dune", k=20).json()["results"]
        suggested = client.get("/suggest", params={"q": "crowd wiz"}).json()["titles"]
        book = client.get("/books/crowd").json()
    for found in (hits, similar, liked):
        crowd = next(h for h in found if h["id"] == "crowd")
        assert crowd["authors"] == many[:MAX_SHOWN_AUTHORS]
        assert crowd["more_authors"] == len(many) - MAX_SHOWN_AUTHORS
    shown = next(h for h in hits if h["id"] == "edge")
    assert shown["authors"] == edge and shown["more_authors"] == 0
    assert suggested[0]["authors"] == many[:MAX_SHOWN_AUTHORS]
    assert book["authors"] == many
