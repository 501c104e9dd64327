"""Create books, book_vectors and index_metadata

Revision ID: 0001
Revises:
Create Date: 2026-11-29
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from migrations.leftovers import drop_empty_leftovers

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    drop_empty_leftovers("index_metadata", "book_vectors", "books")
    op.create_table(
        "books",
        sa.Column("id", sa.String(256), primary_key=True),
        sa.Column("title", sa.Text(), nullable=False),
        sa.Column("description", sa.Text(), nullable=True),
        sa.Column("authors", sa.JSON(), nullable=False),
        sa.Column("year", sa.Integer(), nullable=True),
        sa.Column("language", sa.String(64), nullable=True),
        sa.Column("extra", sa.JSON(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_table(
        "book_vectors",
        sa.Column(
            "book_id",
            sa.String(256),
            sa.ForeignKey("books.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("role", sa.String(16), primary_key=True),
        sa.Column("field", sa.String(32), primary_key=True),
        sa.Column("model", sa.String(256), nullable=False),
        sa.Column("dim", sa.Integer(), nullable=False),
        sa.Column("dtype", sa.String(16), nullable=False),
        sa.Column("content_hash", sa.String(64), nullable=False),
        sa.Column("data", sa.LargeBinary(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_book_vectors_role_field_model", "book_vectors", ["role", "field", "model"])
    op.create_table(
        "index_metadata",
        sa.Column("key", sa.String(64), primary_key=True),
        sa.Column("value", sa.JSON(), nullable=True),
    )


def downgrade() -> None:
    op.drop_table("index_metadata")
    op.drop_index("ix_book_vectors_role_field_model", table_name="book_vectors")
    op.drop_table("book_vectors")
    op.drop_table("books")
