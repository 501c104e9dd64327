"""Issue 16: the database changing under a running service is noticed, never served stale.

A database dropped and re-created (generation ids from 1 again) is reloaded by its identity;
a SQLite file deleted, truncated or overwritten makes /readyz and the request paths answer 503
with a message, and a re-index into a deleted file fails instead of "succeeding" into it.
Real databases (SQLite files, PostgreSQL databases), the app's real lifespan."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.orm import Session

from conftest import PG_URL, FakeEncoder, index_books, write_jsonl
from indexer import db, pipeline, store
from indexer.settings import IndexSettings
from service.api.main import create_app
from service.config.settings import ServiceSettings

OLD: list[dict[str, object]] = [
    {"id": "removed", "title": "Dragons of the river", "description": "A dragon by a river."},
    {"id": "kept", "title": "Castles", "description": "Stone castles on hills."},
]
NEW: list[dict[str, object]] = [
    {"id": "kept", "title": "Castles", "description": "Stone castles on hills."},
    {"id": "fresh", "title": "Forests", "description": "Old forests and their shadows."},
]


@contextmanager
def _serve(url: str) -> Iterator[TestClient]:
    """The app on `url`, polling off: each test calls the watcher's check when it wants it."""
    settings = ServiceSettings(database_url=url, device="cpu", generation_poll_s=0)
    with TestClient(create_app(settings, encoder=FakeEncoder())) as client:
        yield client


def _ids(client: TestClient, q: str) -> set[str]:
    r = client.get("/search", params={"q": q, "k": 10})
    assert r.status_code == 200, r.text
    return {hit["id"] for hit in r.json()["results"]}


def _sqlite_file(engine: Engine) -> Path:
    assert engine.dialect.name == "sqlite" and engine.url.database
    return Path(engine.url.database)


