"""Version books by generation and store each vector once

Books become rows valid over a range of generations (SCD-2); vectors move to a table keyed by
(model, content hash) that book rows reference per (role, field). An index made under 0001
becomes generation 1, active; downgrading copies the active generation back.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29
"""

from collections.abc import Sequence
from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

from migrations.leftovers import drop_empty_leftovers

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_ROW_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
_CHUNK = 1000

# The 0001 tables, as far as the data copies need them.
_books = sa.table(
    "books",
    sa.column("id"),
    sa.column("title"),
    sa.column("description"),
    sa.column("authors", sa.JSON()),
    sa.column("year"),
    sa.column("language"),
    sa.column("extra", sa.JSON()),
    sa.column("updated_at"),
)
_old_vectors = sa.table(
    "book_vectors",
    sa.column("book_id"),
    sa.column("role"),
    sa.column("field"),
    sa.column("model"),
    sa.column("dim"),
    sa.column("dtype"),
    sa.column("content_hash"),
    sa.column("data", sa.LargeBinary()),
    sa.column("created_at"),
)
_metadata = sa.table("index_metadata", sa.column("key"), sa.column("value", sa.JSON()))
# The 0002 tables.
_generations = sa.table(
    "generations",
    sa.column("id"),
    sa.column("state"),
    sa.column("catalog"),
    sa.column("model"),
    sa.column("books"),
    sa.column("added"),
    sa.column("updated"),
    sa.column("removed"),
    sa.column("rejected"),
    sa.column("started_at"),
    sa.column("finished_at"),
)
_versions = sa.table(
    "book_versions",
    sa.column("row_id"),
    sa.column("book_id"),
    sa.column("title"),
    sa.column("description"),
    sa.column("authors", sa.JSON()),
    sa.column("year"),
    sa.column("language"),
    sa.column("extra", sa.JSON()),
    sa.column("record_hash"),
    sa.column("valid_from"),
    sa.column("valid_to"),
    sa.column("updated_at"),
)
_vectors = sa.table(
    "vectors",
    sa.column("id"),
    sa.column("model"),
    sa.column("content_hash"),
    sa.column("dim"),
    sa.column("dtype"),
    sa.column("data", sa.LargeBinary()),
    sa.column("created_at"),
)
_links = sa.table(
    "version_vectors",
    sa.column("version_id"),
    sa.column("role"),
    sa.column("field"),
    sa.column("vector_id"),
)


