"""The indexing job: catalog file → validated records → embeddings → one transaction per batch.

Each book has one key per field of `FIELDS`, the embedding of that field's text
(`field_texts`): its title, and its description (the title again for a book without one, so
every book has both keys). Its value is the description's key (V = K): the attention output
`weights @ V` is then the catalog's answer to the query in the query's own space, the
retrieval step of a modern Hopfield network with inverse temperature `scale`. The value is
stored as its own row so it can be given its own text later.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from itertools import islice
from pathlib import Path

import numpy as np
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from indexer import store
from indexer.catalog import CatalogError, CatalogRecord, InvalidRow, scan_catalog
from indexer.db import ensure_schema
from indexer.settings import IndexSettings
from models.encoder import Encoder

logger = logging.getLogger(__name__)


@dataclass
class IndexReport:
    path: str
    books: int = 0  # valid rows in the catalog
    embedded: int = 0  # books whose vectors were (re)computed
    unchanged: int = 0  # books whose stored vectors were already up to date
    rejected: list[InvalidRow] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def books_per_second(self) -> float:
        return self.books / self.seconds if self.seconds > 0 else 0.0


FIELDS = store.KEY_FIELDS  # ("title", "description"): one key per field
VALUE_FIELD = store.VALUE_FIELD  # the value is the description's key


def field_texts(record: CatalogRecord) -> dict[str, str]:
    """field → the text embedded as the book's key for it. A book without a description
    gets its title as its description key, so every book has a key for every field."""
    return {"title": record.title, "description": record.description or record.title}


def validate(path: str | Path) -> tuple[int, list[InvalidRow]]:
    """Count the good rows of a catalog and collect the bad ones, writing nothing."""
    good, bad = 0, []
    for row in scan_catalog(path):
        if isinstance(row, InvalidRow):
            bad.append(row)
        else:
            good += 1
    return good, bad


def run(
    settings: IndexSettings,
    *,
    engine: Engine,
    encoder: Encoder,
    path: str | Path,
    skip_invalid: bool = False,
) -> IndexReport:
    """Index the catalog at `path`. Nothing is written when it has a bad row, unless `skip_invalid`.

    Books whose stored vectors came from the same model and text are not embedded again, so
    a rerun after a crash resumes where the last committed batch ended.
    """
    t0 = time.perf_counter()
    total, rejected = validate(path)
    if rejected and not skip_invalid:
        raise CatalogError(rejected)
    for row in rejected:
        logger.warning("skipped %s", row)
    ensure_schema(engine, create_if_new=True)

    report = IndexReport(path=str(path), books=total, rejected=rejected)
    for batch in batched(_valid(path), settings.batch_size):
        embedded = _index_batch(batch, engine=engine, encoder=encoder)
        report.embedded += embedded
        report.unchanged += len(batch) - embedded
        done = report.embedded + report.unchanged
        elapsed = time.perf_counter() - t0
        rate = done / elapsed if elapsed > 0 else 0.0
        eta = (total - done) / rate if rate > 0 else 0.0
        logger.info("indexed %d/%d books (%.1f books/s, ETA %.0f s)", done, total, rate, eta)

    with Session(engine) as session, session.begin():
        store.set_metadata(
            session=session,
            values={
                "model": encoder.name,
                "dim": encoder.dim,
                "dtype": store.DTYPE,
                "key_fields": list(FIELDS),
                "value_field": VALUE_FIELD,
                "book_count": store.count_books(session=session),
                "indexed_at": datetime.now(UTC).isoformat(),
                "catalog": str(path),
            },
        )
    report.seconds = time.perf_counter() - t0
    logger.info(
        "indexed %s: %d books, %d embedded, %d unchanged, %d rejected in %.1f s",
        path,
        report.books,
        report.embedded,
        report.unchanged,
        len(rejected),
        report.seconds,
    )
    return report


def _valid(path: str | Path) -> Iterator[CatalogRecord]:
    return (row for row in scan_catalog(path) if isinstance(row, CatalogRecord))


def batched(rows: Iterator[CatalogRecord], n: int) -> Iterator[list[CatalogRecord]]:
    """itertools.batched, which Python 3.11 lacks."""
    while batch := list(islice(rows, n)):
        yield batch


def _index_batch(batch: list[CatalogRecord], *, engine: Engine, encoder: Encoder) -> int:
    """Write one batch in one transaction, embedding only what changed; returns how many books
    needed at least one new vector."""
    wanted: dict[tuple[str, str, str], tuple[str, str]] = {}  # (id, role, field) → (hash, text)
    for r in batch:
        texts = field_texts(r)
        for f in FIELDS:
            wanted[(r.id, "key", f)] = (store.content_hash(encoder.name, texts[f]), texts[f])
        wanted[(r.id, "value", VALUE_FIELD)] = wanted[(r.id, "key", VALUE_FIELD)]
    with Session(engine) as session:
        stored = store.vector_hashes(session=session, book_ids=[r.id for r in batch])
    todo = {slot: ht for slot, ht in wanted.items() if stored.get(slot) != ht[0]}
    # One encoder call for the distinct texts (a value is its key's text; a book without a
    # description has one text for both keys), before the transaction opens: a SQLite writer
    # lock is then held for the writes only.
    unique = {h: t for h, t in todo.values()}
    vectors: dict[str, np.ndarray] = {}
    if unique:
        encoded = encoder.encode(list(unique.values())).numpy()  # (n, d)
        vectors = dict(zip(unique, encoded, strict=True))
    rows = [store.VectorRow(i, role, f, h, vectors[h]) for (i, role, f), (h, _) in todo.items()]
    ids = [r.id for r in batch]
    with Session(engine) as session, session.begin():
        store.upsert_books(session=session, records=batch)
        store.delete_other_fields(session=session, book_ids=ids, fields=FIELDS)
        store.write_vectors(session=session, rows=rows, model=encoder.name)
    return len({book_id for book_id, _, _ in todo})
