"""Issue 48 item 3: single-book writes on the admin API. PUT /admin/books/{id} writes one book
and POST /admin/books a batch, each a generation of its own with every other book kept, the book
checked as a catalog row first (a 422 naming its problems); DELETE /admin/books/{id} removes one
at once; each needs the admin token. A write while a job runs joins the one queued write job,
which writes every book it gathered (up to MAX_QUEUED_BOOKS) when the running job ends; a delete
or a re-index waits (409). On both databases, the written books searchable when the job
succeeds."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from fastapi.testclient import TestClient
from sqlalchemy import Engine

from conftest import FakeEncoder, finished_job, index_books
from service.api.main import create_app
from service.config.settings import ServiceSettings
from service.engine.reindex_jobs import MAX_QUEUED_BOOKS, ReindexJobs

TOKEN = "books-admin-token-0123456"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
BOOKS: list[dict[str, object]] = [
    {"id": "dune", "title": "Dune", "authors": ["Frank Herbert"], "description": "desert spice"},
    {"id": "emma", "title": "Emma", "authors": ["Jane Austen"], "description": "a matchmaker"},
]


class Gated(FakeEncoder):
    """Holds the embedding of a text with "GATED" in it until `gate` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.gate, self.waiting = threading.Event(), threading.Event()

    def encode(self, texts: list[str]) -> torch.Tensor:
        if any("GATED" in t for t in texts):
            self.waiting.set()
            assert self.gate.wait(30)
        return super().encode(texts)


@pytest.fixture
def admin(engine: Engine, tmp_path: Path) -> Iterator[tuple[TestClient, Gated]]:
    url = index_books(engine, tmp_path, BOOKS)
    settings = ServiceSettings(
        database_url=url, device="cpu", admin_token=TOKEN, generation_poll_s=0
    )
    encoder = Gated()
    with TestClient(create_app(settings, encoder=encoder)) as client:
        yield client, encoder
        encoder.gate.set()


def _done(client: TestClient, r: Any) -> dict[str, Any]:
    assert r.status_code == 202, r.text
    assert r.headers["location"] == f"/admin/jobs/{r.json()['id']}"
    job = finished_job(client, r.json()["id"], AUTH)
    assert job["state"] == "succeeded", job
    return job


def test_a_book_put_is_searchable_and_the_others_stay(admin: tuple[TestClient, Gated]) -> None:
    client, _ = admin
    book = {"title": "Solaris", "authors": ["Stanislaw Lem"], "description": "an ocean planet"}
    job = _done(client, client.put("/admin/books/solaris", json=book, headers=AUTH))
    assert (job["report"]["added"], job["report"]["removed"]) == (1, 0)
    assert client.get("/books/solaris").json()["title"] == "Solaris"
    assert client.get("/healthz").json()["catalog_size"] == 3
    hits = client.get("/search", params={"q": "ocean planet", "k": 1}).json()["results"]
    assert hits[0]["id"] == "solaris"
    again = {**book, "title": "Solaris (new translation)"}
    job = _done(client, client.put("/admin/books/solaris", json=again, headers=AUTH))
    assert (job["report"]["added"], job["report"]["updated"]) == (0, 1)
    assert client.get("/books/solaris").json()["title"] == "Solaris (new translation)"


def test_a_batch_is_one_generation(admin: tuple[TestClient, Gated]) -> None:
    client, _ = admin
    before = client.get("/healthz").json()["generation"]
    books = [{"id": f"b{i}", "title": f"Book {i}"} for i in range(3)]
    job = _done(client, client.post("/admin/books", json={"books": books}, headers=AUTH))
    assert job["report"]["added"] == 3 and job["report"]["generation"] == before + 1
    assert client.get("/healthz").json()["catalog_size"] == 5


def test_a_bad_book_is_a_422_naming_its_problems(admin: tuple[TestClient, Gated]) -> None:
    client, _ = admin
    for method, path, body, said in [
        ("put", "/admin/books/x", {"year": "soon"}, "'year' must be an integer"),
        ("put", "/admin/books/x", {"title": "T", "id": "y"}, "is not the path's 'x'"),
        ("put", "/admin/books/x", ["not", "a", "book"], "dict"),
        ("post", "/admin/books", {"books": [{"title": "No id"}]}, "book 1: missing 'id'"),
        ("post", "/admin/books", {"books": [{"id": "a", "title": "A"}] * 2}, "'a' twice"),
        ("post", "/admin/books", {"books": []}, "at least 1"),
        ("post", "/admin/books", {"books": [{"id": f"{i}", "title": "T"} for i in range(1001)]},
         "at most 1000"),
    ]:  # fmt: skip
        r = getattr(client, method)(path, json=body, headers=AUTH)
        assert r.status_code == 422 and said in r.json()["detail"], (body, r.text)
    assert client.get("/healthz").json()["catalog_size"] == 2  # nothing written


def test_a_delete_is_at_once_and_an_unknown_id_a_404(admin: tuple[TestClient, Gated]) -> None:
    client, _ = admin
    r = client.delete("/admin/books/emma", headers=AUTH)
    assert r.status_code == 200, r.text
    assert r.json()["removed"] == ["emma"]
    assert client.get("/books/emma").status_code == 404  # served without it when it answered
    assert client.get("/healthz").json()["catalog_size"] == 1
    assert client.delete("/admin/books/emma", headers=AUTH).status_code == 404