def upgrade() -> None:
    drop_empty_leftovers("version_vectors", "vectors", "book_versions", "generations")
    op.create_table(
        "generations",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("catalog", sa.Text(), nullable=True),
        sa.Column("model", sa.String(256), nullable=False),
        sa.Column("books", sa.Integer(), nullable=False),
        sa.Column("added", sa.Integer(), nullable=False),
        sa.Column("updated", sa.Integer(), nullable=False),
        sa.Column("removed", sa.Integer(), nullable=False),
        sa.Column("rejected", sa.Integer(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_generations_state", "generations", ["state"])
    op.create_table(
        "vectors",
        sa.Column("id", _ROW_ID, primary_key=True, autoincrement=True),
        sa.Column("model", sa.String(256), nullable=False),
        sa.Column("content_hash", sa.String(64), nullable=False),
        sa.Column("dim", sa.Integer(), nullable=False),
        sa.Column("dtype", sa.String(16), nullable=False),
        sa.Column("data", sa.LargeBinary(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("model", "content_hash", name="uq_vectors_model_hash"),
    )
    op.create_table(
        "book_versions",
        sa.Column("row_id", _ROW_ID, primary_key=True, autoincrement=True),
        sa.Column("book_id", sa.String(256), nullable=False),
        sa.Column("title", sa.Text(), nullable=False),
        sa.Column("description", sa.Text(), nullable=True),
        sa.Column("authors", sa.JSON(), nullable=False),
        sa.Column("year", sa.Integer(), nullable=True),
        sa.Column("language", sa.String(64), nullable=True),
        sa.Column("extra", sa.JSON(), nullable=False),
        sa.Column("record_hash", sa.String(64), nullable=True),
        sa.Column("valid_from", sa.Integer(), sa.ForeignKey("generations.id"), nullable=False),
        sa.Column("valid_to", sa.Integer(), sa.ForeignKey("generations.id"), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("book_id", "valid_from", name="uq_book_versions_book_from"),
    )
    op.create_index("ix_book_versions_valid_from", "book_versions", ["valid_from"])
    op.create_index("ix_book_versions_valid_to", "book_versions", ["valid_to"])
    op.create_index(
        "uq_book_versions_open",
        "book_versions",
        ["book_id"],
        unique=True,
        sqlite_where=sa.text("valid_to IS NULL"),
        postgresql_where=sa.text("valid_to IS NULL"),
    )
    op.create_table(
        "version_vectors",
        sa.Column(
            "version_id",
            _ROW_ID,
            sa.ForeignKey("book_versions.row_id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("role", sa.String(16), primary_key=True),
        sa.Column("field", sa.String(32), primary_key=True),
        sa.Column("vector_id", _ROW_ID, sa.ForeignKey("vectors.id"), nullable=False),
    )
    op.create_index("ix_version_vectors_vector_id", "version_vectors", ["vector_id"])
    _copy_0001_index()
    op.drop_index("ix_book_vectors_role_field_model", table_name="book_vectors")
    op.drop_table("book_vectors")
    op.drop_table("books")


def _copy_0001_index() -> None:
    """The 0001 index, if any, becomes generation 1 (active); each distinct vector is kept once."""
    conn = op.get_bind()
    count = conn.scalar(sa.select(sa.func.count()).select_from(_books)) or 0
    if not count:
        return
    meta = dict(conn.execute(sa.select(_metadata.c.key, _metadata.c.value)).all())
    model = meta.get("model") or conn.scalar(sa.select(sa.func.min(_old_vectors.c.model))) or "?"
    now = datetime.now(UTC)
    generation = conn.execute(
        _generations.insert()
        .values(
            state="active",
            catalog=meta.get("catalog"),
            model=model,
            books=count,
            added=count,
            updated=0,
            removed=0,
            rejected=0,
            started_at=now,
            finished_at=now,
        )
        .returning(_generations.c.id)
    ).scalar_one()
    conn.execute(
        _versions.insert().from_select(
            [
                "book_id",
                "title",
                "description",
                "authors",
                "year",
                "language",
                "extra",
                "valid_from",
                "updated_at",
            ],
            sa.select(
                _books.c.id,
                _books.c.title,
                _books.c.description,
                _books.c.authors,
                _books.c.year,
                _books.c.language,
                _books.c.extra,
                sa.literal(generation, sa.Integer()),
                _books.c.updated_at,
            ),
        )
    )
    seen: set[tuple[str, str]] = set()
    pending: list[dict[str, object]] = []
    rows = conn.execute(
        sa.select(
            _old_vectors.c.model,
            _old_vectors.c.content_hash,
            _old_vectors.c.dim,
            _old_vectors.c.dtype,
            _old_vectors.c.data,
            _old_vectors.c.created_at,
        )
    )
    for model_, content_hash, dim, dtype, data, created_at in rows.all():  # 0001: one catalog
        if (model_, content_hash) in seen:
            continue
        seen.add((model_, content_hash))
        pending.append(
            {
                "model": model_,
                "content_hash": content_hash,
                "dim": dim,
                "dtype": dtype,
                "data": data,
                "created_at": created_at,
            }
        )
        if len(pending) == _CHUNK:
            conn.execute(_vectors.insert(), pending)
            pending = []
    if pending:
        conn.execute(_vectors.insert(), pending)
    conn.execute(
        _links.insert().from_select(
            ["version_id", "role", "field", "vector_id"],
            sa.select(_versions.c.row_id, _old_vectors.c.role, _old_vectors.c.field, _vectors.c.id)
            .select_from(_old_vectors)
            .join(_versions, _versions.c.book_id == _old_vectors.c.book_id)
            .join(
                _vectors,
                (_vectors.c.model == _old_vectors.c.model)
                & (_vectors.c.content_hash == _old_vectors.c.content_hash),
            ),
        )
    )


def downgrade() -> None:
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
    _copy_active_generation()
    op.drop_index("ix_version_vectors_vector_id", table_name="version_vectors")
    op.drop_table("version_vectors")
    op.drop_index("uq_book_versions_open", table_name="book_versions")
    op.drop_index("ix_book_versions_valid_to", table_name="book_versions")
    op.drop_index("ix_book_versions_valid_from", table_name="book_versions")
    op.drop_table("book_versions")
    op.drop_table("vectors")
    op.drop_index("ix_generations_state", table_name="generations")
    op.drop_table("generations")


def _copy_active_generation() -> None:
    """The books of the active generation, with their vectors, back into the 0001 tables."""
    conn = op.get_bind()
    g = conn.scalar(sa.select(_generations.c.id).where(_generations.c.state == "active"))
    if g is None:
        return
    visible = (_versions.c.valid_from <= g) & (
        _versions.c.valid_to.is_(None) | (_versions.c.valid_to > g)
    )
    conn.execute(
        _books.insert().from_select(
            ["id", "title", "description", "authors", "year", "language", "extra", "updated_at"],
            sa.select(
                _versions.c.book_id,
                _versions.c.title,
                _versions.c.description,
                _versions.c.authors,
                _versions.c.year,
                _versions.c.language,
                _versions.c.extra,
                _versions.c.updated_at,
            ).where(visible),
        )
    )
    conn.execute(
        _old_vectors.insert().from_select(
            [
                "book_id",
                "role",
                "field",
                "model",
                "dim",
                "dtype",
                "content_hash",
                "data",
                "created_at",
            ],
            sa.select(
                _versions.c.book_id,
                _links.c.role,
                _links.c.field,
                _vectors.c.model,
                _vectors.c.dim,
                _vectors.c.dtype,
                _vectors.c.content_hash,
                _vectors.c.data,
                _vectors.c.created_at,
            )
            .select_from(_links)
            .join(_versions, _versions.c.row_id == _links.c.version_id)
            .join(_vectors, _vectors.c.id == _links.c.vector_id)
            .where(visible),
        )
    )
