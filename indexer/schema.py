"""The index's tables: books, their key and value vectors, and the index's metadata.

Vectors are rows, one per (book, role, field), so more keys per field (a title-only or a
description-only key) are new rows, not new columns. Vector bytes are little-endian
float32 in a portable binary column; model, dimension and dtype sit beside them.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import JSON, DateTime, ForeignKey, Index, Integer, LargeBinary, String, Text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


def _now() -> datetime:
    return datetime.now(UTC)


class Base(DeclarativeBase):
    pass


class Book(Base):
    __tablename__ = "books"

    id: Mapped[str] = mapped_column(String(256), primary_key=True)
    title: Mapped[str] = mapped_column(Text)
    description: Mapped[str | None] = mapped_column(Text)
    authors: Mapped[list[str]] = mapped_column(JSON, default=list)
    year: Mapped[int | None] = mapped_column(Integer)
    language: Mapped[str | None] = mapped_column(String(64))
    extra: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=_now)


class BookVector(Base):
    """One embedding of one book: its attention key or value for one field of its text."""

    __tablename__ = "book_vectors"
    __table_args__ = (Index("ix_book_vectors_role_field_model", "role", "field", "model"),)

    book_id: Mapped[str] = mapped_column(
        String(256), ForeignKey("books.id", ondelete="CASCADE"), primary_key=True
    )
    role: Mapped[str] = mapped_column(String(16), primary_key=True)  # "key" or "value"
    field: Mapped[str] = mapped_column(String(32), primary_key=True)  # "text": title + description
    model: Mapped[str] = mapped_column(String(256))
    dim: Mapped[int] = mapped_column(Integer)
    dtype: Mapped[str] = mapped_column(String(16))
    content_hash: Mapped[str] = mapped_column(String(64))  # sha256 of (model, embedded text)
    data: Mapped[bytes] = mapped_column(LargeBinary)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=_now)


class IndexMetadata(Base):
    """Facts about the index as a whole (model, dim, dtype, book count, last run), one per key."""

    __tablename__ = "index_metadata"

    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[Any] = mapped_column(JSON)
