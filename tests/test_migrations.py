"""Alembic's history on real SQLite and PostgreSQL: empty → head → empty → head."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
import pytest
from sqlalchemy import func, inspect, select, text
from sqlalchemy.orm import Session

from indexer import db, loaded_index, store
from indexer.schema import Vector


def test_upgrade_from_empty_and_downgrade_to_empty(database_url: str) -> None:
    engine = db.create_db_engine(database_url)
    try:
        assert db.current_revision(engine) is None
        db.upgrade(engine)
        assert db.current_revision(engine) == db.head_revision()
        tables = set(inspect(engine).get_table_names())
        assert {
            "generations",
            "book_versions",
            "vectors",
            "version_vectors",
            "index_metadata",
            "alembic_version",
        } <= tables
        assert not {"books", "book_vectors"} & tables
        fks = {f["referred_table"]: f for f in inspect(engine).get_foreign_keys("version_vectors")}
        assert fks["book_versions"]["options"].get("ondelete") == "CASCADE"

        db.downgrade(engine, "base")
        assert db.current_revision(engine) is None
        assert set(inspect(engine).get_table_names()) <= {"alembic_version"}
        db.upgrade(engine)
        assert db.current_revision(engine) == db.head_revision()
    finally:
        engine.dispose()


def test_ensure_schema_creates_a_new_database_only_when_asked(database_url: str) -> None:
    engine = db.create_db_engine(database_url)
    try:
        with pytest.raises(db.SchemaError, match="attend db upgrade"):
            db.ensure_schema(engine, create_if_new=False)
        db.ensure_schema(engine, create_if_new=True)
        assert db.current_revision(engine) == db.head_revision()
        db.ensure_schema(engine, create_if_new=False)  # at head: nothing to say
    finally:
        engine.dispose()


def _vector(i: float) -> bytes:
    return np.full(4, i, dtype="<f4").tobytes()


def test_an_0001_index_becomes_generation_1_and_comes_back_on_downgrade(
    database_url: str,
) -> None:
    """Upgrade from 0001 with data: the books and their vectors (each distinct one stored once)
    are the active generation 1; downgrading to 0001 copies it back unchanged."""
    engine = db.create_db_engine(database_url)
    now = datetime.now(UTC)
    try:
        db.upgrade(engine, "0001")
        books = [
            {"id": f"b{i}", "title": f"T{i}", "description": None if i == 2 else f"D{i}"}
            for i in range(3)
        ]
        vectors = []
        for i, b in enumerate(books):
            desc = "same" if i == 2 else f"d{i}"  # a book without a description: title twice
            for role, field, h in (
                ("key", "title", "same" if i == 2 else f"t{i}"),
                ("key", "description", desc),
                ("value", "description", desc),
                ("key", "text", f"x{i}"),  # the single key of before per-field keys
            ):
                vectors.append(
                    {
                        "book_id": b["id"], "role": role, "field": field, "model": "m",
                        "dim": 4, "dtype": "float32", "content_hash": f"{h}{i}",
                        "data": _vector(10 * i + len(h)), "created_at": now,
                    }
                )  # fmt: skip
        with engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO books (id, title, description, authors, year, language, extra, "
                    "updated_at) VALUES (:id, :title, :description, '[]', 2000, 'en', '{}', :now)"
                ),
                [{**b, "now": now} for b in books],
            )
            conn.execute(
                text(
                    "INSERT INTO book_vectors VALUES (:book_id, :role, :field, :model, :dim, "
                    ":dtype, :content_hash, :data, :created_at)"
                ),
                vectors,
            )
            conn.execute(text("""INSERT INTO index_metadata VALUES ('model', '"m"')"""))

        db.upgrade(engine)
        with Session(engine) as session:
            index = loaded_index.load_index(session=session, model="m")
            assert index.ids == ["b0", "b1", "b2"] and index.generation == 1
            assert index.keys["title"][1].tolist() == [12.0] * 4  # "t1": 10·1 + 2
            assert index.keys["description"][2].tolist() == [24.0] * 4
            assert index.values is index.keys["description"]
            # 12 rows: each value shares its description key, b2 has one text for both keys
            assert session.scalar(select(func.count()).select_from(Vector)) == 12 - 3 - 1
            assert store.get_book(session=session, book_id="b2") is not None

        db.downgrade(engine, "0001")
        with engine.connect() as conn:
            assert conn.scalar(text("SELECT count(*) FROM books")) == 3
            rows = conn.execute(
                text("SELECT book_id, role, field, content_hash, data FROM book_vectors")
            ).all()
            assert sorted((r[0], r[1], r[2], r[3], bytes(r[4])) for r in rows) == sorted(
                (v["book_id"], v["role"], v["field"], v["content_hash"], v["data"]) for v in vectors
            )
        db.downgrade(engine, "base")
        assert set(inspect(engine).get_table_names()) <= {"alembic_version"}
    finally:
        engine.dispose()
