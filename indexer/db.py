"""Engines and schema versions: every database Attend touches is at Alembic's head revision."""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, Engine, create_engine, event, exc
from sqlalchemy.engine import make_url

# Alembic is imported where it is used: importing it took 0.9 s of the 2.5 s `attend index` of
# a bad catalog took to answer, which never reaches a migration.
if TYPE_CHECKING:
    from alembic.config import Config

logger = logging.getLogger(__name__)


class SchemaError(RuntimeError):
    """The database is not at the schema this code expects."""


class DatabaseGoneError(RuntimeError):
    """The SQLite file a connection was opened on is no longer at its path (deleted), or no
    longer a SQLite database (truncated, overwritten)."""


def create_db_engine(url: str) -> Engine:
    """An engine for `url`; SQLite gets foreign keys, WAL (readers never block on the indexer)
    and a busy timeout (a writer waits for another instead of failing at once).

    A pooled SQLite connection keeps the file it opened even once that file is deleted or
    replaced (a re-created database), and SQLite would make a new empty file where one was
    deleted: each checkout compares the file at the path with the connection's, so a replaced
    file is reopened, and a deleted one (or one whose header is no longer SQLite's: truncated,
    overwritten) raises `DatabaseGoneError`, never read from or written to unnoticed."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        return create_engine(url, pool_pre_ping=True)
    file = Path(parsed.database) if parsed.database and parsed.database != ":memory:" else None
    if file is not None:
        file.parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(url, connect_args={"timeout": 30})
    opened: list[bool] = []  # whether a connection ever found the file: then it must exist

    if file is not None:

        @event.listens_for(engine, "do_connect")
        def _no_new_file(*_: Any) -> None:
            if opened and not file.exists():  # sqlite3 would create an empty one
                raise DatabaseGoneError(f"the SQLite database {file} is gone (deleted)")

    @event.listens_for(engine, "connect")
    def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.close()
        if file is not None:
            _record.info["attend_file"] = _file_identity(file)
            opened.append(True)

    if file is not None:

        @event.listens_for(engine, "checkout")
        def _same_file(_dbapi_connection: Any, record: Any, _proxy: Any) -> None:
            now, then = _file_identity(file), record.info.get("attend_file")
            if now is None:
                raise DatabaseGoneError(f"the SQLite database {file} is gone (deleted)")
            if then is None or now[:2] != then[:2]:
                logger.warning("the SQLite database %s was replaced: reconnecting", file)
                raise exc.DisconnectionError(f"{file} was replaced")  # the pool reconnects
            if then[2] and not now[2]:  # SQLite's page cache would hide it a while
                raise DatabaseGoneError(
                    f"the SQLite database {file} is no longer a database (truncated or overwritten)"
                )

    return engine


_SQLITE_HEADER_BYTES = 100  # a database file holds at least its 100-byte header


def _file_identity(path: Path) -> tuple[int, int, bool] | None:
    """(device, inode, whether it is long enough to hold SQLite's header) of the file at
    `path`, None if there is none. A new database has no header until its first write.

    From `os.stat` alone, never by opening the file: closing any descriptor of a file drops
    every POSIX lock this process holds on it, SQLite's own included (its WAL read locks: a
    reader could then go on reading an old snapshot while a writer checkpoints), so a
    truncated file is told by its size and an overwritten one by SQLite's own errors."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st.st_dev, st.st_ino, st.st_size >= _SQLITE_HEADER_BYTES


_SQLITE_MAGIC = b"SQLite format 3\x00"


def check_sqlite_file(engine: Engine) -> None:
    """Raise `DatabaseGoneError` unless `engine`'s SQLite file begins with SQLite's header now.

    The checkout check (`_file_identity`) sees a file truncated to under 100 bytes, but not
    one that grew again (a checkpoint writing its few pages back, any writer) nor one
    overwritten in place, while pooled connections go on answering from their page cache. So
    readiness reads the header itself, through a descriptor SQLite already holds on the file
    (found in /proc/self/fd; `os.pread` moves no offset), never by opening the file: closing
    any descriptor of it would drop SQLite's POSIX locks (see `_file_identity`). Where there
    is no /proc, or no descriptor open yet, the file's size decides, as at checkout."""
    file = engine.url.database
    if engine.dialect.name != "sqlite" or not file or file == ":memory:":
        return
    path = Path(file).resolve()
    header = _header_through_sqlite(path)
    if header is None:
        try:
            size = os.stat(path).st_size
        except FileNotFoundError:
            raise DatabaseGoneError(f"the SQLite database {path} is gone (deleted)") from None
        if size >= _SQLITE_HEADER_BYTES:
            return
        header = b""
    if header != _SQLITE_MAGIC:
        what = "is empty (truncated)" if not header else "does not begin with SQLite's header"
        raise DatabaseGoneError(
            f"the SQLite database {path} {what}: it is no longer a database (truncated or "
            "overwritten); restore it, or index the catalog again"
        )


