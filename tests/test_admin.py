"""Generations in a running service (real SQLite and PostgreSQL, fake encoder): the service
swaps in a generation another process activated, and the admin API re-indexes in the
background behind a bearer token."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient
from pydantic import ValidationError
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from conftest import FakeEncoder, write_jsonl
from indexer import loaded_index, pipeline
from indexer.settings import IndexSettings
from service.api.main import create_app
from service.config.settings import ServiceSettings

TOKEN = "s3cret-admin-token-0123"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
BOOKS = [
    {"id": "dl", "title": "Deep Learning", "description": "neural networks"},
    {"id": "dune", "title": "Dune", "description": "desert planet spice"},
    {"id": "hp", "title": "Harry Potter", "description": "wizard school magic"},
]
NEW_BOOK = {"id": "sea", "title": "The Old Man and the Sea", "description": "a fisherman at sea"}


class GatedEncoder(FakeEncoder):
    """Blocks on `gate` when asked to embed a text containing "GATED" (a book of a re-index),
    never for the queries of searches."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.waiting = threading.Event()

    def encode(self, texts: list[str]) -> torch.Tensor:
        if any("GATED" in t for t in texts):
            self.waiting.set()
            assert self.gate.wait(30)
        return super().encode(texts)


def _index(engine: Engine, path: Path) -> pipeline.IndexReport:
    settings = IndexSettings(database_url=engine.url.render_as_string(hide_password=False))
    return pipeline.run(settings, engine=engine, encoder=FakeEncoder(), path=path)


@pytest.fixture
def indexed(engine: Engine, tmp_path: Path) -> Engine:
    _index(engine, write_jsonl(tmp_path / "c.jsonl", BOOKS))
    return engine


def _settings(engine: Engine, **kwargs: Any) -> ServiceSettings:
    url = engine.url.render_as_string(hide_password=False)
    return ServiceSettings(database_url=url, device="cpu", **kwargs)


@pytest.fixture
def admin(indexed: Engine) -> Iterator[tuple[TestClient, GatedEncoder]]:
    encoder = GatedEncoder()
    settings = _settings(indexed, admin_token=TOKEN, generation_poll_s=0)
    with TestClient(create_app(settings, encoder=encoder)) as client:
        yield client, encoder
        encoder.gate.set()


