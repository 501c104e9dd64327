"""Alembic's history on real SQLite and PostgreSQL: empty → head → empty → head."""

from __future__ import annotations

import pytest
from sqlalchemy import inspect

from indexer import db


def test_upgrade_from_empty_and_downgrade_to_empty(database_url: str) -> None:
    engine = db.create_db_engine(database_url)
    try:
        assert db.current_revision(engine) is None
        db.upgrade(engine)
        assert db.current_revision(engine) == db.head_revision()
        tables = set(inspect(engine).get_table_names())
        assert {"books", "book_vectors", "index_metadata", "alembic_version"} <= tables
        fks = inspect(engine).get_foreign_keys("book_vectors")
        assert (
            fks[0]["referred_table"] == "books" and fks[0]["options"].get("ondelete") == "CASCADE"
        )

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
