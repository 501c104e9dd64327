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
from typing import Any

import numpy as np
from sqlalchemy import ColumnElement, Table, and_, false, func, or_, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session, aliased

from indexer.book_columns import BookColumns
from indexer.catalog import CatalogRecord, is_valid_id
from indexer.schema import ACTIVE, Book, BookVector, Generation, IndexMetadata, Vector

DTYPE = "float32"
_NP_DTYPE = np.dtype("<f4")
_ID_CHUNK = 2000  # vector ids per IN (...) list
KEY_FIELDS = ("title", "description")  # one key per field and book
VALUE_FIELD = "description"  # the field whose vector is also the book's value


@dataclass(frozen=True)
class LoadedIndex:
    """Everything the attention core needs, aligned by row: row i is book ids[i]."""

    books: BookColumns
    keys: dict[str, np.ndarray]  # field → (N, d) float32, stored column-major
    model: str
    generation: int | None = None  # the snapshot these rows are; None: no index yet
    # (N, d) float32; the value field's keys array itself when V = K. None where a reader kept
    # only the keys (the service: a search returns weights, not weights @ V)
    values: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.books)

    @property
    def ids(self) -> list[str]:
        return self.books.ids


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
        d = max(old.shape[1], new.shape[1])
        out = _column_major(len(order), d)
        from_old = np.flatnonzero(order < len(keep))  # output rows kept from `old`
        from_new = np.flatnonzero(order >= len(keep))
        if len(from_old):
            out[from_old] = old[keep[order[from_old]]]
        if len(from_new):
            out[from_new] = new[order[from_new] - len(keep)]
        return out

    keys = {f: merged(index.keys[f], add.keys[f]) for f in index.keys}
    shared = [
        f for f in index.keys if index.values is index.keys[f] and add.values is add.keys.get(f)
    ]
    if index.values is None or add.values is None:
        values = None
    else:
        values = keys[shared[0]] if shared else merged(index.values, add.values)
    return LoadedIndex(
        books=(index.books.take(keep.tolist()) + add.books).take(order.tolist()),
        keys=keys,
        values=values,
        model=index.model,
        generation=diff.until,
    )


def _column_major(n: int, d: int) -> np.ndarray:
    """A zeroed (n, d) array stored column by column: the layout the served index streams (it reads
    the contiguous (d, n) transpose), so handing the array to the service copies nothing."""
    return np.zeros((d, n), _NP_DTYPE).T


