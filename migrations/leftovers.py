"""Tables a killed run of a revision left behind, dropped so that the revision runs again.

Migrations now run in one transaction, DDL included (indexer.db.migration_transaction), so a
killed upgrade leaves nothing behind. Before that, Python's sqlite3 committed each CREATE TABLE
issued before the first row was written: an upgrade killed inside 0001 or 0002 left that
revision's new tables, empty, with `alembic_version` still at the revision before, and every
later upgrade failed with "table … already exists". A revision first drops such tables of its
own; one that holds rows is not a leftover, and the upgrade stops and says so.
"""

from __future__ import annotations

import logging

import sqlalchemy as sa
from alembic import op

from indexer.db import SchemaError

logger = logging.getLogger(__name__)


def drop_empty_leftovers(*tables: str) -> None:
    """Drop those of `tables` (dependants first) that exist and are empty."""
    bind = op.get_bind()
    present = set(sa.inspect(bind).get_table_names())
    for table in tables:
        if table not in present:
            continue
        rows = bind.scalar(sa.select(sa.func.count()).select_from(sa.table(table)))
        if rows:
            raise SchemaError(
                f"table {table} already exists and holds {rows} rows, though the revision "
                "that creates it was never applied: restore the database from a backup, or "
                "move it aside and index the catalog into a new one"
            )
        logger.warning("dropping table %s, left empty by an interrupted upgrade", table)
        op.drop_table(table)
