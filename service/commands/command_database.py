"""The database a command is pointed at: its URL and the settings its options override, its
SQLite file, the URL as shown (no password), opened as an existing index, and the writer's lock
file removed after the command. Every command's module shares these; as everywhere in the CLI
(cli.py), the heavy modules are imported inside each function, when the command runs."""

from __future__ import annotations

import argparse
import contextlib
import fcntl
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sqlalchemy import Engine

NO_INDEX_HINT = (
    "index a catalog first: `attend index CATALOG` (or `attend demo` for the bundled one), or "
    "point --database-url or ATTEND_DATABASE_URL at an index"
)


class NoIndexError(RuntimeError):
    """The database a reading command was pointed at holds no Attend index at all."""


def overrides(args: argparse.Namespace, names: Sequence[str]) -> dict[str, Any]:
    """The options given on the command line, as settings fields (they win over ATTEND_*)."""
    return {k: getattr(args, k) for k in names if getattr(args, k, None) is not None}


def database_url_of(args: argparse.Namespace) -> str:
    from indexer.settings import StoreSettings

    return args.database_url or StoreSettings().database_url


def sqlite_file(url: str) -> Path | None:
    """The file of a SQLite URL (None for other databases and in-memory SQLite)."""
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return None
    return Path(parsed.database)


def shown_url(url: str) -> str:
    """`url` without its password, a relative SQLite path made absolute (where the file is)."""
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    file = sqlite_file(url)
    if file is not None:
        parsed = parsed.set(database=str(file.resolve()))
    return parsed.render_as_string(hide_password=True)


def open_index(url: str) -> Engine:
    """An engine on an existing index, never creating one: connecting to a missing SQLite file
    would leave an empty one behind, and `attend db upgrade` would only lead to "the index holds
    no books". A database at an older revision still gets the `attend db upgrade` hint."""
    from indexer import db

    file = sqlite_file(url)
    if file is not None and not file.exists():
        raise NoIndexError(f"no index at {shown_url(url)} (there is no {file}): {NO_INDEX_HINT}")
    engine = db.create_db_engine(url)
    try:
        if db.current_revision(engine) is None:
            raise NoIndexError(f"{shown_url(url)} holds no Attend index: {NO_INDEX_HINT}")
        db.ensure_schema(engine, create_if_new=False)
    except BaseException:
        engine.dispose()
        raise
    return engine


@contextlib.contextmanager
def no_lock_file_left(url: str) -> Iterator[None]:
    """On SQLite, the one-writer lock (indexer.generations.writer_lock) is an flock on
    DATABASE.index-lock, a file it creates and keeps. It is removed here after the command,
    and only while this process holds the lock itself: a writer running now keeps its file.
    (Left: a writer that opened the file just before the unlink and locks it just after holds a
    lock no later writer sees; the two steps are microseconds apart.)"""
    try:
        yield
    finally:
        file = sqlite_file(url)
        lock = Path(f"{file}.index-lock") if file is not None else None
        if lock is not None and lock.exists():
            with lock.open("a") as f:
                try:
                    fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    pass  # another writer is running: the file is its lock
                else:
                    lock.unlink(missing_ok=True)
                    fcntl.flock(f, fcntl.LOCK_UN)