def _wait_job(client: TestClient, job_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        job: dict[str, Any] = client.get(f"/admin/jobs/{job_id}", headers=AUTH).json()
        if job["state"] in ("succeeded", "failed"):
            return job
        time.sleep(0.05)
    raise AssertionError(f"job {job_id} did not finish")


def test_the_service_swaps_in_a_generation_activated_elsewhere(
    indexed: Engine, tmp_path: Path
) -> None:
    settings = _settings(indexed, generation_poll_s=0.05)
    with TestClient(create_app(settings, encoder=FakeEncoder())) as client:
        first = client.get("/search", params={"q": "fisherman sea"}).json()
        assert (first["generation"], first["catalog_size"]) == (1, 3)
        report = _index(indexed, write_jsonl(tmp_path / "c2.jsonl", [*BOOKS[1:], NEW_BOOK]))
        assert (report.added, report.removed, report.generation) == (1, 1, 2)
        deadline = time.monotonic() + 10
        while client.get("/healthz").json()["generation"] != 2:
            assert time.monotonic() < deadline, "the service never swapped to generation 2"
            time.sleep(0.05)
        now = client.get("/search", params={"q": "fisherman sea"}).json()
        assert (now["generation"], now["catalog_size"]) == (2, 3)
        assert now["results"][0]["id"] == "sea"
        assert "dl" not in {r["id"] for r in now["results"]}
        assert client.get("/books/dl").status_code == 404
        assert client.get("/books/sea").json()["title"] == NEW_BOOK["title"]
        # the diff, folded into the old index's own arrays, gave what a full load gives
        served = client.app.state.searcher.index  # type: ignore[attr-defined]
        with Session(indexed) as session:
            full = loaded_index.load_index(session=session, model=FakeEncoder.name)
        assert served.books == full.books
        for field, keys in full.keys.items():
            assert np.array_equal(served.keys.by_field[field].numpy(), keys)


def test_reindex_runs_in_the_background_one_job_at_a_time(
    admin: tuple[TestClient, GatedEncoder], tmp_path: Path
) -> None:
    client, encoder = admin
    gated = {"id": "gated", "title": "GATED book", "description": "held at the encoder"}
    path = write_jsonl(tmp_path / "next.jsonl", [*BOOKS, NEW_BOOK, gated])
    r = client.post("/admin/reindex", json={"catalog": str(path)}, headers=AUTH)
    assert r.status_code == 202, r.text
    job = r.json()
    assert r.headers["location"] == f"/admin/jobs/{job['id']}"
    assert encoder.waiting.wait(10)

    running = client.get(f"/admin/jobs/{job['id']}", headers=AUTH).json()
    assert running["state"] == "running" and running["progress"]["total"] == 5
    busy = client.post("/admin/reindex", json={"catalog": str(path)}, headers=AUTH)
    assert busy.status_code == 409 and job["id"] in busy.json()["detail"]
    search = client.get("/search", params={"q": "desert"})  # not blocked by the job
    assert search.status_code == 200 and search.json()["generation"] == 1

    encoder.gate.set()
    done = _wait_job(client, job["id"])
    assert done["state"] == "succeeded", done
    assert done["report"]["added"] == 2 and done["report"]["generation"] == 2
    assert done["progress"]["done"] == 5
    after = client.get("/search", params={"q": "fisherman sea"}).json()
    assert after["generation"] == 2 and after["catalog_size"] == 5
    metrics = client.get("/metrics").text
    for line in (
        "attend_index_generation 2.0",
        "attend_reindex_running 0.0",
        "attend_reindex_books_total 5.0",
        "attend_reindex_books_done 5.0",
    ):
        assert line in metrics.splitlines(), line


def test_reindex_from_an_uploaded_file(admin: tuple[TestClient, GatedEncoder]) -> None:
    client, _ = admin
    body = "".join(
        f'{{"id": "{b["id"]}", "title": "{b["title"]}"}}\n' for b in [BOOKS[0], NEW_BOOK]
    )
    r = client.post(
        "/admin/reindex",
        files={"catalog": ("books.jsonl", body.encode(), "application/x-ndjson")},
        data={"keep_missing": "true"},
        headers=AUTH,
    )
    assert r.status_code == 202, r.text
    done = _wait_job(client, r.json()["id"])
    assert done["state"] == "succeeded" and done["catalog"] == "books.jsonl"
    assert (done["report"]["added"], done["report"]["updated"]) == (1, 1)
    assert done["report"]["removed"] == 0  # keep_missing
    health = client.get("/healthz").json()
    assert isinstance(health.pop("index_id"), str)  # the database's, read at start-up
    assert health == {
        "status": "ok",
        "catalog_size": 4,
        "model": FakeEncoder.name,
        "device": "cpu",
        "generation": 2,
    }


def test_reindex_requests_that_name_no_catalog_are_422(
    admin: tuple[TestClient, GatedEncoder], tmp_path: Path
) -> None:
    client, _ = admin
    for body, message in (
        (
            {"catalog": str(tmp_path / "missing.jsonl")},
            "is not a .jsonl, .csv, .xlsx, .mrc or .xml file",
        ),
        ({"path": "x"}, "catalog: Field required"),
    ):
        r = client.post("/admin/reindex", json=body, headers=AUTH)
        assert r.status_code == 422 and message in r.json()["detail"], r.text
    r = client.post("/admin/reindex", files={"catalog": ("a.txt", b"x")}, headers=AUTH)
    assert r.status_code == 422 and ".jsonl, .csv, .xlsx, .mrc or .xml" in r.json()["detail"]
    bad = write_jsonl(tmp_path / "bad.jsonl", [{"id": "x"}])
    r = client.post("/admin/reindex", json={"catalog": str(bad)}, headers=AUTH)
    failed = _wait_job(client, r.json()["id"])
    assert failed["state"] == "failed" and "missing 'title'" in failed["error"]
    assert client.get("/admin/jobs/nope", headers=AUTH).status_code == 404


def test_admin_auth(
    admin: tuple[TestClient, GatedEncoder], caplog: pytest.LogCaptureFixture
) -> None:
    client, _ = admin
    caplog.set_level(logging.DEBUG)
    r = client.get("/admin/jobs/x")
    assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
    assert r.json() == {"detail": "this endpoint needs 'Authorization: Bearer <admin token>'"}
    assert client.get("/admin/jobs/x", headers={"Authorization": "Basic abc"}).status_code == 401
    wrong = client.post(
        "/admin/reindex", json={"catalog": "x"}, headers={"Authorization": "Bearer wrong"}
    )
    assert wrong.status_code == 403 and wrong.json() == {"detail": "wrong admin token"}
    assert client.get("/admin/jobs/x", headers=AUTH).status_code == 404
    assert TOKEN not in caplog.text


def test_without_a_token_there_is_no_admin_api(indexed: Engine) -> None:
    with TestClient(create_app(_settings(indexed), encoder=FakeEncoder())) as client:
        r = client.post("/admin/reindex", json={"catalog": "x"}, headers=AUTH)
        assert r.status_code == 404
        assert "/admin/reindex" not in client.get("/openapi.json").json()["paths"]


def test_a_short_token_is_refused() -> None:
    with pytest.raises(ValidationError, match="at least 16 characters"):
        ServiceSettings(admin_token="short")
    assert "short" not in repr(ServiceSettings(admin_token="x" * 16))


def _catalog_upload(n_books: int) -> bytes:
    """A JSONL catalog of n_books books, about 60 bytes a book."""
    rows = (f'{{"id": "b{i}", "title": "Book number {i} of the upload"}}\n' for i in range(n_books))
    return "".join(rows).encode()


def test_an_upload_past_the_configured_limit_is_413(indexed: Engine) -> None:
    """ATTEND_MAX_UPLOAD_BYTES bounds /admin/ bodies, declared (multipart with a Content-Length)
    or streamed (chunked): past it a 413 names the limit and no job starts; under it the upload
    is taken."""
    limit = 4_000
    settings = _settings(indexed, admin_token=TOKEN, generation_poll_s=0, max_upload_bytes=limit)
    big, small = _catalog_upload(100), _catalog_upload(20)  # ~5.9 kB and ~1.2 kB
    with TestClient(create_app(settings, encoder=FakeEncoder())) as client:
        r = client.post("/admin/reindex", files={"catalog": ("books.jsonl", big)}, headers=AUTH)
        assert r.status_code == 413, r.text
        assert r.json() == {"detail": "the request body is larger than the limit of 4,000 bytes"}
        chunks = (big[i : i + 1000] for i in range(0, len(big), 1000))  # no Content-Length
        r = client.post(
            "/admin/reindex",
            content=chunks,
            headers={**AUTH, "content-type": "application/json"},
        )
        assert r.status_code == 413 and "4,000 bytes" in r.json()["detail"], r.text
        assert client.get("/healthz").json()["generation"] == 1  # nothing was re-indexed
        r = client.post("/admin/reindex", files={"catalog": ("books.jsonl", small)}, headers=AUTH)
        assert r.status_code == 202, r.text
        assert _wait_job(client, r.json()["id"])["state"] == "succeeded"


def test_the_default_upload_limit_is_the_documented_256_mib(indexed: Engine) -> None:
    """Without ATTEND_MAX_UPLOAD_BYTES, an upload declaring one byte past 268,435,456 (the
    README's default) is refused before any of it is read."""
    settings = _settings(indexed, admin_token=TOKEN, generation_poll_s=0)
    with TestClient(create_app(settings, encoder=FakeEncoder())) as client:
        declared = {"content-length": str(268_435_457), "content-type": "multipart/form-data"}
        r = client.post("/admin/reindex", content=b"", headers={**AUTH, **declared})
        assert r.status_code == 413, r.text
        assert "268,435,456 bytes" in r.json()["detail"]


def test_an_admin_reindex_runs_with_the_apps_settings_not_the_environment(
    engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The admin job's batch size, row bound and delete bound are the app's settings object's
    (startup.index_settings), not read again from the environment (issue 31): with the
    environment at the defaults and the app given a delete bound of 1 (off) and rows of 2 KiB,
    an upload removing 25 of 30 books is taken and its 3 kB row rejected."""
    books = [{"id": f"b{i}", "title": f"Book {i}", "description": "a tale"} for i in range(30)]
    _index(engine, write_jsonl(tmp_path / "c.jsonl", books))
    for name, value in {"MAX_DELETE_FRACTION": "0.5", "MAX_ROW_BYTES": "1048576"}.items():
        monkeypatch.setenv(f"ATTEND_{name}", value)
    monkeypatch.setenv("ATTEND_BATCH_SIZE", "256")
    settings = _settings(
        engine,
        admin_token=TOKEN,
        generation_poll_s=0,
        max_delete_fraction=1.0,
        max_row_bytes=2048,
        batch_size=7,
    )
    long_row = {"id": "long", "title": "Long", "description": "word " * 600}  # 3 kB
    upload = "".join(json.dumps(b) + "\n" for b in [*books[:5], long_row])
    with TestClient(create_app(settings, encoder=FakeEncoder())) as client:
        jobs = client.app.state.jobs  # type: ignore[attr-defined]
        assert (jobs.settings.batch_size, jobs.settings.max_row_bytes) == (7, 2048)
        r = client.post(
            "/admin/reindex",
            files={"catalog": ("books.jsonl", upload.encode())},
            data={"skip_invalid": "true"},
            headers=AUTH,
        )
        assert r.status_code == 202, r.text
        done = _wait_job(client, r.json()["id"])
    assert done["state"] == "succeeded", done
    assert (done["report"]["removed"], done["report"]["rejected"]) == (25, 1)
    assert done["progress"]["total"] == 5


def test_a_gzip_upload_is_bounded_decompressed_and_a_broken_one_is_named(indexed: Engine) -> None:
    """A gzipped upload (known by its bytes, whatever its name) is bounded by
    ATTEND_MAX_UPLOAD_BYTES as it decompresses too: a small body that inflates past the limit
    is a 413 naming it and starts no job, one that stays under it is indexed, and a broken one
    is a 422 naming the file; never a 500."""
    import gzip

    limit = 4_000
    settings = _settings(indexed, admin_token=TOKEN, generation_poll_s=0, max_upload_bytes=limit)
    small = _catalog_upload(20)  # ~1.2 kB
    over = _catalog_upload(200)  # ~12 kB inflated, ~1 kB as gzip
    under = small + b"\n" * (limit - len(small))  # exactly the limit, inflated
    assert len(gzip.compress(over)) < limit and len(under) == limit
    with TestClient(create_app(settings, encoder=FakeEncoder())) as client:

        def upload(body: bytes) -> Any:
            files = {"catalog": ("books.jsonl", gzip.compress(body))}
            return client.post("/admin/reindex", files=files, headers=AUTH)

        r = upload(over)
        assert r.status_code == 413, r.text
        assert "4,000 bytes" in r.json()["detail"] and "books.jsonl" in r.json()["detail"]
        assert upload(under + b"\n").status_code == 413  # one byte past
        assert client.get("/healthz").json()["generation"] == 1  # no job ran
        broken = {"catalog": ("books.jsonl", gzip.compress(small)[:-12])}
        r = client.post("/admin/reindex", files=broken, headers=AUTH)
        assert r.status_code == 422 and "books.jsonl" in r.json()["detail"], r.text
        r = upload(under)
        assert r.status_code == 202, r.text
        assert _wait_job(client, r.json()["id"])["state"] == "succeeded"
