"""The indexing job: catalog file → validated records → a new generation, batch by batch.

A run is a snapshot: the catalog becomes the next generation, books absent from it are removed
(unless `keep_missing`), and the switch to it is one transaction at the end, so a service keeps
answering from the previous generation until then. Per batch, `batches.plan_batch` finds what
changed, the encoder embeds only texts with no stored vector, and `batches.write_batch` commits
the batch. A run killed midway leaves its generation building; the next run resumes it and
embeds nothing that was committed.

Beside the run: the snapshot guard (indexer/snapshot_guard.py), the embedding of each batch's
texts (indexer/embedding.py), the run's progress (indexer/progress.py); removing books by id
is indexer/deletion.py.
"""

from __future__ import annotations

import json
import logging
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from itertools import islice
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Engine
from sqlalchemy.exc import InterfaceError, OperationalError
from sqlalchemy.orm import Session

from indexer import batches, boilerplate_rows, generations, store
from indexer.batches import FIELDS, VALUE_FIELD, BatchPlan
from indexer.boilerplate import Boilerplate
from indexer.catalog import CatalogError, CatalogRecord, CatalogSnapshot, InvalidRow
from indexer.db import ensure_schema
from indexer.embedding import Embedder, indexed_dim, local_embedder
from indexer.progress import Progress
from indexer.schema import BUILDING, Generation
from indexer.settings import IndexSettings
from indexer.snapshot_guard import SnapshotRefusedError, check_removals, empty_message
from indexer.vector_format import DTYPE

if TYPE_CHECKING:  # torch loads with the model, which a run with nothing to embed never loads
    from models.encoder import Encoder

logger = logging.getLogger(__name__)


@dataclass
class IndexReport:
    path: str
    books: int = 0  # valid rows in the catalog
    added: int = 0
    updated: int = 0  # changed books (text or metadata): a new row each
    unchanged: int = 0
    removed: int = 0  # books of the previous generation absent from the catalog
    rejected: list[InvalidRow] = field(default_factory=list)
    embedded: int = 0  # texts embedded by this run (others reused a stored vector)
    generation: int | None = None  # the active generation after the run
    activated: bool = False  # False: nothing changed, the active generation stayed
    resumed: bool = False  # continued a generation an interrupted run left building
    seconds: float = 0.0
    boilerplate: Boilerplate = field(default_factory=Boilerplate)  # the generation's
    renewed: int = 0  # unchanged books given a new row: the boilerplate they hold changed

    @property
    def books_per_second(self) -> float:
        return self.books / self.seconds if self.seconds > 0 else 0.0


def validate(catalog: str | Path | CatalogSnapshot) -> tuple[int, list[InvalidRow]]:
    """Count the good rows of a catalog and collect the bad ones, writing nothing (a snapshot
    checked already, as `attend index` does before the model loads, is not read again)."""
    if not isinstance(catalog, CatalogSnapshot):
        with CatalogSnapshot.take(catalog) as snapshot:
            return validate(snapshot)
    check = catalog.check()
    return check.books, check.rejected


def run(
    settings: IndexSettings,
    *,
    engine: Engine,
    encoder: Encoder,
    path: str | Path | CatalogSnapshot,
    skip_invalid: bool = False,
    keep_missing: bool = False,
    allow_mass_delete: bool = False,
    progress: Progress | None = None,
    embedder: Embedder | None = None,
) -> IndexReport:
    """Index the catalog at `path` as the next generation. Nothing is written when it has a bad
    row, unless `skip_invalid`. Raises `generations.IndexBusyError` if another writer runs.
    `embedder` replaces `encoder` for the embedding (`encoder` still names the model).
    Raises `SnapshotRefusedError`, writing nothing, for a catalog with no valid row, and for
    one that would remove more than `settings.max_delete_fraction` of the active books, unless
    `allow_mass_delete` (or `keep_missing`, which removes nothing).

    The file is read once, into a private snapshot that is validated and then indexed: a
    catalog rewritten during the run cannot slip an unvalidated row in. A snapshot given
    (an upload) is read as it is, and left open for its owner to close."""
    progress = progress or Progress()
    t0 = time.perf_counter()
    progress.update(state="validating", started=time.monotonic(), finished=None)
    snapshot: CatalogSnapshot | None = None
    try:
        if isinstance(path, CatalogSnapshot):
            catalog = path
        else:
            catalog = snapshot = CatalogSnapshot.take(
                path,
                max_row_bytes=settings.max_row_bytes,
                columns=settings.catalog_columns,
                encoding=settings.catalog_encoding,
            )
        path = catalog.name
        total, rejected = validate(catalog)
        if rejected and not skip_invalid:
            raise CatalogError(rejected)
        for row in rejected:
            logger.warning("skipped %s", row)
        if total == 0:
            raise SnapshotRefusedError(empty_message(path, rejected))
        ensure_schema(engine, create_if_new=True)
        report = IndexReport(path=str(path), books=total, rejected=rejected)
        with generations.writer_lock(engine):
            if not keep_missing and not allow_mass_delete:
                check_removals(settings, engine, catalog)
            _build(
                settings,
                engine,
                encoder,
                catalog=catalog,
                source=run_source(catalog, keep_missing=keep_missing, skip_invalid=skip_invalid),
                report=report,
                keep_missing=keep_missing,
                progress=progress,
                embedder=embedder or local_embedder(encoder),
            )
    except BaseException:
        progress.update(state="failed", finished=time.monotonic())
        raise
    finally:
        if snapshot is not None:
            snapshot.close()
    report.seconds = time.perf_counter() - t0
    progress.update(state="done", finished=time.monotonic())
    logger.info(
        "indexed %s: %d books, %d added, %d updated, %d unchanged, %d removed, %d rejected, "
        "%d texts embedded in %.1f s; generation %s active",
        path,
        report.books,
        report.added,
        report.updated,
        report.unchanged,
        report.removed,
        len(report.rejected),
        report.embedded,
        report.seconds,
        report.generation,
    )
    return report


