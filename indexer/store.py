"""Reads of the books at a generation (one book, descriptions, subjects, counts), the active
generation, and the index's metadata. Keyword-only `session=` functions that never commit.

The keys loaded into arrays are indexer/loaded_index.py. Writes live in `indexer.batches`
(books and vectors) and `indexer.generations` (snapshots); `set_metadata` here is the one write
(the run's last step records the model and dimension it indexed with).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, Table, and_, func, or_, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from indexer.catalog import is_valid_id
from indexer.catalog.columns import normal_name
from indexer.schema import ACTIVE, Book, Generation, IndexMetadata


def visible_at(generation: int) -> ColumnElement[bool]:
    """The book rows that make up `generation`."""
    return and_(
        Book.valid_from <= generation,
        or_(Book.valid_to.is_(None), Book.valid_to > generation),
    )


def _rows_of(generation: int, since: int | None) -> ColumnElement[bool]:
    """The book rows of `generation`, those new after `since` only where it is given."""
    visible = visible_at(generation)
    return visible if since is None else and_(visible, Book.valid_from > since)


def active_generation(*, session: Session) -> Generation | None:
    return session.scalars(select(Generation).where(Generation.state == ACTIVE)).first()


def active_generation_id(*, session: Session) -> int | None:
    """The generation a service should answer from (one cheap indexed query: safe to poll)."""
    return session.scalar(select(Generation.id).where(Generation.state == ACTIVE))


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
    *,
    session: Session,
    book_ids: Sequence[str],
    generation: int | None = None,
    since: int | None = None,
) -> list[str | None]:
    """The descriptions of `book_ids` in `generation` (default: the active one), in their order
    (None for a missing book): the lexical head's BM25 index is built from these, the titles and
    the authors. `since`: only the rows new after generation `since` are read (a swap's
    changed books: `book_ids` are among them)."""
    if generation is None:
        generation = active_generation_id(session=session)
    if generation is None:
        return [None] * len(book_ids)
    stmt = select(Book.id, Book.description).where(_rows_of(generation, since))
    found = {book_id: text for book_id, text in session.execute(stmt)}
    return [found.get(book_id) for book_id in book_ids]


# the metadata fields a catalog's subject headings, genres or tags come under (CSV or JSONL)
SUBJECT_FIELDS = ("subjects", "subject", "genres", "genre", "tags", "categories")
# the metadata field of the series a book belongs to (Calibre's; a MARC record's numbered ones):
# a string, or a list of them
SERIES_FIELD = "series"
# the metadata fields of the publishers of a book (Goodreads', Calibre's and the shared catalog's
# `publisher`, a MARC record's 260/264 $b, Open Library's `publishers`): a string, a list of
# them, or one string of several separated by `;` (a publisher's own name may hold a comma)
PUBLISHER_FIELDS = ("publisher", "publishers")
# the metadata fields of a book's ISBNs, in any case (a list or one value each): a reader may
# type one in the search box (service/engine/isbn_lookup.py)
ISBN_FIELDS = frozenset({"isbn", "isbn13", "isbn_13", "isbn10", "isbn_10", "isbns", "isbn/uid"})
# the metadata fields of a book's average rating by its readers (the shared catalog's and
# goodbooks-10k's `average_rating`, Goodreads' `Average Rating`; not a reader's own `Rating`)
AVERAGE_RATING_FIELDS = ("average_rating", "avg_rating")
# the metadata fields of how many readers rated a book (Goodreads' `ratings_count`)
RATINGS_FIELDS = ("ratings_count", "num_ratings", "rating_count", "number_of_ratings")


@dataclass(frozen=True)
class BookExtras:
    """What the service reads of the books' metadata, each list in the order of the ids asked."""

    subjects: list[tuple[str, ...]]  # their subject headings, () for a book without any
    rating_counts: list[int | None]  # how many readers rated them, None where not known
    series: list[tuple[str, ...]]  # the series their rows name, () for a book without any
    isbns: list[tuple[str, ...]]  # the texts of their ISBN fields, () for a book without any
    ratings: list[float | None]  # their readers' average rating, None where not known
    publishers: list[tuple[str, ...]]  # their publishers, () for a book without any


