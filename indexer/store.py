"""Reads and writes of the index. Keyword-only `session=` functions that never commit.

Vectors travel as little-endian float32 bytes; `load_index` returns them as one
contiguous (N, d) array per key field and one for the values, in book-id order.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np
from sqlalchemy import Table, delete, func, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session, aliased

from indexer.catalog import CatalogRecord, is_valid_id
from indexer.schema import Book, BookVector, IndexMetadata

DTYPE = "float32"
_NP_DTYPE = np.dtype("<f4")
KEY_FIELDS = ("title", "description")  # one key per field and book
VALUE_FIELD = "description"  # the field whose vector is also the book's value


@dataclass(frozen=True)
class VectorRow:
    book_id: str
    role: str  # "key" or "value"
    field: str
    content_hash: str
    vector: np.ndarray  # (d,) float32


@dataclass(frozen=True)
class LoadedIndex:
    """Everything the attention core needs, aligned by row: row i is book ids[i]."""

    ids: list[str]
    titles: list[str]
    authors: list[list[str]]
    years: list[int | None]
    languages: list[str | None]
    keys: dict[str, np.ndarray]  # field → (N, d) float32
    values: np.ndarray  # (N, d) float32; the value field's keys array itself when V = K
    model: str

    def __len__(self) -> int:
        return len(self.ids)


def content_hash(model: str, text: str) -> str:
    """What a vector was made from: the model and the exact text embedded."""
    return hashlib.sha256(f"{model}\x00{text}".encode()).hexdigest()


def to_bytes(vector: np.ndarray) -> bytes:
    return np.ascontiguousarray(vector, dtype=_NP_DTYPE).tobytes()


def from_bytes(data: bytes, dim: int) -> np.ndarray:
    vector = np.frombuffer(data, dtype=_NP_DTYPE)
    if vector.shape != (dim,):
        raise ValueError(f"stored vector has {vector.size} floats, its row says dim={dim}")
    return vector


def upsert_books(*, session: Session, records: Sequence[CatalogRecord]) -> None:
    now = datetime.now(UTC)
    rows = [
        {
            "id": r.id,
            "title": r.title,
            "description": r.description,
            "authors": r.authors,
            "year": r.year,
            "language": r.language,
            "extra": r.extra,
            "updated_at": now,
        }
        for r in records
    ]
    _upsert(session, Book.__table__, rows, ["id"])  # type: ignore[arg-type]


def write_vectors(*, session: Session, rows: Sequence[VectorRow], model: str) -> None:
    now = datetime.now(UTC)
    values = [
        {
            "book_id": r.book_id,
            "role": r.role,
            "field": r.field,
            "model": model,
            "dim": int(r.vector.shape[0]),
            "dtype": DTYPE,
            "content_hash": r.content_hash,
            "data": to_bytes(r.vector),
            "created_at": now,
        }
        for r in rows
    ]
    _upsert(session, BookVector.__table__, values, ["book_id", "role", "field"])  # type: ignore[arg-type]


def vector_hashes(*, session: Session, book_ids: Iterable[str]) -> dict[tuple[str, str, str], str]:
    """(book id, role, field) → content hash of each stored vector of these books."""
    stmt = select(
        BookVector.book_id, BookVector.role, BookVector.field, BookVector.content_hash
    ).where(BookVector.book_id.in_(list(book_ids)))
    return {(book_id, role, f): h for book_id, role, f, h in session.execute(stmt)}


def delete_other_fields(
    *, session: Session, book_ids: Sequence[str], fields: Sequence[str]
) -> None:
    """Drop these books' vectors of fields no longer indexed (the single "text" key of old)."""
    session.execute(
        delete(BookVector).where(
            BookVector.book_id.in_(book_ids), BookVector.field.not_in(list(fields))
        )
    )


