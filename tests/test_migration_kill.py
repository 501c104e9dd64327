"""`attend db upgrade` killed at any step is harmless (issue 25): each migration runs in one
transaction, DDL included, on SQLite as on PostgreSQL, and the next upgrade succeeds and leaves
the whole schema. An upgrade that old code left half-applied (a revision's new tables created,
empty, `alembic_version` before it) is recovered too.

The upgrade runs in a real process forked from the test, the product's `db.upgrade` on its own
engine; a listener the test adds to that engine (nothing in the product code) reports each
statement it executed and waits, and the test SIGKILLs it there: after the 1st statement, then
in a new database after the 2nd, and so on to the end, for an empty database (0001, 0002, 0003)
and for an index at 0001 with books (0002's copies)."""

from __future__ import annotations

import contextlib
import multiprocessing
import sqlite3
import time
from collections.abc import Callable
from datetime import UTC, datetime
from multiprocessing.connection import Connection as Pipe
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sqlalchemy import Engine, event, inspect, text
from sqlalchemy.orm import Session

from conftest import new_database
from indexer import db, loaded_index, store

_FORK = multiprocessing.get_context("fork")  # the test's imports already done: starts in ms


def _upgrade_and_stop_after(url: str, step: int, pipe: Pipe) -> None:
    """In the child: upgrade to head, stopping after statement `step` until killed."""
    engine = db.create_db_engine(url)
    executed = 0

    @event.listens_for(engine, "after_cursor_execute")
    def _stop(*_: Any) -> None:
        nonlocal executed
        executed += 1
        if executed == step:
            pipe.send(step)
            time.sleep(600)

    db.upgrade(engine)
    pipe.send("done")


def _kill_upgrade_after(url: str, step: int) -> bool:
    """Kill an upgrade of `url` after its `step`-th statement; False if it finished first."""
    ours, theirs = _FORK.Pipe()
    child = _FORK.Process(target=_upgrade_and_stop_after, args=(url, step, theirs))
    child.start()
    try:
        assert ours.poll(120), f"the upgrade reached neither statement {step} nor its end"
        reached = ours.recv()
    finally:
        child.kill()  # SIGKILL
        child.join(30)
    assert child.exitcode is not None
    return bool(reached == step)


def _seed_0001(engine: Engine) -> None:
    """An index at revision 0001: three books, their vectors and the model."""
    db.upgrade(engine, "0001")
    now = datetime.now(UTC)
    with engine.begin() as conn:
        for i in range(3):
            conn.execute(
                text(
                    "INSERT INTO books (id, title, description, authors, year, language, "
                    "extra, updated_at) VALUES (:id, :t, :d, '[]', 2000, 'en', '{}', :now)"
                ),
                {"id": f"b{i}", "t": f"T{i}", "d": f"D{i}", "now": now},
            )
            for role, field in (("key", "title"), ("key", "description"), ("value", "description")):
                conn.execute(
                    text(
                        "INSERT INTO book_vectors VALUES (:b, :role, :field, 'm', 4, 'float32', "
                        ":h, :data, :now)"
                    ),
                    {
                        "b": f"b{i}",
                        "role": role,
                        "field": field,
                        "h": f"{field}{i}",
                        "data": np.full(4, i, dtype="<f4").tobytes(),
                        "now": now,
                    },
                )
        conn.execute(text("""INSERT INTO index_metadata VALUES ('model', '"m"')"""))


def _nothing(engine: Engine) -> None:
    pass


def _schema(engine: Engine) -> dict[str, Any]:
    """Tables with their columns, indexes and foreign keys."""
    found = inspect(engine)
    return {
        table: (
            [(c["name"], str(c["type"]), c["nullable"]) for c in found.get_columns(table)],
            sorted((i["name"] or "", tuple(i["column_names"])) for i in found.get_indexes(table)),
            sorted(f["referred_table"] for f in found.get_foreign_keys(table)),
        )
        for table in sorted(found.get_table_names())
    }


def _check_whole(engine: Engine, reference: dict[str, Any], *, books: int) -> None:
    assert db.current_revision(engine) == db.head_revision()
    assert _schema(engine) == reference
    with Session(engine) as session:
        assert store.index_id(session=session)
        if books:
            index = loaded_index.load_index(session=session, model="m")
            assert (index.ids, index.generation) == ([f"b{i}" for i in range(books)], 1)
            assert index.keys["title"][2].tolist() == [2.0] * 4


@pytest.mark.parametrize("seed", [_nothing, _seed_0001], ids=["empty", "at-0001"])
def test_an_upgrade_killed_at_any_step_is_rerun_whole(
    database_url: str, seed: Callable[[Engine], None], tmp_path: Path
) -> None:
    backend = "sqlite" if database_url.startswith("sqlite") else "postgresql"
    reference_engine = db.create_db_engine(database_url)
    try:
        db.upgrade(reference_engine)
        reference = _schema(reference_engine)
    finally:
        reference_engine.dispose()

    books = 3 if seed is _seed_0001 else 0
    step = 0
    while True:
        step += 1
        with new_database(backend, tmp_path / f"step{step}") as url:
            engine = db.create_db_engine(url)
            try:
                seed(engine)
                engine.dispose()
                if not _kill_upgrade_after(url, step):
                    break
                db.upgrade(engine)  # what `attend db upgrade` (or `attend index`) runs next
                _check_whole(engine, reference, books=books)
            finally:
                engine.dispose()
    assert step > 20, f"the upgrade ran only {step - 1} statements"


def test_an_upgrade_left_half_applied_by_old_code_is_recovered(database_url: str) -> None:
    """What pysqlite's implicit commits left: 0002's tables created and empty, the revision
    still 0001, the 0001 index intact; and a fresh file's 0001 tables, with no revision."""
    engine = db.create_db_engine(database_url)
    try:
        _seed_0001(engine)
        with engine.begin() as conn:
            conn.execute(text("CREATE TABLE generations (id INTEGER PRIMARY KEY)"))
            conn.execute(text("CREATE TABLE book_versions (row_id INTEGER PRIMARY KEY)"))
        db.upgrade(engine)
        with Session(engine) as session:
            index = loaded_index.load_index(session=session, model="m")
            assert (index.ids, index.generation) == (["b0", "b1", "b2"], 1)
    finally:
        engine.dispose()


def test_a_fresh_file_left_with_0001_tables_is_recovered(tmp_path: Path) -> None:
    """A fresh file killed inside 0001 by old code: `books` created, no revision. Empty, it is
    dropped and made again; holding rows, it is no leftover, and the upgrade says so."""
    for rows, name in ((0, "empty.db"), (1, "full.db")):
        path = tmp_path / name
        with contextlib.closing(sqlite3.connect(path)) as conn:
            conn.execute("CREATE TABLE books (id TEXT PRIMARY KEY)")
            conn.executemany("INSERT INTO books VALUES (?)", [("x",)] * rows)
            conn.commit()
        engine = db.create_db_engine(f"sqlite:///{path}")
        try:
            if rows:
                with pytest.raises(db.SchemaError, match="table books already exists and holds 1"):
                    db.ensure_schema(engine, create_if_new=True)
                assert db.current_revision(engine) is None
            else:
                db.ensure_schema(engine, create_if_new=True)  # what `attend index` does
                assert db.current_revision(engine) == db.head_revision()
        finally:
            engine.dispose()