def book_extras(
    *,
    session: Session,
    book_ids: Sequence[str],
    generation: int | None = None,
    since: int | None = None,
) -> BookExtras:
    """What the service reads of the metadata of `book_ids` in `generation` (default: the
    active one), from one read: the subject headings (or genres, tags: the first of
    `SUBJECT_FIELDS` a book has: a list of strings, or one string of them separated by `;`,
    else by `,`), the readers' rating counts (the first of `RATINGS_FIELDS`: a non-negative
    integer, or its digits as text), the series (`SERIES_FIELD`: a string or a list of them),
    the ISBNs (`ISBN_FIELDS`, each a string, an integer or a list), the average rating (the
    first of `AVERAGE_RATING_FIELDS`: a finite number, or its text) and the publishers (the
    first of `PUBLISHER_FIELDS`, each once). Field names are matched
    case-insensitively, a space or a hyphen read as an underscore (Goodreads' `Average
    Rating`, `ISBN-13`). `since`:
    as `book_descriptions`."""
    if generation is None:
        generation = active_generation_id(session=session)
    n = len(book_ids)
    if generation is None:
        none: list[tuple[str, ...]] = [()] * n
        return BookExtras(none, [None] * n, none, none, [None] * n, none)
    stmt = select(Book.id, Book.extra).where(_rows_of(generation, since))
    found = {book_id: _extras(extra or {}) for book_id, extra in session.execute(stmt)}
    got = [found.get(book_id, ((), None, (), (), None, ())) for book_id in book_ids]
    return BookExtras(
        [g[0] for g in got],
        [g[1] for g in got],
        [g[2] for g in got],
        [g[3] for g in got],
        [g[4] for g in got],
        [g[5] for g in got],
    )


def _extras(
    extra: dict[str, Any],
) -> tuple[
    tuple[str, ...], int | None, tuple[str, ...], tuple[str, ...], float | None, tuple[str, ...]
]:
    # names as the catalog reader reads them: any case, a space or a hyphen an underscore
    named = {normal_name(k): v for k, v in extra.items() if isinstance(k, str)}
    return (
        _subjects(named),
        _rating_count(named),
        _series(named),
        _isbns(named),
        _average_rating(named),
        _publishers(named),
    )


def _subjects(named: dict[str, Any]) -> tuple[str, ...]:
    for name in SUBJECT_FIELDS:
        value = named.get(name)
        if isinstance(value, str):
            value = value.split(";" if ";" in value else ",")
        if isinstance(value, list):
            found = tuple(v.strip() for v in value if isinstance(v, str) and v.strip())
            if found:
                return found
    return ()


def _series(named: dict[str, Any]) -> tuple[str, ...]:
    value = named.get(SERIES_FIELD)
    values = [value] if isinstance(value, str) else value if isinstance(value, list) else []
    return tuple(v.strip() for v in values if isinstance(v, str) and v.strip())


def _publishers(named: dict[str, Any]) -> tuple[str, ...]:
    for name in PUBLISHER_FIELDS:
        value = named.get(name)
        values = value.split(";") if isinstance(value, str) else value
        if isinstance(values, list):
            found = dict.fromkeys(v.strip() for v in values if isinstance(v, str) and v.strip())
            if found:
                return tuple(found)
    return ()


def _isbns(named: dict[str, Any]) -> tuple[str, ...]:
    found: list[str] = []
    for key, value in named.items():
        if key in ISBN_FIELDS:
            values = value if isinstance(value, list) else [value]
            found += [str(v) for v in values if isinstance(v, str | int) and v is not True]
    return tuple(found)


def _average_rating(named: dict[str, Any]) -> float | None:
    for name in AVERAGE_RATING_FIELDS:
        value = named.get(name)
        if isinstance(value, str):
            try:
                value = float(value.strip())
            except ValueError:
                continue
        if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
            return float(value)
    return None


def _rating_count(named: dict[str, Any]) -> int | None:
    for name in RATINGS_FIELDS:
        value = named.get(name)
        if isinstance(value, str) and value.strip().isdigit():
            value = int(value.strip())
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
    return None


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


def get_metadata_value(*, session: Session, key: str) -> Any:
    """One value of the index metadata, None when it has none under `key`."""
    return session.scalar(select(IndexMetadata.value).where(IndexMetadata.key == key))


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