def _load(
    session: Session,
    model: str,
    generation: int | None,
    *,
    where: ColumnElement[bool] | None,
    fields: Sequence[str],
    value_field: str,
) -> LoadedIndex:
    """Two steps, so no plan ever joins `vectors` on anything but its primary key: the rows
    with the ids of their vectors (primary-key lookups in `version_vectors`), then the vectors
    themselves by id, each distinct one read once, straight into preallocated (N, d) arrays."""
    slots = [*(("key", f) for f in fields), ("value", value_field)]
    links = [aliased(BookVector) for _ in slots]
    stmt = select(
        Book.id, Book.title, Book.authors, Book.year, Book.language, *(a.vector_id for a in links)
    )
    for (role, f), link in zip(slots, links, strict=True):
        stmt = stmt.join(
            link, (link.version_id == Book.row_id) & (link.role == role) & (link.field == f)
        )
    stmt = stmt.where(where if where is not None else false()).order_by(Book.id)
    rows = session.execute(stmt).all()
    ids = [r[0] for r in rows]
    vector_ids = np.array([r[5:] for r in rows], dtype=np.int64).reshape(len(rows), len(slots))
    wanted = np.unique(vector_ids)  # sorted
    d = 0
    keys = {f: np.empty((len(rows), 0), _NP_DTYPE) for f in fields}
    shared = value_field in fields and bool(
        np.all(vector_ids[:, -1] == vector_ids[:, list(fields).index(value_field)])
    )
    values: np.ndarray | None = None  # stays None when V = K: the value field's keys array
    targets = [keys[f] for f in fields]
    order = [np.argsort(vector_ids[:, j], kind="stable") for j in range(len(slots))]
    ordered = [vector_ids[order[j], j] for j in range(len(slots))]
    bad: list[int] = []  # ids of vectors of another model
    for i in range(0, len(wanted), _ID_CHUNK):
        chunk = wanted[i : i + _ID_CHUNK]
        found = session.execute(
            select(Vector.id, Vector.model, Vector.dim, Vector.data).where(
                Vector.id.in_([int(v) for v in chunk])
            )
        ).all()
        if not d and found:
            d = found[0][2]
            keys = {f: _column_major(len(rows), d) for f in fields}
            values = None if shared else _column_major(len(rows), d)
            targets = [keys[f] for f in fields] + ([] if values is None else [values])
        table = np.zeros((len(chunk), d), _NP_DTYPE)  # (chunk, d), in `chunk`'s order
        for vid, vmodel, dim, data in found:
            if vmodel != model:
                bad.append(vid)
                continue
            if dim != d:
                raise ValueError(f"vectors of model {model!r} have mixed dimensions {d}, {dim}")
            table[np.searchsorted(chunk, vid)] = from_bytes(data, dim)
        for j, target in enumerate(targets):  # the value slot is last, absent when V = K
            lo = np.searchsorted(ordered[j], chunk[0], side="left")
            hi = np.searchsorted(ordered[j], chunk[-1], side="right")
            target[order[j][lo:hi]] = table[np.searchsorted(chunk, ordered[j][lo:hi])]
    ok = ~np.isin(vector_ids, bad).any(axis=1) if bad else np.ones(len(rows), dtype=bool)
    if not ok.all():
        keep = np.flatnonzero(ok)
        rows = [rows[int(i)] for i in keep]
        ids = [ids[int(i)] for i in keep]
        keys = {f: np.asfortranarray(k[keep]) for f, k in keys.items()}
        values = None if values is None else np.asfortranarray(values[keep])
    if values is None:  # every value is its key's vector (the indexer's V = K): half the memory
        values = keys[value_field] if value_field in keys else np.empty((len(ids), d), _NP_DTYPE)
    books = BookColumns(
        ids=ids,
        titles=[r[1] for r in rows],
        authors=[list(r[2] or []) for r in rows],
        years=[r[3] for r in rows],
        languages=[r[4] for r in rows],
    )
    return LoadedIndex(
        books=books,
        keys=keys,
        values=values,
        model=model,
        generation=generation,
    )


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


# the metadata fields a catalog's subject headings, genres or tags come under (CSV or JSONL)
SUBJECT_FIELDS = ("subjects", "subject", "genres", "genre", "tags", "categories")


def book_subjects(
    *, session: Session, book_ids: Sequence[str], generation: int | None = None
) -> list[tuple[str, ...]]:
    """The subject headings (or genres, tags: `SUBJECT_FIELDS`, the first a book has) of
    `book_ids` in `generation` (default: the active one), in their order: a list of strings,
    or one string of `;`-separated headings. () for a book without any."""
    if generation is None:
        generation = active_generation_id(session=session)
    if generation is None:
        return [()] * len(book_ids)
    stmt = select(Book.id, Book.extra).where(visible_at(generation))
    found = {book_id: _subjects(extra or {}) for book_id, extra in session.execute(stmt)}
    return [found.get(book_id, ()) for book_id in book_ids]


def _subjects(extra: dict[str, Any]) -> tuple[str, ...]:
    for name in SUBJECT_FIELDS:
        value = extra.get(name)
        if isinstance(value, str):
            value = value.split(";")
        if isinstance(value, list):
            found = tuple(v.strip() for v in value if isinstance(v, str) and v.strip())
            if found:
                return found
    return ()


def count_books(*, session: Session, generation: int | None = None) -> int:
    """Books in `generation` (default: the active one)."""
    if generation is None:
        generation = active_generation_id(session=session)
    if generation is None:
        return 0
    return session.scalar(select(func.count()).select_from(Book).where(visible_at(generation))) or 0


INDEX_ID_KEY = "index_id"  # written once by migration 0003, when the database is made


def index_id(*, session: Session) -> str | None:
    """The database's identity: a random id its creation wrote. Another id means another
    database (dropped and re-created, a SQLite file replaced), whatever its generation ids."""
    value = session.scalar(select(IndexMetadata.value).where(IndexMetadata.key == INDEX_ID_KEY))
    return None if value is None else str(value)


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
