"""The path of a request (a search, similar books, a recommendation, an explanation, a book by
id) through the rooms of the code: the API, then the engine, then the indexer's columns and
models, and back, never calling into a room it came from. Every Python call of the request, in
every thread (the route's, the searcher's worker), is recorded with a profiler, on a real index.
And each request is answered from the generation it started on, whatever swaps meanwhile."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine

from conftest import FakeEncoder, index_books
from service.api.main import create_app
from service.settings import ServiceSettings

ROOT = Path(__file__).resolve().parents[1]
# a room's rank: calls may only go to a room of a higher rank (or stay in their own)
ROOMS = {"service/api": 0, "service/engine": 1, "indexer": 2, "models": 3}
BOOKS = [
    {"id": f"b{i}", "title": f"Book {i}", "description": f"a tale of {w}", "authors": ["A"]}
    for i, w in enumerate(["wizards", "the sea", "deserts", "wizards at sea", "gardens"] * 4)
]


def _room(frame: FrameType | None) -> str | None:
    """The room of the nearest frame of ours, from `frame` outwards (None: none of ours)."""
    while frame is not None:
        path = Path(frame.f_code.co_filename)
        if path.is_relative_to(ROOT):
            where = path.relative_to(ROOT).as_posix()
            for room in ROOMS:
                if where.startswith(room + "/"):
                    return room
        frame = frame.f_back
    return None


class CallRecorder:
    """Records, while `recording`, each call from one room into another: (caller, callee)."""

    def __init__(self) -> None:
        self.recording = False
        self.crossings: list[tuple[str, str, str]] = []  # caller room, callee room, callee
        self.visited: dict[int, list[str]] = {}  # per thread: rooms in the order first entered
        self._lock = threading.Lock()

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if not self.recording or event != "call":
            return
        callee = _room(frame)
        if callee is None:
            return
        caller = _room(frame.f_back)
        with self._lock:
            visited = self.visited.setdefault(threading.get_ident(), [])
            if callee not in visited:
                visited.append(callee)
            if caller is not None and caller != callee:
                self.crossings.append((caller, callee, frame.f_code.co_qualname))


@pytest.fixture
def recorder() -> Iterator[CallRecorder]:
    record = CallRecorder()
    threading.setprofile(record)  # the threads started from here on: the app's and the worker's
    sys.setprofile(record)
    try:
        yield record
    finally:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]


REQUESTS = {
    "search": ("GET", "/search", {"params": {"q": "wizards at sea", "author": "a"}}),
    "similar": ("GET", "/books/b3/similar", {"params": {"k": 3}}),
    "recommend": ("POST", "/recommend", {"json": {"liked": ["b0", "b1"], "disliked": ["b2"]}}),
    "explain": ("GET", "/books/b3/explain", {"params": {"q": "wizards"}}),
    "book": ("GET", "/books/b3", {}),
}


@pytest.mark.parametrize("kind", list(REQUESTS))
def test_a_request_goes_down_through_the_rooms_and_back(
    engine: Engine, tmp_path: Path, recorder: CallRecorder, kind: str
) -> None:
    url = index_books(engine, tmp_path, BOOKS)
    settings = ServiceSettings(database_url=url, device="cpu", generation_poll_s=0)
    method, path, kwargs = REQUESTS[kind]
    with TestClient(create_app(settings, encoder=FakeEncoder())) as client:
        client.request(method, path, **kwargs)  # warm: caches, lazy imports
        recorder.recording = True
        response = client.request(method, path, **kwargs)
        recorder.recording = False
        (worker,) = [t.ident for t in threading.enumerate() if t.name == "attend-searcher"]
    assert response.status_code == 200 and response.json(), response.text
    # the request's thread enters the API, then the engine; the searcher's worker thread (and
    # on PostgreSQL the generation listener's) starts in the engine
    firsts = [rooms[0] for rooms in recorder.visited.values()]
    assert "service/api" in firsts and set(firsts) <= {"service/api", "service/engine"}
    # (the API may reach models first: its schemas normalise the query with models.text)
    assert any(r[0] == "service/api" and "service/engine" in r for r in recorder.visited.values())
    assert {"indexer", "models"} <= {room for r in recorder.visited.values() for room in r}
    upward = [c for c in recorder.crossings if ROOMS[c[1]] < ROOMS[c[0]]]
    assert not upward, upward  # e.g. the engine calling back into the API, models into the engine
    assert ("service/api", "service/engine") in {c[:2] for c in recorder.crossings}
    if kind != "book":  # a book by id is a database read: the indexer's store, no model
        assert ("service/engine", "models") in {c[:2] for c in recorder.crossings}
        # the torch work ran on the searcher's one worker, not in a thread of the API's
        assert "models" in recorder.visited.get(worker, []), recorder.visited