def _remove_sqlite(path: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


def test_every_database_gets_its_own_index_id(database_url: str, tmp_path: Path) -> None:
    engine = db.create_db_engine(database_url)
    other = db.create_db_engine(f"sqlite:///{tmp_path / 'other.db'}")
    try:
        db.upgrade(engine)
        db.upgrade(other)
        with Session(engine) as a, Session(other) as b:
            first, second = store.index_id(session=a), store.index_id(session=b)
        assert first and second and first != second and len(first) == 32
        db.downgrade(engine, "0002")
        with Session(engine) as a:
            assert store.index_id(session=a) is None
        db.upgrade(engine)
        with Session(engine) as a:
            assert store.index_id(session=a) not in (None, first)  # a new identity
    finally:
        engine.dispose()
        other.dispose()


def _recreate(engine: Engine, tmp_path: Path) -> None:
    """The database at `engine`'s URL replaced by a new, empty one of the same name."""
    if engine.dialect.name == "sqlite":
        _remove_sqlite(_sqlite_file(engine))
        return
    assert PG_URL
    name = engine.url.database
    admin = create_engine(PG_URL, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE "{name}" WITH (FORCE)'))
            conn.execute(text(f'CREATE DATABASE "{name}"'))
    finally:
        admin.dispose()


def test_a_re_created_database_is_reloaded_whatever_its_generation_ids(
    engine: Engine, tmp_path: Path
) -> None:
    """Dropped, re-created and re-indexed, the new index is at generation 1 again: the server
    once compared generation ids only, never reloaded and kept finding a removed book."""
    url = index_books(engine, tmp_path, OLD)
    with _serve(url) as client:
        assert "removed" in _ids(client, "dragon river")
        _recreate(engine, tmp_path)
        fresh = db.create_db_engine(url)
        try:
            db.upgrade(fresh)
            (tmp_path / "again").mkdir()
            index_books(fresh, tmp_path / "again", NEW)
            with Session(fresh) as session:
                assert store.active_generation_id(session=session) == 1  # as the old one was
        finally:
            fresh.dispose()
        r = client.get("/readyz")
        assert r.status_code == 503 and "replaced" in r.json()["detail"]
        assert client.app.state.watcher.check()  # type: ignore[attr-defined]
        assert client.get("/readyz").status_code == 200
        found = _ids(client, "dragon river forests castles")
        assert "removed" not in found and {"kept", "fresh"} <= found
        assert client.get("/books/removed").status_code == 404
        assert client.get("/books/fresh").status_code == 200


def test_a_re_created_empty_database_is_not_served_stale(engine: Engine, tmp_path: Path) -> None:
    url = index_books(engine, tmp_path, OLD)
    with _serve(url) as client:
        _recreate(engine, tmp_path)
        fresh = db.create_db_engine(url)
        try:
            db.upgrade(fresh)  # a new schema, no generation yet
        finally:
            fresh.dispose()
        assert client.app.state.watcher.check()  # type: ignore[attr-defined]
        assert client.get("/healthz").json()["catalog_size"] == 0
        assert client.get("/readyz").status_code == 503


def test_a_deleted_sqlite_file_is_not_ready_and_not_written_to(tmp_path: Path) -> None:
    """/readyz once said 200 and an admin re-index "succeeded" into the deleted file (the
    pool's connections keep it open)."""
    url = f"sqlite:///{tmp_path / 'attend.db'}"
    engine = db.create_db_engine(url)
    try:
        db.upgrade(engine)
        index_books(engine, tmp_path, OLD)
        with _serve(url) as client:
            assert client.get("/readyz").status_code == 200
            _remove_sqlite(_sqlite_file(engine))
            r = client.get("/readyz")
            assert r.status_code == 503 and "gone" in r.json()["detail"], r.text
            r = client.get("/books/kept")
            assert r.status_code == 503 and "database" in r.json()["detail"]
            assert client.get("/books/kept/explain", params={"q": "castle"}).status_code == 503
        # the service's own engine (an admin re-index uses it) refuses the deleted file
        catalog = write_jsonl(tmp_path / "new.jsonl", NEW)
        with pytest.raises(db.DatabaseGoneError, match="gone"):
            pipeline.run(
                IndexSettings(database_url=url), engine=engine, encoder=FakeEncoder(), path=catalog
            )
        assert not _sqlite_file(engine).exists()  # nothing made a new, empty file either
    finally:
        engine.dispose()


# Only truncation: a file overwritten in place with bytes of its own length is told by SQLite's
# errors once its page cache rereads, not at checkout. Reading the header there opened and
# closed the file, which drops every POSIX lock the process holds on it (SQLite's WAL read
# locks too): the Ray router then never saw a re-index (tests/test_ray_serve.py).
@pytest.mark.parametrize("damage", ["truncated"])
def test_a_damaged_sqlite_file_answers_503_with_a_message(tmp_path: Path, damage: str) -> None:
    """Truncated in place (the same file): /readyz checks the schema, where `SELECT 1` said
    200 while /books and /explain answered 500."""
    url = f"sqlite:///{tmp_path / 'attend.db'}"
    engine = db.create_db_engine(url)
    try:
        db.upgrade(engine)
        index_books(engine, tmp_path, OLD)
    finally:
        engine.dispose()
    path = tmp_path / "attend.db"
    with _serve(url) as client:
        assert client.get("/readyz").status_code == 200
        for suffix in ("-wal", "-shm"):  # the checkpointed log would repair the damage
            Path(f"{path}{suffix}").unlink(missing_ok=True)
        with path.open("r+b") as f:
            if damage == "truncated":
                f.truncate(0)
            else:
                f.write(os.urandom(path.stat().st_size))
        r = client.get("/readyz")
        assert r.status_code == 503, r.text
        assert "database" in r.json()["detail"]
        for route in ("/books/kept", "/books/kept/explain?q=castle"):
            r = client.get(route)
            assert r.status_code == 503, (route, r.text)
            assert "database" in r.json()["detail"]


def test_a_generation_the_database_no_longer_holds_is_not_ready(
    engine: Engine, tmp_path: Path
) -> None:
    url = index_books(engine, tmp_path, OLD)
    with _serve(url) as client:
        with engine.begin() as conn:  # an operator's mistake: the served generation removed
            conn.execute(text("DELETE FROM version_vectors"))
            conn.execute(text("DELETE FROM book_versions"))
            conn.execute(text("DELETE FROM generations"))
        r = client.get("/readyz")
        assert r.status_code == 503 and "generation 1" in r.json()["detail"]


@pytest.mark.postgres
@pytest.mark.skipif(not PG_URL, reason="ATTEND_TEST_POSTGRES_URL is not set")
def test_a_dropped_postgresql_database_answers_503_with_a_message(tmp_path: Path) -> None:
    """The database gone under the service: the request paths that read it say so (503),
    where they answered 500; searches still answer from the keys in memory."""
    from conftest import new_database

    with new_database("postgresql", tmp_path) as url:
        engine = db.create_db_engine(url)
        try:
            db.upgrade(engine)
            index_books(engine, tmp_path, OLD)
        finally:
            engine.dispose()
        with _serve(url) as client:
            assert client.get("/books/kept").status_code == 200
            admin = create_engine(PG_URL, isolation_level="AUTOCOMMIT")  # type: ignore[arg-type]
            try:
                with admin.connect() as conn:
                    name = db.create_db_engine(url).url.database
                    conn.execute(text(f'DROP DATABASE "{name}" WITH (FORCE)'))
            finally:
                admin.dispose()
            for route in ("/readyz", "/books/kept", "/books/kept/explain?q=castle"):
                r = client.get(route)
                assert r.status_code == 503, (route, r.text)
                assert "database" in r.json()["detail"]
            assert "kept" in _ids(client, "stone castles")  # from the keys in memory


def test_a_database_down_is_logged_once_per_outage_without_a_traceback(
    engine: Engine, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The watcher polled on, logging a full traceback every poll while the database was down
    (a SQLite file deleted, a PostgreSQL database dropped)."""
    import logging
    import time

    from service.engine.reloader import GenerationWatcher

    url = index_books(engine, tmp_path, OLD)
    with _serve(url) as client:
        searcher = client.app.state.searcher  # type: ignore[attr-defined]
        watcher = GenerationWatcher(
            engine=engine, searcher=searcher, build=lambda *_: searcher.index, poll_s=0.02
        )
        if engine.dialect.name == "sqlite":
            _remove_sqlite(_sqlite_file(engine))
        else:
            assert PG_URL
            admin = create_engine(PG_URL, isolation_level="AUTOCOMMIT")
            try:
                with admin.connect() as conn:
                    conn.execute(text(f'DROP DATABASE "{engine.url.database}" WITH (FORCE)'))
            finally:
                admin.dispose()
        with caplog.at_level(logging.INFO, logger="service.engine.reloader"):
            watcher.start()
            time.sleep(0.5)  # about 25 polls
            watcher.close()
    records = [r for r in caplog.records if r.name == "service.engine.reloader"]
    assert [r.levelname for r in records] == ["WARNING"], records
    assert "does not answer" in records[0].getMessage() and records[0].exc_info is None
