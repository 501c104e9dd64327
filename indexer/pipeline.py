"""The indexing job: catalog file → validated records → embeddings → one transaction per batch.

The text behind a book's key, and behind its value, is `book_text`: the title, a newline,
then the description. Keys and values are the same vectors (V = K): the attention output
`weights @ V` is then the catalog's answer to the query in the query's own space, the
retrieval step of a modern Hopfield network with inverse temperature `scale`. They are
stored as separate rows so either can be given its own text later.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from itertools import islice
from pathlib import Path

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


def book_text(record: CatalogRecord) -> str:
    """The text embedded as a book's key (and value): title, newline, description."""
    return f"{record.title}\n{record.description}" if record.description else record.title


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
                "key_text": "title\\ndescription",
                "value_text": "title\\ndescription",
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
    """Write one batch in one transaction, embedding only what changed; returns how many."""
    texts = {r.id: book_text(r) for r in batch}
    hashes = {r.id: store.content_hash(encoder.name, texts[r.id]) for r in batch}
    with Session(engine) as session:
        stored = store.vector_hashes(
            session=session, book_ids=hashes, role="key", field=store.TEXT_FIELD
        )
    todo = [r for r in batch if stored.get(r.id) != hashes[r.id]]
    # Embed before the transaction opens: a SQLite writer lock is then held for the writes only.
    vectors = encoder.encode([texts[r.id] for r in todo]).numpy() if todo else None  # (n, d)
    rows = [
        store.VectorRow(r.id, role, store.TEXT_FIELD, hashes[r.id], vectors[i])
        for i, r in enumerate(todo)
        if vectors is not None
        for role in ("key", "value")
    ]
    with Session(engine) as session, session.begin():
        store.upsert_books(session=session, records=batch)
        store.write_vectors(session=session, rows=rows, model=encoder.name)
    return len(todo)
