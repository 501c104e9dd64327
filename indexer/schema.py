"""The index's tables: generations, versioned book rows, vectors stored once, the links between.

A **generation** is one snapshot of the catalog. Book rows are versioned SCD-2 style: a row is
part of every generation g with `valid_from <= g AND (valid_to IS NULL OR valid_to > g)`, so a
re-index writes rows only for the books that changed (a new row, and `valid_to` on the old one)
and a generation costs nothing for the books it leaves alone. Vectors are stored once per
(model, content hash) and referenced from a book row per (role, field), so an unchanged text is
never embedded or stored twice. Vector bytes are little-endian float32 in a portable binary
column; model, dimension and dtype sit beside them.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

# BIGINT on PostgreSQL; SQLite only auto-increments an INTEGER PRIMARY KEY (the rowid).
RowId = BigInteger().with_variant(Integer(), "sqlite")

BUILDING, ACTIVE, RETIRED, FAILED = "building", "active", "retired", "failed"


def _now() -> datetime:
    return datetime.now(UTC)


class Base(DeclarativeBase):
    pass


class Generation(Base):
    """One snapshot of the catalog: building → active → retired, or failed."""

    __tablename__ = "generations"
    # Ids only grow, also on SQLite after a discarded generation: the visibility rule needs it.
    __table_args__ = ({"sqlite_autoincrement": True},)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    state: Mapped[str] = mapped_column(String(16), index=True)
    catalog: Mapped[str | None] = mapped_column(Text)
    # what a building generation is built from (the catalog's name, its bytes' digest, the
    # run's flags): only a run of the same resumes it (indexer/generations.py `begin`)
    source: Mapped[str | None] = mapped_column(Text)
    model: Mapped[str] = mapped_column(String(256))
    books: Mapped[int] = mapped_column(Integer, default=0)  # books in the snapshot
    added: Mapped[int] = mapped_column(Integer, default=0)
    updated: Mapped[int] = mapped_column(Integer, default=0)
    removed: Mapped[int] = mapped_column(Integer, default=0)
    rejected: Mapped[int] = mapped_column(Integer, default=0)
    error: Mapped[str | None] = mapped_column(Text)
    started_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=_now)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class Book(Base):
    """One version of one book: valid from generation `valid_from` until before `valid_to`."""

    __tablename__ = "book_versions"
    __table_args__ = (
        UniqueConstraint("book_id", "valid_from", name="uq_book_versions_book_from"),
        # at most one open version per book
        Index(
            "uq_book_versions_open",
            "book_id",
            unique=True,
            sqlite_where="valid_to IS NULL",
            postgresql_where="valid_to IS NULL",
        ),
    )

    row_id: Mapped[int] = mapped_column(RowId, primary_key=True, autoincrement=True)
    id: Mapped[str] = mapped_column("book_id", String(256))
    title: Mapped[str] = mapped_column(Text)
    description: Mapped[str | None] = mapped_column(Text)
    authors: Mapped[list[str]] = mapped_column(JSON, default=list)
    year: Mapped[int | None] = mapped_column(Integer)
    language: Mapped[str | None] = mapped_column(String(64))
    extra: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    # sha256 of the model and the whole record: equal means nothing to write
    record_hash: Mapped[str | None] = mapped_column(String(64))
    valid_from: Mapped[int] = mapped_column(ForeignKey("generations.id"), index=True)
    valid_to: Mapped[int | None] = mapped_column(ForeignKey("generations.id"), index=True)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=_now)


class Vector(Base):
    """One embedding, stored once for every book row whose text it is."""

    __tablename__ = "vectors"
    __table_args__ = (UniqueConstraint("model", "content_hash", name="uq_vectors_model_hash"),)

    id: Mapped[int] = mapped_column(RowId, primary_key=True, autoincrement=True)
    model: Mapped[str] = mapped_column(String(256))
    content_hash: Mapped[str] = mapped_column(String(64))  # sha256 of (model, embedded text)
    dim: Mapped[int] = mapped_column(Integer)
    dtype: Mapped[str] = mapped_column(String(16))
    data: Mapped[bytes] = mapped_column(LargeBinary)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=_now)


class BookVector(Base):
    """A book row's attention key or value for one field: a reference to a stored vector."""

    __tablename__ = "version_vectors"

    version_id: Mapped[int] = mapped_column(
        ForeignKey("book_versions.row_id", ondelete="CASCADE"), primary_key=True
    )
    role: Mapped[str] = mapped_column(String(16), primary_key=True)  # "key" or "value"
    field: Mapped[str] = mapped_column(String(32), primary_key=True)  # "title", "description"
    vector_id: Mapped[int] = mapped_column(ForeignKey("vectors.id"), index=True)


class IndexMetadata(Base):
    """Facts about the index as a whole (model, dim, dtype, last run), one per key."""

    __tablename__ = "index_metadata"

    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[Any] = mapped_column(JSON)
