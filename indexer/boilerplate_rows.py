"""A generation's boilerplate (indexer/boilerplate.py), found when it is written and kept with
it, so that every service serving it leaves the same sentences out, whether it built its index
whole or swapped to it from the generation before (service/engine/served_index.py).

A swap re-reads the changed books only. A book that did not change can still read differently
when the boilerplate changes: a sentence of its description that the new books made common (or
the removed ones rare). So when a generation's boilerplate differs from the active one's, each
unchanged book whose description holds one of those sentences gets a new row in the generation
(the same record and vectors: nothing is embedded again), and the swap reads it as changed.

What it costs, at index time only: a generation that wrote or closed few books counts only
their sentences again, over the books holding them (one query); any other reads every
description and author once (O(N)), and, where the boilerplate changed, the unchanged books'
descriptions once more.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from datetime import UTC, datetime

from sqlalchemy import insert, or_, select, update
from sqlalchemy.orm import Session

from indexer import store
from indexer.boilerplate import MIN_AUTHORS, Boilerplate, author_key, text_keys
from indexer.schema import Book, BookVector
from indexer.text_column import TextColumn

logger = logging.getLogger(__name__)

_KEY = "boilerplate/{}"  # the index metadata's key: a generation's sentences and authors
INCREMENTAL_KEYS = 256  # sentences of the changed books counted again alone, at most
# a word of a sentence key, as the descriptions holding it write it but for case: ASCII letters,
# which SQLite's LIKE folds (not other letters) and no LIKE pattern character
_WORD = re.compile(r"[a-z]{3,}")
_CHUNK = 500  # rows renewed a statement at a time
_COPIED = ("id", "title", "description", "authors", "year", "language", "extra", "record_hash")


def stored(*, session: Session, generation: int | None) -> Boilerplate:
    """The boilerplate written with `generation` (none for a generation written without it)."""
    return kept(session=session, generation=generation) or Boilerplate()


def kept(*, session: Session, generation: int | None) -> Boilerplate | None:
    """The boilerplate written with `generation`, None where it has none (a generation older
    than this code, or none at all)."""
    if generation is None:
        return None
    held = store.get_metadata_value(session=session, key=_KEY.format(generation))
    if not isinstance(held, dict):
        return None
    return Boilerplate(frozenset(held), {k: int(n) for k, n in held.items()})


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
    return Boilerplate.found(column, authors)


def settle(*, session: Session, generation: int, previous: int | None) -> tuple[Boilerplate, int]:
    """Find the boilerplate of the building `generation`, keep it with it, and renew the
    unchanged books it reads otherwise than `previous` (the active generation) did: the
    boilerplate and how many books were renewed.

    Only the sentences of the books the generation wrote or closed can change: where they are
    few (`INCREMENTAL_KEYS`) and `previous` kept its boilerplate, only the books holding one of
    them are read (`_rechecked`: one query), not the whole catalog (a book written alone
    through the admin API, at a million books: 54 s the whole way)."""
    before = kept(session=session, generation=previous)
    keys = None if before is None else _changed_keys(session, generation)
    checked = None
    if before is not None and keys is not None:
        checked = _rechecked(session, generation, before, keys)
    if checked is not None:
        now, renew = checked
        how = f"{len(keys or ())} sentences of the changed books counted again"
    else:
        now = found(session=session, generation=generation)
        moved = now.keys ^ (before.keys if before else frozenset())
        renew = _holding(session, generation, moved) if moved else []
        how = "every description read"
    logger.info("generation %d: %d boilerplate sentences (%s)", generation, len(now), how)
    renewed = _renew(session, generation, renew) if renew else 0
    store.set_metadata(session=session, values={_KEY.format(generation): now.authors})
    if renewed:
        logger.info("%d unchanged books renewed: the boilerplate they hold changed", renewed)
    return now, renewed


def _changed_keys(session: Session, generation: int) -> frozenset[str] | None:
    """The sentence keys of the books `generation` wrote or closed; None past
    INCREMENTAL_KEYS of them."""
    texts = session.scalars(
        select(Book.description).where(
            or_(Book.valid_from == generation, Book.valid_to == generation)
        )
    )
    keys: set[str] = set()
    for text in texts:
        keys.update(text_keys(text or ""))
        if len(keys) > INCREMENTAL_KEYS:
            return None
    return frozenset(keys)


def _rechecked(
    session: Session, generation: int, before: Boilerplate, keys: frozenset[str]
) -> tuple[Boilerplate, list[int]] | None:
    """The boilerplate of `generation` from `before`'s with each of `keys` counted again over
    the books holding it (those whose description holds its longest word, then read), and the
    unchanged books to renew; None where a key has no ASCII word to look for."""
    if not keys:
        return before, []
    words = {max(_WORD.findall(k), key=len, default="") for k in keys}
    if "" in words:
        return None
    holders = session.execute(
        select(Book.row_id, Book.valid_from, Book.description, Book.authors).where(
            store.visible_at(generation), or_(*(Book.description.ilike(f"%{w}%") for w in words))
        )
    )
    authors: dict[str, set[str]] = {k: set() for k in keys}
    held: list[tuple[int, int, frozenset[str]]] = []
    for row_id, valid_from, text, names in holders:
        if mine := keys.intersection(text_keys(text or "")):
            for k in mine:
                authors[k].add(author_key(names or (), row_id))
            held.append((row_id, valid_from, mine))
    count = {k: len(a) for k, a in authors.items() if len(a) >= MIN_AUTHORS}
    now = {k: n for k, n in before.authors.items() if k not in keys} | count
    moved = frozenset(now).symmetric_difference(before.keys)
    renew = [r for r, since, mine in held if since < generation and not moved.isdisjoint(mine)]
    return Boilerplate(frozenset(now), now), renew


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
