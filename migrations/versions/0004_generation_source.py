"""Record what a building generation is built from, so only a run of the same resumes it

A run killed midway leaves its generation building; the next run resumed it whatever its
catalog, and `--keep-missing` then kept the killed run's rows: books of a catalog that was never
completed went live. `source` holds the catalog's name, the digest of its bytes and the run's
flags; a generation left by older code has none, and is not resumed.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-07
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("generations", sa.Column("source", sa.Text(), nullable=True))


def downgrade() -> None:
    # a plain ALTER TABLE … DROP COLUMN (SQLite has it since 3.35): a batch copy of the table
    # would drop it, which the book rows' foreign keys to it refuse
    op.drop_column("generations", "source")
