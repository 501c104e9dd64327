"""Reads of the index at a generation. Keyword-only `session=` functions that never commit.

Vectors travel as little-endian float32 bytes; `load_index` returns them as one contiguous
(N, d) array per key field and one for the values, in book-id order. `load_diff` reads only
what changed between two generations and `apply_diff` folds it into a loaded index.
Writes live in `indexer.batches` (books and vectors) and `indexer.generations` (snapshots).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
from sqlalchemy import ColumnElement, Table, and_, false, func, or_, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session, aliased

from indexer.catalog import CatalogRecord, is_valid_id
from indexer.schema import ACTIVE, Book, BookVector, Generation, IndexMetadata, Vector

DTYPE = "float32"
_NP_DTYPE = np.dtype("<f4")
KEY_FIELDS = ("title", "description")  # one key per field and book
VALUE_FIELD = "description"  # the field whose vector is also the book's value


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
    generation: int | None = None  # the snapshot these rows are; None: no index yet

    def __len__(self) -> int:
        return len(self.ids)


@dataclass(frozen=True)
class IndexDiff:
    """What changed from generation `since` to `until`: an updated book is in both lists."""

    since: int
    until: int
    removed: list[str]  # ids whose row at `since` is gone at `until`
    added: LoadedIndex  # rows new at `until` (added or updated books)


def content_hash(model: str, text: str) -> str:
    """What a vector was made from: the model and the exact text embedded."""
    return hashlib.sha256(f"{model}\x00{text}".encode()).hexdigest()


def record_hash(model: str, record: CatalogRecord) -> str:
    """What a book row was made from: the model and every field of the record."""
    fields = [
        record.id,
        record.title,
        record.description,
        record.authors,
        record.year,
        record.language,
        record.extra,
    ]
    payload = json.dumps([model, *fields], sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()


def to_bytes(vector: np.ndarray) -> bytes:
    return np.ascontiguousarray(vector, dtype=_NP_DTYPE).tobytes()


def from_bytes(data: bytes, dim: int) -> np.ndarray:
    vector = np.frombuffer(data, dtype=_NP_DTYPE)
    if vector.shape != (dim,):
        raise ValueError(f"stored vector has {vector.size} floats, its row says dim={dim}")
    return vector


def visible_at(generation: int) -> ColumnElement[bool]:
    """The book rows that make up `generation`."""
    return and_(
        Book.valid_from <= generation,
        or_(Book.valid_to.is_(None), Book.valid_to > generation),
    )


def active_generation(*, session: Session) -> Generation | None:
    return session.scalars(select(Generation).where(Generation.state == ACTIVE)).first()


def active_generation_id(*, session: Session) -> int | None:
    """The generation a service should answer from (one cheap indexed query: safe to poll)."""
    return session.scalar(select(Generation.id).where(Generation.state == ACTIVE))


def load_index(
    *,
    session: Session,
    model: str,
    generation: int | None = None,
    fields: Sequence[str] = KEY_FIELDS,
    value_field: str = VALUE_FIELD,
) -> LoadedIndex:
    """Every book of `generation` (default: the active one) with a key for each of `fields`
    and a value made by `model`, in id order."""
    if generation is None:
        generation = active_generation_id(session=session)
    if generation is None:
        return _load(session, model, None, where=None, fields=fields, value_field=value_field)
    where = visible_at(generation)
    return _load(session, model, generation, where=where, fields=fields, value_field=value_field)


def load_diff(
    *,
    session: Session,
    model: str,
    since: int,
    until: int,
    fields: Sequence[str] = KEY_FIELDS,
    value_field: str = VALUE_FIELD,
) -> IndexDiff:
    """The rows that differ between generations `since` and `until` (> since)."""
    gone = and_(
        Book.valid_from <= since, Book.valid_to > since, Book.valid_to <= until
    )  # visible at `since`, not at `until`
    removed = list(session.scalars(select(Book.id).where(gone)))
    new = and_(visible_at(until), Book.valid_from > since)
    added = _load(session, model, until, where=new, fields=fields, value_field=value_field)
    return IndexDiff(since, until, removed, added)


def apply_diff(index: LoadedIndex, diff: IndexDiff) -> LoadedIndex:
    """`index` (at `diff.since`) moved to `diff.until`, in id order; `index` is not changed."""
    drop = set(diff.removed) | set(diff.added.ids)
    keep = np.array([i for i, book in enumerate(index.ids) if book not in drop], dtype=np.int64)
    add = diff.added
    ids = [index.ids[i] for i in keep] + add.ids
    order = np.array(sorted(range(len(ids)), key=ids.__getitem__), dtype=np.int64)

    def merged(old: np.ndarray, new: np.ndarray) -> np.ndarray:
        if len(new) == 0:
            return old[keep[order]] if len(order) else old[:0].copy()
        if len(old) == 0 or old.shape[1] == 0:
            return np.ascontiguousarray(new[order])
        return np.concatenate([old[keep], new])[order]

    def pick(values: list[Any], new: list[Any]) -> list[Any]:
        both = [values[i] for i in keep] + new
        return [both[i] for i in order]

    keys = {f: merged(index.keys[f], add.keys[f]) for f in index.keys}
    shared = [
        f for f in index.keys if index.values is index.keys[f] and add.values is add.keys.get(f)
    ]
    values = keys[shared[0]] if shared else merged(index.values, add.values)
    return LoadedIndex(
        ids=[ids[i] for i in order],
        titles=pick(index.titles, add.titles),
        authors=pick(index.authors, add.authors),
        years=pick(index.years, add.years),
        languages=pick(index.languages, add.languages),
        keys=keys,
        values=values,
        model=index.model,
        generation=diff.until,
    )


def _load(
    session: Session,
    model: str,
    generation: int | None,
    *,
    where: ColumnElement[bool] | None,
    fields: Sequence[str],
    value_field: str,
) -> LoadedIndex:
    keys_of = {f: (aliased(BookVector), aliased(Vector)) for f in fields}
    value_link, value = aliased(BookVector), aliased(Vector)
    stmt = select(
        Book.id,
        Book.title,
        Book.authors,
        Book.year,
        Book.language,
        value.id,
        value.dim,
        value.data,
        *(v.id for _, v in keys_of.values()),
        *(v.dim for _, v in keys_of.values()),
        *(v.data for _, v in keys_of.values()),
    )
    for (f, role), (link, vector) in (
        *(((f, "key"), lv) for f, lv in keys_of.items()),
        ((value_field, "value"), (value_link, value)),
    ):
        stmt = stmt.join(
            link, (link.version_id == Book.row_id) & (link.role == role) & (link.field == f)
        ).join(vector, (vector.id == link.vector_id) & (vector.model == model))
    stmt = stmt.where(where if where is not None else false()).order_by(Book.id)
    # Rows go straight into preallocated (N, d) arrays, so loading never holds the catalog's
    # vectors twice; the count is a hint (an indexer may commit between the two statements).
    capacity = session.scalar(select(func.count()).select_from(stmt.subquery())) or 0
    dims = set(session.scalars(select(Vector.dim).where(Vector.model == model).distinct().limit(2)))
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
    n, nf = capacity, len(fields)
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
        value_id: int = row[5]
        key_ids = dict(zip(fields, cast("tuple[int, ...]", row[8 : 8 + nf]), strict=True))
        for j, f in enumerate(fields):
            keys[f][i] = from_bytes(row[8 + 2 * nf + j], row[8 + nf + j])  # type: ignore[arg-type]
        if values is None and (shared is None or value_id != key_ids[value_field]):
            values = np.empty((n, d), _NP_DTYPE) if shared is None else shared.copy()
        if values is not None:
            values[i] = from_bytes(row[7], row[6])
    if len(ids) < n:  # fewer rows than counted
        keys = {f: a[: len(ids)].copy() for f, a in keys.items()}
        values = None if values is None else values[: len(ids)].copy()
    if values is None:  # every value is its key's vector (the indexer's V = K): half the memory
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
        generation=generation,
    )


def _grow(a: np.ndarray) -> np.ndarray:
    bigger = np.empty((max(2 * len(a), 1024), a.shape[1]), a.dtype)
    bigger[: len(a)] = a
    return bigger


def get_book(*, session: Session, book_id: str, generation: int | None = None) -> Book | None:
    """The book as it is in `generation` (default: the active one), or None; also None, without
    a query, for an id no catalog row can have (too long, or with control characters:
    PostgreSQL refuses a NUL in a parameter outright)."""
    if not is_valid_id(book_id):
        return None
    if generation is None:
        generation = active_generation_id(session=session)
    if generation is None:
        return None
    return session.scalars(select(Book).where(Book.id == book_id, visible_at(generation))).first()


def book_descriptions(
    *, session: Session, book_ids: Sequence[str], generation: int | None = None
) -> list[str | None]:
    """The descriptions of `book_ids` in `generation` (default: the active one), in their order
    (None for a missing book): the lexical head's BM25 index is built from these, the titles and
    the authors."""
    if generation is None:
        generation = active_generation_id(session=session)
    if generation is None:
        return [None] * len(book_ids)
    stmt = select(Book.id, Book.description).where(visible_at(generation))
    found = {book_id: text for book_id, text in session.execute(stmt)}
    return [found.get(book_id) for book_id in book_ids]


def count_books(*, session: Session, generation: int | None = None) -> int:
    """Books in `generation` (default: the active one)."""
    if generation is None:
        generation = active_generation_id(session=session)
    if generation is None:
        return 0
    return session.scalar(select(func.count()).select_from(Book).where(visible_at(generation))) or 0


def get_metadata(*, session: Session) -> dict[str, Any]:
    return {m.key: m.value for m in session.scalars(select(IndexMetadata))}


def set_metadata(*, session: Session, values: dict[str, Any]) -> None:
    upsert(
        session,
        IndexMetadata.__table__,  # type: ignore[arg-type]
        [{"key": k, "value": v} for k, v in values.items()],
        ["key"],
    )


def upsert(session: Session, table: Table, rows: list[dict[str, Any]], keys: list[str]) -> None:
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
