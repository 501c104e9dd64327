"""Writing a generation batch by batch, in two reusable steps: `plan_batch` says which books of a
batch changed and which of their texts still need embedding (a vector already stored for the
same model and text is reused, never embedded again); `write_batch` writes one batch's rows
given those vectors. Whoever embeds in between (the pipeline here, or a distributed job) only
has to call the encoder on `plan.to_embed`. Keyword-only `session=` functions that never commit.

Each book has one key per field of `FIELDS`, the embedding of that field's text
(`field_texts`): its title, and its description (the title again for a book without one, so
every book has both keys). Its value is the description's key (V = K).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

import numpy as np
from sqlalchemy import delete, insert, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from indexer import loaded_index, store
from indexer.catalog import CatalogRecord
from indexer.schema import Book, BookVector, Vector
from indexer.vector_format import DTYPE, content_hash, to_bytes

FIELDS = loaded_index.KEY_FIELDS  # ("title", "description"): one key per field
VALUE_FIELD = loaded_index.VALUE_FIELD  # the value is the description's key
_CHUNK = 500  # ids per IN (...) list


def field_texts(record: CatalogRecord) -> dict[str, str]:
    """field → the text embedded as the book's key for it. A book without a description
    gets its title as its description key, so every book has a key for every field."""
    return {"title": record.title, "description": record.description or record.title}


def slots(record: CatalogRecord) -> dict[tuple[str, str], str]:
    """(role, field) → the text behind each of the book's vectors."""
    texts = field_texts(record)
    out = {("key", f): texts[f] for f in FIELDS}
    out[("value", VALUE_FIELD)] = texts[VALUE_FIELD]
    return out


@dataclass(frozen=True)
class BookChange:
    """A book whose row must be (re)written in the building generation."""

    record: CatalogRecord
    record_hash: str
    vectors: dict[tuple[str, str], str]  # (role, field) → content hash
    previous: int | None = None  # row id of its current row, None for a new book
    previous_from: int | None = None  # that row's valid_from


@dataclass
class BatchPlan:
    generation: int
    model: str
    changes: list[BookChange] = field(default_factory=list)
    unchanged: int = 0
    known: dict[str, int] = field(default_factory=dict)  # content hash → stored vector id
    to_embed: dict[str, str] = field(default_factory=dict)  # content hash → text to embed

    @property
    def added(self) -> int:
        return sum(c.previous is None for c in self.changes)

    @property
    def updated(self) -> int:
        return len(self.changes) - self.added


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


def plan_batch(
    *, session: Session, records: Sequence[CatalogRecord], model: str, generation: int
) -> BatchPlan:
    """Compare a batch of catalog books with the building `generation`: which changed (a new
    row to write), which did not, and which texts have no stored vector for `model` yet."""
    plan = BatchPlan(generation, model)
    current = {
        book_id: (row_id, h, valid_from)
        for book_id, row_id, h, valid_from in session.execute(
            select(Book.id, Book.row_id, Book.record_hash, Book.valid_from).where(
                Book.id.in_([r.id for r in records]), store.visible_at(generation)
            )
        )
    }
    texts: dict[str, str] = {}
    for r in records:
        h = record_hash(model, r)
        row_id, old_hash, valid_from = current.get(r.id, (None, None, None))
        if old_hash == h:
            plan.unchanged += 1
            continue
        hashes = {}
        for slot, text in slots(r).items():
            hashes[slot] = content_hash(model, text)
            texts[hashes[slot]] = text
        plan.changes.append(BookChange(r, h, hashes, row_id, valid_from))
    plan.known = stored_vectors(session=session, model=model, hashes=texts)
    plan.to_embed = {h: t for h, t in texts.items() if h not in plan.known}
    return plan


def stored_vectors(*, session: Session, model: str, hashes: Iterable[str]) -> dict[str, int]:
    """content hash → vector id, for the hashes that have a stored vector of `model`."""
    wanted, found = list(hashes), dict[str, int]()
    for i in range(0, len(wanted), _CHUNK):
        stmt = select(Vector.content_hash, Vector.id).where(
            Vector.model == model, Vector.content_hash.in_(wanted[i : i + _CHUNK])
        )
        found.update({h: vector_id for h, vector_id in session.execute(stmt)})
    return found


