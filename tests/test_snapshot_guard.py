"""A re-index that cannot wipe the index by accident (issue 25): a catalog with no valid row is
refused, and one that removes more than ATTEND_MAX_DELETE_FRACTION of the books needs
--allow-mass-delete (admin API: "allow_mass_delete"); either refusal writes nothing. The real
`attend index` in a subprocess, and the admin API, on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError
from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session

from conftest import ATTEND, FakeEncoder, index_books, write_jsonl
from indexer import db, pipeline, snapshot_guard, store
from indexer.data import DEMO_CATALOG
from indexer.schema import Generation
from indexer.settings import IndexSettings
from service.api.main import create_app
from service.config.settings import ServiceSettings

TOKEN = "s3cret-admin-token-0123"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
BOOKS: list[dict[str, object]] = [
    {"id": f"b{i}", "title": f"Book {i}", "description": f"words of book {i}"} for i in range(30)
]


def _index(env: dict[str, str], *args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [ATTEND, "index", *map(str, args)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _edited_demo(folder: Path) -> Path:
    """The demo catalog with its last book's title edited: an index of one's own, which the
    guard keeps (the demo's as it ships is replaced whole: test_mutations_mass_delete)."""
    books = [json.loads(line) for line in DEMO_CATALOG.read_text(encoding="utf-8").splitlines()]
    books[-1]["title"] = f"{books[-1]['title']} (edited)"  # not among the third's 60
    return write_jsonl(folder / "edited_demo.jsonl", books)


def _state(url: str) -> tuple[int | None, int, int]:
    """The active generation, its books, and how many generations the database holds."""
    engine = db.create_db_engine(url)
    try:
        with Session(engine) as session:
            active = store.active_generation_id(session=session)
            generations = session.scalar(select(func.count()).select_from(Generation)) or 0
            return active, store.count_books(session=session), generations
    finally:
        engine.dispose()


@pytest.mark.model
def test_attend_index_refuses_a_snapshot_that_would_wipe_the_index(
    database_url: str, tmp_path: Path
) -> None:
    # 180 books (fake encoder: the refusals come before it), one edited: no longer the demo
    # catalog as it ships, which a catalog of one's own may replace whole
    engine = db.create_db_engine(database_url)
    try:
        db.upgrade(engine)
        pipeline.run(
            IndexSettings(database_url=database_url),
            engine=engine,
            encoder=FakeEncoder(),
            path=_edited_demo(tmp_path),
        )
    finally:
        engine.dispose()
    assert _state(database_url) == (1, 180, 1)
    env = {**os.environ, "ATTEND_DATABASE_URL": database_url}

    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    header_only = tmp_path / "header.csv"
    header_only.write_text("id,title,description\n", encoding="utf-8")
    for catalog, extra in ((empty, ()), (header_only, ()), (header_only, ("--skip-invalid",))):
        done = _index(env, catalog, *extra)
        assert done.returncode == 2, (catalog, done.stdout, done.stderr)
        assert f"attend index: {catalog} holds no valid book" in done.stderr, done.stderr
        assert "nothing was written" in done.stderr and "Traceback" not in done.stderr
        assert done.stdout == ""
        assert _state(database_url) == (1, 180, 1)  # no generation, not even a failed one

    # (a gzip file under a .jsonl name is read by its content now: test_catalog_reader_exports)
    third = _third_of_the_demo(tmp_path)  # 120 of 180 books would go
    refused = _index(env, third)
    assert refused.returncode == 2, refused.stderr
    assert "would remove 120 of the index's 180 books (it holds 60 of them)" in refused.stderr
    assert "--allow-mass-delete" in refused.stderr and "Traceback" not in refused.stderr
    assert _state(database_url) == (1, 180, 1)

    allowed = _index(env, third, "--allow-mass-delete")
    assert allowed.returncode == 0, allowed.stderr
    assert "60 books: " in allowed.stdout and ", 120 removed, " in allowed.stdout
    assert _state(database_url) == (2, 60, 2)


def _third_of_the_demo(folder: Path) -> Path:
    rows = Path(DEMO_CATALOG).read_text(encoding="utf-8").splitlines(keepends=True)[:60]
    third = folder / "third.jsonl"
    third.write_text("".join(rows), encoding="utf-8")
    return third


def test_the_bound_is_a_setting_and_keep_missing_removes_nothing(
    engine: Engine, tmp_path: Path
) -> None:
    url = engine.url.render_as_string(hide_password=False)
    settings = IndexSettings(database_url=url)
    pipeline.run(settings, engine=engine, encoder=FakeEncoder(), path=_edited_demo(tmp_path))
    third = _third_of_the_demo(tmp_path)
    with pytest.raises(snapshot_guard.SnapshotRefusedError, match="would remove 120 of"):
        pipeline.run(settings, engine=engine, encoder=FakeEncoder(), path=third)
    kept = pipeline.run(
        settings, engine=engine, encoder=FakeEncoder(), path=third, keep_missing=True
    )
    assert (kept.removed, kept.generation) == (0, 1)
    loose = IndexSettings(database_url=url, max_delete_fraction=1.0)
    report = pipeline.run(loose, engine=engine, encoder=FakeEncoder(), path=third)
    assert (report.removed, report.activated, _state(url)[1]) == (120, True, 60)
    with pytest.raises(ValidationError, match="max_delete_fraction"):
        IndexSettings(database_url=url, max_delete_fraction=1.5)


def _wait_job(client: TestClient, job_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        job: dict[str, Any] = client.get(f"/admin/jobs/{job_id}", headers=AUTH).json()
        if job["state"] in ("succeeded", "failed"):
            return job
        time.sleep(0.05)
    raise AssertionError(f"job {job_id} did not finish")


def test_admin_reindex_refuses_an_empty_upload_and_a_mass_delete(
    engine: Engine, tmp_path: Path
) -> None:
    url = index_books(engine, tmp_path, BOOKS)
    settings = ServiceSettings(
        database_url=url, device="cpu", admin_token=TOKEN, generation_poll_s=0
    )
    with TestClient(create_app(settings, encoder=FakeEncoder())) as client:
        r = client.post("/admin/reindex", files={"catalog": ("books.jsonl", b"")}, headers=AUTH)
        assert r.status_code == 202, r.text
        job = _wait_job(client, r.json()["id"])
        assert job["state"] == "failed" and "holds no valid book" in job["error"], job
        assert client.get("/healthz").json()["catalog_size"] == 30

        one = write_jsonl(tmp_path / "one.jsonl", BOOKS[:1])
        r = client.post("/admin/reindex", json={"catalog": str(one)}, headers=AUTH)
        job = _wait_job(client, r.json()["id"])
        assert job["state"] == "failed", job
        assert "would remove 29 of the index's 30 books" in job["error"]
        assert '"allow_mass_delete": true' in job["error"]
        assert _state(url) == (1, 30, 1)

        body = {"catalog": str(one), "allow_mass_delete": True}
        r = client.post("/admin/reindex", json=body, headers=AUTH)
        job = _wait_job(client, r.json()["id"])
        assert job["state"] == "succeeded" and job["report"]["removed"] == 29, job
        assert client.get("/healthz").json()["catalog_size"] == 1

        # a few removals need no flag (b0 goes); an upload takes the flag as a form field
        few = "".join(json.dumps(b) + "\n" for b in BOOKS[1:])
        r = client.post("/admin/reindex", files={"catalog": ("b.jsonl", few)}, headers=AUTH)
        job = _wait_job(client, r.json()["id"])
        assert job["state"] == "succeeded" and job["report"]["removed"] == 1, job
        body = "".join(json.dumps(b) + "\n" for b in BOOKS[:1])
        r = client.post(
            "/admin/reindex",
            files={"catalog": ("c.jsonl", body)},
            data={"allow_mass_delete": "true"},
            headers=AUTH,
        )
        job = _wait_job(client, r.json()["id"])
        assert job["state"] == "succeeded" and job["report"]["removed"] == 29, job
