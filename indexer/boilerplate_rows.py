"""A generation's boilerplate (indexer/boilerplate.py), found when it is written and kept with
it, so that every service serving it leaves the same sentences out, whether it built its index
whole or swapped to it from the generation before (service/engine/served_index.py).

A swap re-reads the changed books only. A book that did not change can still read differently
when the boilerplate changes: a sentence of its description that the new books made common (or
the removed ones rare). So when a generation's boilerplate differs from the active one's, each
unchanged book whose description holds one of those sentences gets a new row in the generation
(the same record and vectors: nothing is embedded again), and the swap reads it as changed.

Finding it reads the generation's descriptions and authors once (O(N), at index time only); a
change of the boilerplate reads the unchanged books' descriptions once more.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import UTC, datetime

from sqlalchemy import insert, select, update
from sqlalchemy.orm import Session

from indexer import store
from indexer.boilerplate import Boilerplate, text_keys
from indexer.schema import Book, BookVector
from indexer.text_column import TextColumn

logger = logging.getLogger(__name__)

_KEY = "boilerplate/{}"  # the index metadata's key of a generation's sentences
_CHUNK = 500  # rows renewed a statement at a time
_COPIED = ("id", "title", "description", "authors", "year", "language", "extra", "record_hash")


def stored(*, session: Session, generation: int | None) -> Boilerplate:
    """The boilerplate written with `generation` (none for a generation written without it)."""
    if generation is None:
        return Boilerplate()
    keys = store.get_metadata_value(session=session, key=_KEY.format(generation))
    return Boilerplate.of(keys or ())


def found(*, session: Session, generation: int) -> Boilerplate:
    """The boilerplate of the books of `generation`, from their descriptions and authors."""
    authors: list[list[str]] = []

    def descriptions() -> Iterator[str]:
        rows = session.execute(
            select(Book.description, Book.authors)
            .where(store.visible_at(generation))
            .order_by(Book.row_id)
            .execution_options(yield_per=2000)
        )
        for description, names in rows:
            authors.append(list(names or ()))
            yield description or ""

    column = TextColumn.of(descriptions())  # one column: not a str object per description
    return Boilerplate.found(column, authors)[0]


def settle(*, session: Session, generation: int, previous: int | None) -> tuple[Boilerplate, int]:
    """Find the boilerplate of the building `generation`, keep it with it, and renew the
    unchanged books it reads otherwise than `previous` (the active generation) did: the
    boilerplate and how many books were renewed."""
    now = found(session=session, generation=generation)
    moved = now.keys ^ stored(session=session, generation=previous).keys
    renewed = _renew(session, generation, _holding(session, generation, moved)) if moved else 0
    store.set_metadata(session=session, values={_KEY.format(generation): sorted(now.keys)})
    if renewed:
        logger.info("%d unchanged books renewed: the boilerplate they hold changed", renewed)
    return now, renewed


def _holding(session: Session, generation: int, keys: frozenset[str]) -> list[int]:
    """Rows of the books that `generation` kept from before whose description holds a
    sentence of `keys`."""
    rows = session.execute(
        select(Book.row_id, Book.description)
        .where(store.visible_at(generation), Book.valid_from < generation)
        .execution_options(yield_per=2000)
    )
    return [r for r, text in rows if text and not keys.isdisjoint(text_keys(text))]


def _renew(session: Session, generation: int, row_ids: list[int]) -> int:
    """A new row in `generation` for each of `row_ids`, the same record and vectors; the old
    rows closed."""
    at = datetime.now(UTC)
    for i in range(0, len(row_ids), _CHUNK):
        chunk = row_ids[i : i + _CHUNK]
        columns = [getattr(Book, c) for c in _COPIED]
        old = session.execute(
            select(Book.row_id, *columns).where(Book.row_id.in_(chunk)).order_by(Book.row_id)
        ).all()
        rows = [
            {**dict(zip(_COPIED, r[1:], strict=True)), "valid_from": generation, "updated_at": at}
            for r in old
        ]
        # closed first: a book has one open row (a unique index on the open rows' ids)
        session.execute(update(Book).where(Book.row_id.in_(chunk)).values(valid_to=generation))
        new_ids = session.scalars(
            insert(Book).returning(Book.row_id, sort_by_parameter_order=True), rows
        ).all()
        new_of = {r[0]: n for r, n in zip(old, new_ids, strict=True)}
        links = session.execute(
            select(
                BookVector.version_id, BookVector.role, BookVector.field, BookVector.vector_id
            ).where(BookVector.version_id.in_(chunk))
        ).all()
        session.execute(
            insert(BookVector),
            [
                {"version_id": new_of[v], "role": role, "field": f, "vector_id": vec}
                for v, role, f, vec in links
            ],
        )
        session.execute(update(Book).where(Book.row_id.in_(chunk)).values(valid_to=generation))
    return len(row_ids)