def write_batch(*, session: Session, plan: BatchPlan, vectors: Mapping[str, np.ndarray]) -> None:
    """Write one planned batch: new vectors (`vectors` holds one for each of `plan.to_embed`),
    then each changed book's new row, closing (or, when written earlier in this same building
    generation, replacing) its previous one."""
    now = datetime.now(UTC)
    ids = dict(plan.known)
    ids.update(_insert_vectors(session, plan.model, {h: vectors[h] for h in plan.to_embed}, now))
    g = plan.generation
    replaced = [c.previous for c in plan.changes if c.previous is not None and c.previous_from == g]
    closed = [c.previous for c in plan.changes if c.previous is not None and c.previous_from != g]
    _delete_rows(session, [r for r in replaced if r is not None])
    _close_rows(session, [r for r in closed if r is not None], g)
    if not plan.changes:
        return
    rows = [
        {
            "id": c.record.id,
            "title": c.record.title,
            "description": c.record.description,
            "authors": c.record.authors,
            "year": c.record.year,
            "language": c.record.language,
            "extra": c.record.extra,
            "record_hash": c.record_hash,
            "valid_from": g,
            "valid_to": None,
            "updated_at": now,
        }
        for c in plan.changes
    ]
    new_ids = session.scalars(
        insert(Book).returning(Book.row_id, sort_by_parameter_order=True), rows
    ).all()
    links = [
        {"version_id": row_id, "role": role, "field": f, "vector_id": ids[h]}
        for row_id, c in zip(new_ids, plan.changes, strict=True)
        for (role, f), h in c.vectors.items()
    ]
    session.execute(insert(BookVector), links)


def _insert_vectors(
    session: Session, model: str, vectors: Mapping[str, np.ndarray], now: datetime
) -> dict[str, int]:
    if not vectors:
        return {}
    rows = [
        {
            "model": model,
            "content_hash": h,
            "dim": int(v.shape[0]),
            "dtype": DTYPE,
            "data": to_bytes(v),
            "created_at": now,
        }
        for h, v in vectors.items()
    ]
    dialect = session.get_bind().dialect.name
    ins = postgresql.insert(Vector) if dialect == "postgresql" else sqlite.insert(Vector)
    session.execute(ins.on_conflict_do_nothing(index_elements=["model", "content_hash"]), rows)
    return stored_vectors(session=session, model=model, hashes=vectors)


def _delete_rows(session: Session, row_ids: list[int]) -> None:
    for i in range(0, len(row_ids), _CHUNK):
        session.execute(delete(Book).where(Book.row_id.in_(row_ids[i : i + _CHUNK])))


def _close_rows(session: Session, row_ids: list[int], generation: int) -> None:
    for i in range(0, len(row_ids), _CHUNK):
        session.execute(
            update(Book).where(Book.row_id.in_(row_ids[i : i + _CHUNK])).values(valid_to=generation)
        )


def remove_books(
    *,
    session: Session,
    generation: int,
    book_ids: Iterable[str] | None = None,
    keep: set[str] | None = None,
) -> int:
    """End the rows of these books (or of every book not in `keep`) in the building
    `generation`; returns how many books that removed."""
    stmt = select(Book.row_id, Book.id, Book.valid_from).where(store.visible_at(generation))
    if book_ids is not None:
        wanted = list(book_ids)
        rows = [
            row
            for i in range(0, len(wanted), _CHUNK)
            for row in session.execute(stmt.where(Book.id.in_(wanted[i : i + _CHUNK])))
        ]
    else:
        rows = list(session.execute(stmt))
    rows = [r for r in rows if keep is None or r[1] not in keep]
    _delete_rows(session, [row_id for row_id, _, valid_from in rows if valid_from == generation])
    _close_rows(
        session, [row_id for row_id, _, valid_from in rows if valid_from != generation], generation
    )
    return len(rows)