def load_index(
    *,
    session: Session,
    model: str,
    fields: Sequence[str] = KEY_FIELDS,
    value_field: str = VALUE_FIELD,
) -> LoadedIndex:
    """Every book with a key for each of `fields` and a value made by `model`, in id order."""
    keys_of = {f: aliased(BookVector) for f in fields}
    value = aliased(BookVector)
    stmt = select(
        Book.id,
        Book.title,
        Book.authors,
        Book.year,
        Book.language,
        value.data,
        *(a.data for a in keys_of.values()),
    )
    for f, a in (*((f, a) for f, a in keys_of.items()), (value_field, value)):
        role = "value" if a is value else "key"
        stmt = stmt.join(
            a, (a.book_id == Book.id) & (a.role == role) & (a.field == f) & (a.model == model)
        )
    stmt = stmt.order_by(Book.id)
    # Rows go straight into preallocated (N, d) arrays, so loading never holds the catalog's
    # vectors twice; the count is a hint (an indexer may commit between the two statements).
    capacity = session.scalar(select(func.count()).select_from(stmt.subquery())) or 0
    dims = set(
        session.scalars(
            select(BookVector.dim)
            .where(BookVector.model == model, BookVector.field.in_([*fields, value_field]))
            .distinct()
        )
    )
    if len(dims) > 1:
        raise ValueError(f"vectors of model {model!r} have mixed dimensions {sorted(dims)}")
    d = dims.pop() if dims else 0
    keys = {f: np.empty((capacity, d), _NP_DTYPE) for f in fields}
    shared = keys.get(value_field)  # the value field's keys, which V usually equals
    values: np.ndarray | None = None  # allocated at the first value that differs from its key
    ids: list[str] = []
    titles: list[str] = []
    authors: list[list[str]] = []
    years: list[int | None] = []
    languages: list[str | None] = []
    n = capacity
    for i, row in enumerate(session.execute(stmt.execution_options(yield_per=10_000))):
        if i == n:  # more rows than counted
            keys = {f: _grow(a) for f, a in keys.items()}
            shared = keys.get(value_field)
            values = None if values is None else _grow(values)
            n = len(next(iter(keys.values())))
        ids.append(row[0])
        titles.append(row[1])
        authors.append(list(row[2] or []))
        years.append(row[3])
        languages.append(row[4])
        value_data: bytes = row[5]
        key_data: dict[str, bytes] = dict(zip(fields, row[6:], strict=True))
        for f, data in key_data.items():
            keys[f][i] = from_bytes(data, d)
        if values is None and (shared is None or value_data != key_data[value_field]):
            values = np.empty((n, d), _NP_DTYPE) if shared is None else shared.copy()
        if values is not None:
            values[i] = from_bytes(value_data, d)
    if len(ids) < n:  # fewer rows than counted
        keys = {f: a[: len(ids)].copy() for f, a in keys.items()}
        values = None if values is None else values[: len(ids)].copy()
    if values is None:  # every value equals its key (the indexer's V = K): half the memory
        values = keys[value_field] if value_field in keys else np.empty((len(ids), d), _NP_DTYPE)
    return LoadedIndex(
        ids=ids,
        titles=titles,
        authors=authors,
        years=years,
        languages=languages,
        keys=keys,
        values=values,
        model=model,
    )


def _grow(a: np.ndarray) -> np.ndarray:
    bigger = np.empty((max(2 * len(a), 1024), a.shape[1]), a.dtype)
    bigger[: len(a)] = a
    return bigger


def get_book(*, session: Session, book_id: str) -> Book | None:
    """The book, or None; also None, without a query, for an id no catalog row can have (too
    long, or with control characters: PostgreSQL refuses a NUL in a parameter outright)."""
    if not is_valid_id(book_id):
        return None
    return session.get(Book, book_id)


def book_descriptions(*, session: Session, book_ids: Sequence[str]) -> list[str | None]:
    """The descriptions of `book_ids`, in their order (None for a missing book): the lexical
    head's BM25 index is built from these, the titles and the authors."""
    found = {book_id: text for book_id, text in session.execute(select(Book.id, Book.description))}
    return [found.get(book_id) for book_id in book_ids]


def count_books(*, session: Session) -> int:
    return session.scalar(select(func.count()).select_from(Book)) or 0


def delete_books(*, session: Session, book_ids: Sequence[str]) -> int:
    result = session.execute(delete(Book).where(Book.id.in_(book_ids)))
    return int(result.rowcount)  # type: ignore[attr-defined]


def get_metadata(*, session: Session) -> dict[str, Any]:
    return {m.key: m.value for m in session.scalars(select(IndexMetadata))}


def set_metadata(*, session: Session, values: dict[str, Any]) -> None:
    _upsert(
        session,
        IndexMetadata.__table__,  # type: ignore[arg-type]
        [{"key": k, "value": v} for k, v in values.items()],
        ["key"],
    )


def _upsert(session: Session, table: Table, rows: list[dict[str, Any]], keys: list[str]) -> None:
    """INSERT … ON CONFLICT (keys) DO UPDATE, on PostgreSQL and SQLite alike."""
    if not rows:
        return
    dialect = session.get_bind().dialect.name
    if dialect == "postgresql":
        stmt: Any = postgresql.insert(table)
    elif dialect == "sqlite":
        stmt = sqlite.insert(table)
    else:
        raise NotImplementedError(f"Attend supports PostgreSQL and SQLite, not {dialect}")
    updates = {c: stmt.excluded[c] for c in rows[0] if c not in keys}
    session.execute(stmt.on_conflict_do_update(index_elements=keys, set_=updates), rows)
