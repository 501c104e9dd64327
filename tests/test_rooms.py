"""The path of a request (a search, similar books, a recommendation, an explanation, a book by
id) through the rooms of the code: the API, then the engine, then (on a cluster) the shards
holding the keys, then the indexer's columns and models, and back, never calling into a room it
came from. Every Python call of the request, in every thread (the route's, the searcher's
worker), is recorded with a profiler, on a real index, with the keys in this process and with
them on shards: the router's code of `--engine ray` over in-process shards (`LocalShard`), and
over shards on a real local Ray Serve (`RayShard`, whose shards answer in their own processes)."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
from fastapi.testclient import TestClient
from httpx import Response
from sqlalchemy import Engine

from conftest import FakeEncoder, InProcessShards, index_books
from indexer.db import create_db_engine
from service.api.main import create_app
from service.config.settings import ServiceSettings

ROOT = Path(__file__).resolve().parents[1]
# a room's rank: calls may only go to a room of a higher rank (or stay in their own)
ROOMS = {
    "service/api": 0,
    "service/engine": 1,
    "service/cluster/shards": 2,
    "indexer": 3,
    "models": 4,
}
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

    def reset(self) -> None:
        with self._lock:
            self.crossings, self.visited = [], {}

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


def _walk(client: TestClient, recorder: CallRecorder, kind: str) -> tuple[Response, int]:
    """The request `kind` once to warm up (caches, lazy imports), then once recorded; its
    response and the searcher's worker thread."""
    method, path, kwargs = REQUESTS[kind]
    client.request(method, path, **kwargs)
    recorder.reset()
    recorder.recording = True
    response = client.request(method, path, **kwargs)
    recorder.recording = False
    (worker,) = [t.ident for t in threading.enumerate() if t.name == "attend-searcher"]
    return response, worker


def _assert_down_and_back(
    recorder: CallRecorder, kind: str, response: Response, worker: int, *, sharded: bool
) -> None:
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
    crossed = {c[:2] for c in recorder.crossings}
    assert ("service/api", "service/engine") in crossed
    if kind != "book":  # a book by id is a database read: the indexer's store, no model
        assert ("service/engine", "models") in crossed
        # the torch work ran on the searcher's one worker, not in a thread of the API's
        assert "models" in recorder.visited.get(worker, []), recorder.visited
    if kind in {"search", "similar", "recommend"}:  # they ask the keys: the shards', if sharded
        assert (("service/engine", "service/cluster/shards") in crossed) == sharded, crossed
        if sharded:  # the shards answer with the models' merges, and call nothing above them
            assert ("service/cluster/shards", "models") in crossed


@pytest.mark.parametrize("keys", ["local", "shards"])
@pytest.mark.parametrize("kind", list(REQUESTS))
def test_a_request_goes_down_through_the_rooms_and_back(
    engine: Engine, tmp_path: Path, recorder: CallRecorder, kind: str, keys: str
) -> None:
    url = index_books(engine, tmp_path, BOOKS)
    settings = ServiceSettings(database_url=url, device="cpu", generation_poll_s=0)
    placement = InProcessShards() if keys == "shards" else None
    with TestClient(create_app(settings, encoder=FakeEncoder(), placement=placement)) as client:
        response, worker = _walk(client, recorder, kind)
    _assert_down_and_back(recorder, kind, response, worker, sharded=keys == "shards")


@pytest.mark.own_process
def test_requests_on_ray_go_down_through_the_rooms_and_back(
    tmp_path: Path, recorder: CallRecorder
) -> None:
    """`--engine ray`: the router's app (this process) over 2 shards on a local Ray Serve, as
    `attend serve --engine ray` composes them (service/cluster/ray_serve.py) but for the HTTP
    server. The shards answer in their replicas' processes, so what is recorded is the router's
    walk: API, engine, the shards' clients (`RayShard`), models' merges."""
    pytest.importorskip("ray", reason="the ray engine is an extra: pip install 'attend[ray]'")
    import ray
    from ray import serve

    from service.cluster.ray_serve import APP_NAME, build_app
    from service.cluster.shards.placement import ShardPlacement

    url = index_books(create_db_engine(f"sqlite:///{tmp_path / 'ray.db'}"), tmp_path, BOOKS)
    settings = ServiceSettings(
        database_url=url, device="cpu", generation_poll_s=0, model=FakeEncoder.name, shards=2
    )
    ray.init(num_cpus=3, include_dashboard=False)
    try:
        serve.start(proxy_location="Disabled")
        serve.run(build_app(settings), name=APP_NAME, route_prefix=None)
        handles = [serve.get_deployment_handle(f"shard-{i}", app_name=APP_NAME) for i in (0, 1)]
        placement = ShardPlacement(handles, replicas=1, poll_s=0)
        with TestClient(create_app(settings, encoder=FakeEncoder(), placement=placement)) as client:
            for kind in REQUESTS:
                response, worker = _walk(client, recorder, kind)
                _assert_down_and_back(recorder, kind, response, worker, sharded=True)
    finally:
        serve.shutdown()  # type: ignore[no-untyped-call]
        ray.shutdown()
