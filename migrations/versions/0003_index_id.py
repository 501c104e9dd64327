"""Give the index an identity: a random id written once, when the database is made

A service compares it on every poll, so a database dropped and re-created (its generations
counting from 1 again) or a SQLite file replaced is noticed and reloaded, never served stale.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01
"""

import uuid
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

INDEX_ID_KEY = "index_id"  # indexer.store.INDEX_ID_KEY
_metadata = sa.table("index_metadata", sa.column("key"), sa.column("value", sa.JSON()))


def upgrade() -> None:
    op.execute(_metadata.delete().where(_metadata.c.key == INDEX_ID_KEY))
    op.bulk_insert(_metadata, [{"key": INDEX_ID_KEY, "value": uuid.uuid4().hex}])


def downgrade() -> None:
    op.execute(_metadata.delete().where(_metadata.c.key == INDEX_ID_KEY))
