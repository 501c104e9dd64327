"""The index loaded into arrays: every book of a generation with its keys (and values) as one
contiguous (N, d) float32 array per key field, in book-id order, and a diff between two
generations folded into a loaded index. Keyword-only `session=` functions that never commit.

`load_index` reads a whole generation, `load_diff` only what changed between two, and
`apply_diff` folds a diff into a loaded index (how a service follows new generations).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from sqlalchemy import ColumnElement, Select, and_, false, select
from sqlalchemy.orm import Session, aliased

from indexer.book_columns import BookColumns
from indexer.schema import Book, BookVector, Vector
from indexer.store import active_generation_id, visible_at
from indexer.vector_format import NP_DTYPE, from_bytes

_ID_CHUNK = 2000  # vector ids per IN (...) list
_ROW_CHUNK = 10_000  # books read at a time
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
    def ids(self) -> Sequence[str]:
        return self.books.ids


@dataclass(frozen=True)
class IndexDiff:
    """What changed from generation `since` to `until`: an updated book is in both lists."""

    since: int
    until: int
    removed: list[str]  # ids whose row at `since` is gone at `until`
    added: LoadedIndex  # rows new at `until` (added or updated books)


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


def diff_order(
    index: LoadedIndex, diff: IndexDiff, row_of: Callable[[str], int | None] | None = None
) -> np.ndarray:
    """Where each row of `index` moved by `diff` comes from: (N_after,) int64, a row of `index`
    (< len(index)) or len(index) + a row of `diff.added`. `row_of`: the row of an id in
    `index` (a dict of every id is made without it).

    The rows kept stay in their order, and each added row goes where id order puts it among
    them (Python's order of the ids: a PostgreSQL collation may order the rows `index` was
    loaded in otherwise; any order serves, one fixed per generation). O(changed · log N)."""
    ids, add = index.ids, diff.added
    if row_of is None:
        rows = {book: i for i, book in enumerate(ids)}
        row_of = rows.get
    n, added = len(index), len(add)
    drop = {r for book in (*diff.removed, *add.ids) if (r := row_of(book)) is not None}
    dropped = np.array(sorted(drop), np.int64)
    keep = np.ones(n, np.bool_)
    keep[dropped] = False
    # where each added id goes among the kept ids: its place among all, less the dropped before
    at = [bisect.bisect_left(ids, book) for book in add.ids]
    place = np.array(at, np.int64) - np.searchsorted(dropped, at)
    by_place = sorted(range(added), key=lambda i: (int(place[i]), add.ids[i]))
    new_row = place[by_place] + np.arange(added)  # each added row's row, in `by_place` order
    order = np.empty(n - len(dropped) + added, np.int64)
    is_new = np.zeros(len(order), np.bool_)
    is_new[new_row] = True
    order[~is_new] = np.flatnonzero(keep)
    order[new_row] = n + np.array(by_place, np.int64)
    return order


def apply_diff(index: LoadedIndex, diff: IndexDiff, order: np.ndarray | None = None) -> LoadedIndex:
    """`index` (at `diff.since`) moved to `diff.until`, its rows from where `order` says
    (default: `diff_order(index, diff)`); `index` is not changed. O(N) numpy: the keys and the
    text columns gathered."""
    if order is None:
        order = diff_order(index, diff)
    n, add = len(index), diff.added
    is_new = order >= n

    def merged(old: np.ndarray, new: np.ndarray) -> np.ndarray:
        d = old.shape[1] if len(old) else new.shape[1]
        # every entry is written below: not zeroed first (zeroing a fresh (d, N) array page by
        # page cost 6x the gather itself)
        out = np.empty((d, len(order)), NP_DTYPE).T
        # along the (d, N) transposes' contiguous rows: 2x a gather of (N, d) rows
        if len(old):
            np.take(old.T, np.where(is_new, 0, order), axis=1, out=out.T, mode="clip")
        if is_new.any():
            out[is_new] = new[order[is_new] - n]
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
        books=(index.books + add.books).take(order),
        keys=keys,
        values=values,
        model=index.model,
        generation=diff.until,
    )


def _column_major(n: int, d: int) -> np.ndarray:
    """A zeroed (n, d) array stored column by column: the layout the served index streams (it reads
    the contiguous (d, n) transpose), so handing the array to the service copies nothing."""
    return np.zeros((d, n), NP_DTYPE).T


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
    books, vector_ids = _read_books(session, stmt, len(slots))  # type: ignore[arg-type]
    ids, n = books.ids, len(books)
    wanted = np.unique(vector_ids)  # sorted
    d = 0
    keys = {f: np.empty((n, 0), NP_DTYPE) for f in fields}
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
            keys = {f: _column_major(n, d) for f in fields}
            values = None if shared else _column_major(n, d)
            targets = [keys[f] for f in fields] + ([] if values is None else [values])
        table = np.zeros((len(chunk), d), NP_DTYPE)  # (chunk, d), in `chunk`'s order
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
    ok = ~np.isin(vector_ids, bad).any(axis=1) if bad else np.ones(n, dtype=bool)
    if not ok.all():
        keep = np.flatnonzero(ok)
        books = books.take(keep.tolist())
        ids = books.ids
        keys = {f: np.asfortranarray(k[keep]) for f, k in keys.items()}
        values = None if values is None else np.asfortranarray(values[keep])
    if values is None:  # every value is its key's vector (the indexer's V = K): half the memory
        values = keys[value_field] if value_field in keys else np.empty((len(ids), d), NP_DTYPE)
    return LoadedIndex(
        books=books,
        keys=keys,
        values=values,
        model=model,
        generation=generation,
    )


def _read_books(session: Session, stmt: Select[Any], slots: int) -> tuple[BookColumns, np.ndarray]:
    """The books of `stmt`'s rows (id, title, authors, year, language, then `slots` vector
    ids) and their (N, slots) int64 vector ids.

    The rows a chunk at a time, each chunk's columns kept and its Row objects freed: all
    100,000 at once left ~60 MiB of heap behind them in the resident memory, between the
    strings kept. One object per distinct name, year, language and authors' credit, not one
    per book (each row's are its own, decoded from the database: 190 bytes a book of authors'
    names, and ~100 of its list of them); the ids and titles end as `TextColumn`s."""
    one: dict[object, Any] = {}
    ids: list[str] = []
    titles: list[str] = []
    authors: list[list[str]] = []
    years: list[int | None] = []
    languages: list[str | None] = []
    linked: list[np.ndarray] = []  # each part's (R, slots) vector ids
    for part in session.execute(stmt.execution_options(yield_per=_ROW_CHUNK)).partitions():
        for r in part:
            ids.append(r[0])
            titles.append(r[1])
            # one list per distinct authors' credit, shared by the books it credits: nothing
            # mutates a book's authors (a response copies them)
            names = tuple(one.setdefault(a, a) for a in r[2] or ())
            authors.append(one.setdefault(("authors", names), list(names)))
            years.append(one.setdefault(r[3], r[3]))
            languages.append(one.setdefault(r[4], r[4]))
        linked.append(np.array([r[5:] for r in part], dtype=np.int64).reshape(-1, slots))
    vector_ids = np.concatenate(linked) if linked else np.zeros((0, slots), np.int64)
    books = BookColumns(ids=ids, titles=titles, authors=authors, years=years, languages=languages)
    del ids, titles  # their str objects go now: the columns hold the text
    return books, vector_ids