def _build(
    settings: IndexSettings,
    engine: Engine,
    encoder: Encoder,
    *,
    catalog: CatalogSnapshot,
    source: str,
    report: IndexReport,
    keep_missing: bool,
    progress: Progress,
    embedder: Embedder,
) -> None:
    with Session(engine) as session, session.begin():
        building, report.resumed = generations.begin(
            session=session, model=encoder.name, catalog=catalog.name, source=source
        )
        g = building.id
    try:
        _fill(
            settings,
            engine,
            encoder,
            g,
            catalog=catalog,
            report=report,
            keep_missing=keep_missing,
            progress=progress,
            embedder=embedder,
        )
    except (OperationalError, InterfaceError):
        # the database went away or filled up: the committed batches stay, a rerun resumes
        logger.warning("generation %d stays building: a rerun of the index resumes it", g)
        raise
    except Exception as e:  # anything else would fail again: the generation ends failed
        _abandon(engine, g, error=f"{type(e).__name__}: {e}"[:2000])
        raise


def run_source(catalog: CatalogSnapshot, *, keep_missing: bool, skip_invalid: bool) -> str:
    """What a run builds its generation from: the catalog's name, the digest of its bytes, and
    the flags that change what it writes. Only a run of the same resumes a generation a killed
    run left building (indexer/generations.py `begin`)."""
    return json.dumps(
        {
            "catalog": str(catalog.name),
            "digest": catalog.digest(),
            "columns": catalog.names.mapping,
            "keep_missing": keep_missing,
            "skip_invalid": skip_invalid,
        },
        sort_keys=True,
    )


def _abandon(engine: Engine, g: int, *, error: str) -> None:
    """End generation `g` failed, so it is not left building (which refuses deletes)."""
    try:
        with Session(engine) as session, session.begin():
            generation = session.get(Generation, g)
            if generation is not None and generation.state == BUILDING:
                generations.abandon(session=session, generation=generation, error=error)
    except Exception:  # the run's own error is the one to report
        logger.exception("could not mark generation %d failed; it stays building", g)


def _fill(
    settings: IndexSettings,
    engine: Engine,
    encoder: Encoder,
    g: int,
    *,
    catalog: CatalogSnapshot,
    report: IndexReport,
    keep_missing: bool,
    progress: Progress,
    embedder: Embedder,
) -> None:
    path = catalog.name
    progress.update(state="indexing", total=report.books, done=0, embedded=0, generation=g)
    seen: set[str] = set()
    planned: deque[list[str]] = deque()  # each planned batch's ids, until it is written

    def plans() -> Iterator[BatchPlan]:
        for batch in batched(catalog.records(), settings.batch_size):
            with Session(engine) as session:
                plan = batches.plan_batch(
                    session=session, records=batch, model=encoder.name, generation=g
                )
            planned.append([r.id for r in batch])
            yield plan

    # Embedded before the write transaction opens: a SQLite writer lock is then held for the
    # writes only, and searches on a service never wait for the encoder.
    for plan, vectors, embedded in embedder(plans()):
        with Session(engine) as session, session.begin():
            batches.write_batch(session=session, plan=plan, vectors=vectors)
        seen.update(planned.popleft())
        report.added += plan.added
        report.updated += plan.updated
        report.unchanged += plan.unchanged
        report.embedded += embedded
        progress.update(done=len(seen), embedded=report.embedded)
    progress.update(state="finishing")
    with Session(engine) as session, session.begin():
        if not keep_missing:
            report.removed = batches.remove_books(session=session, generation=g, keep=seen)
        report.boilerplate, report.renewed = boilerplate_rows.settle(
            session=session, generation=g, previous=store.active_generation_id(session=session)
        )
        generation = session.get_one(Generation, g)
        counts = generations.finish(
            session=session, generation=generation, rejected=len(report.rejected)
        )
        report.activated = counts.changed
        # the generation's counts, as its row holds them: a resumed run wrote only part of it,
        # and counted the books the interrupted one had written "unchanged" (issue 32)
        report.added, report.updated, report.removed = counts.added, counts.updated, counts.removed
        report.unchanged = report.books - counts.added - counts.updated
        report.generation = store.active_generation_id(session=session)
        store.set_metadata(
            session=session,
            values={
                "model": encoder.name,
                "dim": indexed_dim(session, encoder),
                "dtype": DTYPE,
                "key_fields": list(FIELDS),
                "value_field": VALUE_FIELD,
                "book_count": counts.books if counts.changed else report.books,
                "indexed_at": datetime.now(UTC).isoformat(),
                "catalog": str(path),
            },
        )


def batched(rows: Iterator[CatalogRecord], n: int) -> Iterator[list[CatalogRecord]]:
    """itertools.batched, which Python 3.11 lacks."""
    while batch := list(islice(rows, n)):
        yield batch