def test_every_write_needs_the_token_and_a_delete_waits_for_a_running_job(
    admin: tuple[TestClient, Gated],
) -> None:
    client, encoder = admin
    for method, path, body in [
        ("put", "/admin/books/x", {"title": "T"}),
        ("post", "/admin/books", {"books": [{"id": "x", "title": "T"}]}),
        ("delete", "/admin/books/dune", None),
    ]:
        kwargs = {} if body is None else {"json": body}
        assert getattr(client, method)(path, **kwargs).status_code == 401
    r = client.put("/admin/books/slow", json={"title": "GATED"}, headers=AUTH)
    assert r.status_code == 202 and encoder.waiting.wait(30)
    assert client.delete("/admin/books/dune", headers=AUTH).status_code == 409
    queued = client.put("/admin/books/y", json={"title": "Y"}, headers=AUTH)
    assert queued.status_code == 202 and queued.json()["state"] == "queued"
    assert client.delete("/admin/books/dune", headers=AUTH).status_code == 409  # queued: waits
    encoder.gate.set()
    assert finished_job(client, r.json()["id"], AUTH)["state"] == "succeeded"
    assert finished_job(client, queued.json()["id"], AUTH)["state"] == "succeeded"
    assert client.delete("/admin/books/dune", headers=AUTH).status_code == 200


def test_writes_while_a_job_runs_are_one_queued_generation(
    admin: tuple[TestClient, Gated],
) -> None:
    client, encoder = admin
    before = client.get("/healthz").json()["generation"]
    slow = client.put("/admin/books/slow", json={"title": "GATED"}, headers=AUTH)
    assert slow.status_code == 202 and encoder.waiting.wait(30)
    writes = [
        client.put("/admin/books/y", json={"title": "Y", "description": "first"}, headers=AUTH),
        client.put("/admin/books/z", json={"title": "Z"}, headers=AUTH),
        client.post(
            "/admin/books",
            json={"books": [{"id": "w", "title": "W"}, {"id": "y", "title": "Y again"}]},
            headers=AUTH,
        ),
    ]
    assert all(w.status_code == 202 for w in writes), [w.text for w in writes]
    assert len({w.json()["id"] for w in writes}) == 1  # one job
    assert all(w.json()["state"] == "queued" for w in writes)
    catalog = {"catalog": ("books.jsonl", b'{"id": "n", "title": "N"}\n')}
    reindex = client.post("/admin/reindex", files=catalog, headers=AUTH)
    assert reindex.status_code == 409 and "is queued" in reindex.json()["detail"], reindex.text
    encoder.gate.set()
    job = finished_job(client, writes[0].json()["id"], AUTH)
    assert job["state"] == "succeeded", job
    assert (job["report"]["added"], job["report"]["generation"]) == (3, before + 2)
    assert client.get("/books/y").json()["title"] == "Y again"  # the later write
    assert client.get("/healthz").json()["catalog_size"] == 6  # 2 + slow, y, z, w


def test_a_queued_job_holds_at_most_its_books(admin: tuple[TestClient, Gated]) -> None:
    client, encoder = admin
    slow = client.put("/admin/books/slow", json={"title": "GATED"}, headers=AUTH)
    assert slow.status_code == 202 and encoder.waiting.wait(30)
    books = [{"id": f"q{i}", "title": f"Q {i}"} for i in range(MAX_QUEUED_BOOKS - 1)]
    full = client.post("/admin/books", json={"books": books}, headers=AUTH)
    assert full.status_code == 202, full.text
    last = client.put("/admin/books/last", json={"title": "Last"}, headers=AUTH)
    assert last.status_code == 202 and last.json()["id"] == full.json()["id"]  # the cap's book
    over = client.put("/admin/books/over", json={"title": "O"}, headers=AUTH)
    assert over.status_code == 409 and "most books it takes (1,000)" in over.json()["detail"]
    again = client.put("/admin/books/q0", json={"title": "Q zero"}, headers=AUTH)  # no new book
    assert again.status_code == 202 and again.json()["id"] == full.json()["id"]
    encoder.gate.set()
    job = finished_job(client, full.json()["id"], AUTH)
    assert job["state"] == "succeeded" and job["report"]["added"] == MAX_QUEUED_BOOKS
    assert client.get("/books/q0").json()["title"] == "Q zero"
    assert client.get("/books/over").status_code == 404


def test_a_queued_job_never_starts_once_the_service_stops(
    admin: tuple[TestClient, Gated],
) -> None:
    client, encoder = admin
    slow = client.put("/admin/books/slow", json={"title": "GATED"}, headers=AUTH)
    assert slow.status_code == 202 and encoder.waiting.wait(30)
    queued = client.put("/admin/books/y", json={"title": "Y"}, headers=AUTH).json()
    jobs: ReindexJobs = client.app.state.jobs  # type: ignore[attr-defined]
    threading.Timer(0.3, encoder.gate.set).start()  # the running job ends while close waits
    jobs.close(timeout=30)  # what the service's shutdown calls
    assert finished_job(client, slow.json()["id"], AUTH)["state"] == "succeeded"
    job = client.get(f"/admin/jobs/{queued['id']}", headers=AUTH).json()
    assert job["state"] == "failed" and "write the books again" in job["error"]
    assert jobs.busy() is None
    assert client.get("/books/y").status_code == 404
