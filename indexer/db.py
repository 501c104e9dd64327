"""Engines and schema versions: every database Attend touches is at Alembic's head revision."""

from __future__ import annotations

import importlib.util
import logging
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url

logger = logging.getLogger(__name__)


class SchemaError(RuntimeError):
    """The database is not at the schema this code expects."""


def create_db_engine(url: str) -> Engine:
    """An engine for `url`; SQLite gets foreign keys, WAL (readers never block on the indexer)
    and a busy timeout (a writer waits for another instead of failing at once)."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        return create_engine(url, pool_pre_ping=True)
    if parsed.database and parsed.database != ":memory:":
        Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(url, connect_args={"timeout": 30})

    @event.listens_for(engine, "connect")
    def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.close()

    return engine


def _script_location() -> str:
    spec = importlib.util.find_spec("migrations")
    if spec is None or not spec.submodule_search_locations:
        raise SchemaError("the 'migrations' package is not installed beside Attend")
    return str(next(iter(spec.submodule_search_locations)))


def alembic_config(engine: Engine) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", _script_location())
    cfg.set_main_option("sqlalchemy.url", engine.url.render_as_string(hide_password=False))
    return cfg


def head_revision() -> str:
    head = ScriptDirectory(_script_location()).get_current_head()
    assert head is not None, "the migration history is empty"
    return head


def current_revision(engine: Engine) -> str | None:
    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Apply migrations up to `revision` (Alembic's `upgrade`)."""
    cfg = alembic_config(engine)
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, revision)
    logger.info(
        "database %s at revision %s", engine.url.render_as_string(), current_revision(engine)
    )


def downgrade(engine: Engine, revision: str) -> None:
    cfg = alembic_config(engine)
    with engine.begin() as conn:
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
