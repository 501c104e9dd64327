"""Alembic environment: the URL comes from a passed connection or from Attend's settings."""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection

from indexer.db import create_db_engine, migration_transaction
from indexer.schema import Base
from indexer.settings import StoreSettings

config = context.config
target_metadata = Base.metadata


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    url = config.get_main_option("sqlalchemy.url") or StoreSettings().database_url
    engine = create_db_engine(url)
    with migration_transaction(engine) as conn:  # DDL in the transaction, SQLite's too
        _run(conn)
    engine.dispose()


if context.is_offline_mode():
    raise SystemExit("offline (--sql) migrations are not supported; run against a database")
run_migrations_online()