def _header_through_sqlite(path: Path) -> bytes | None:
    """The first 16 bytes of `path`, read through a descriptor this process holds on it."""
    try:
        fds = os.listdir("/proc/self/fd")
        st = os.stat(path)
    except OSError:
        return None
    for fd in fds:
        try:
            if os.readlink(f"/proc/self/fd/{fd}") != str(path):
                continue
            header = os.pread(int(fd), len(_SQLITE_MAGIC), 0)
            same = os.fstat(int(fd))  # still that file (a descriptor number can be reused)
        except (OSError, ValueError):
            continue
        if (same.st_dev, same.st_ino) == (st.st_dev, st.st_ino):
            return header
    return None


def _script_location() -> str:
    spec = importlib.util.find_spec("migrations")
    if spec is None or not spec.submodule_search_locations:
        raise SchemaError("the 'migrations' package is not installed beside Attend")
    return str(next(iter(spec.submodule_search_locations)))


def alembic_config(engine: Engine) -> Config:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", _script_location())
    cfg.set_main_option("sqlalchemy.url", engine.url.render_as_string(hide_password=False))
    return cfg


@functools.cache
def head_revision() -> str:
    """The newest revision of the migrations this code ships. Read once a process: the scripts
    do not change under it, and parsing them took 4 ms, on every readiness probe."""
    from alembic.script import ScriptDirectory

    head = ScriptDirectory(_script_location()).get_current_head()
    assert head is not None, "the migration history is empty"
    return head


def current_revision(engine: Engine) -> str | None:
    from alembic.runtime.migration import MigrationContext

    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


@contextlib.contextmanager
def migration_transaction(engine: Engine) -> Iterator[Connection]:
    """A connection in one transaction that holds DDL too: committed whole or not at all.

    PostgreSQL's DDL is transactional as it is. Python's sqlite3 is not, by default: it opens a
    transaction only before DML, so the CREATE TABLEs a migration issues first were committed
    one by one, and a migration killed midway left its tables with `alembic_version` unchanged
    (every later upgrade: "table generations already exists"). Here, as in SQLAlchemy's
    pysqlite recipe, the driver's own transaction handling is off (`isolation_level = None`)
    and the transaction is begun explicitly: BEGIN IMMEDIATE, so the migration holds the write
    lock from its first statement. The pooled connection gets the driver's default back."""
    with engine.connect() as conn:
        if conn.dialect.name != "sqlite":
            with conn.begin():
                yield conn
            return
        dbapi = conn.connection.dbapi_connection
        assert dbapi is not None
        default = dbapi.isolation_level
        dbapi.isolation_level = None
        try:
            conn.exec_driver_sql("BEGIN IMMEDIATE")  # SQLAlchemy's autobegin: a no-op here
            try:
                yield conn
            except BaseException:
                conn.rollback()
                raise
            conn.commit()
        finally:
            dbapi.isolation_level = default


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Apply migrations up to `revision` (Alembic's `upgrade`), in one transaction."""
    from alembic import command

    cfg = alembic_config(engine)
    with migration_transaction(engine) as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, revision)
    logger.info(
        "database %s at revision %s", engine.url.render_as_string(), current_revision(engine)
    )


def downgrade(engine: Engine, revision: str) -> None:
    from alembic import command

    cfg = alembic_config(engine)
    with migration_transaction(engine) as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, revision)


def ensure_schema(engine: Engine, *, create_if_new: bool) -> None:
    """Check the database is at head; a new (empty) one is migrated when `create_if_new`."""
    current, head = current_revision(engine), head_revision()
    if current == head:
        return
    if current is None and create_if_new:
        logger.info("new database: applying migrations")
        upgrade(engine)
        return
    where = "has no Attend schema" if current is None else f"is at revision {current}"
    raise SchemaError(
        f"database {engine.url.render_as_string()} {where}, this code needs {head}: "
        "run `attend db upgrade`"
    )
