"""The indexing job: catalog file → validated records → a new generation, batch by batch.

A run is a snapshot: the catalog becomes the next generation, books absent from it are removed
(unless `keep_missing`), and the switch to it is one transaction at the end, so a service keeps
answering from the previous generation until then. Per batch, `batches.plan_batch` finds what
changed, the encoder embeds only texts with no stored vector, and `batches.write_batch` commits
the batch. A run killed midway leaves its generation building; the next run resumes it and
embeds nothing that was committed.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from itertools import islice
from pathlib import Path

import numpy as np
from sqlalchemy import Engine, select
from sqlalchemy.exc import InterfaceError, OperationalError
from sqlalchemy.orm import Session

from indexer import batches, generations, store
from indexer.batches import FIELDS, VALUE_FIELD, BatchPlan, field_texts
from indexer.catalog import CatalogError, CatalogRecord, CatalogSnapshot, InvalidRow
from indexer.db import ensure_schema
from indexer.schema import BUILDING, Book, Generation
from indexer.settings import IndexSettings
from models.encoder import Encoder
from models.text import normalize_id

__all__ = [
    "FIELDS",
    "VALUE_FIELD",
    "Embedder",
    "IndexReport",
    "Progress",
    "SnapshotRefusedError",
    "field_texts",
    "run",
]

logger = logging.getLogger(__name__)


FEW_REMOVALS = 10  # a snapshot may always remove this many books: a mistake that small is cheap


class SnapshotRefusedError(CatalogError):
    """A catalog that, as a snapshot, would empty the index or remove most of it: a truncated
    file, a header-only CSV or a file of the wrong format does that by mistake, so the run
    refuses before writing anything (rsync's --max-delete, in the same spirit)."""

    def __init__(self, message: str):
        super().__init__([], message)


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

    @property
    def books_per_second(self) -> float:
        return self.books / self.seconds if self.seconds > 0 else 0.0


@dataclass(frozen=True)
class ProgressSnapshot:
    """Where a run stands. `state`: idle, validating, indexing, finishing, done or failed."""

    state: str = "idle"
    total: int = 0  # valid books in the catalog
    done: int = 0  # books processed (written or found unchanged)
    embedded: int = 0  # texts embedded so far
    generation: int | None = None  # the generation being built
    started: float = 0.0  # time.monotonic() at the start
    finished: float | None = None

    @property
    def elapsed_s(self) -> float:
        if not self.started:
            return 0.0
        return (self.finished or time.monotonic()) - self.started

    @property
    def books_per_second(self) -> float:
        return self.done / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def eta_s(self) -> float | None:
        rate = self.books_per_second
        return (self.total - self.done) / rate if rate > 0 and self.state == "indexing" else None


class Progress:
    """A run's progress, written by the run and read from any thread (`snapshot()`); each
    change is also handed to `listener` (a progress bar)."""

    def __init__(self, listener: Callable[[ProgressSnapshot], None] | None = None):
        self._lock = threading.Lock()
        self._now = ProgressSnapshot()
        self.listener = listener

    def snapshot(self) -> ProgressSnapshot:
        with self._lock:
            return self._now

    def update(self, **changes: object) -> None:
        with self._lock:
            self._now = replace(self._now, **changes)  # type: ignore[arg-type]
            now = self._now
        if self.listener is not None:
            self.listener(now)


def validate(catalog: str | Path | CatalogSnapshot) -> tuple[int, list[InvalidRow]]:
    """Count the good rows of a catalog and collect the bad ones, writing nothing (a snapshot
    checked already, as `attend index` does before the model loads, is not read again)."""
    if not isinstance(catalog, CatalogSnapshot):
        with CatalogSnapshot.take(catalog) as snapshot:
            return validate(snapshot)
    check = catalog.check()
    return check.books, check.rejected


def embed(texts: dict[str, str], encoder: Encoder) -> dict[str, np.ndarray]:
    """content hash → vector (d,) for each text, in one encoder call."""
    if not texts:
        return {}
    vectors = encoder.encode(list(texts.values())).numpy()  # (n, d)
    return dict(zip(texts, vectors, strict=True))


# Plans in; out, in the same order, each plan with a vector for every text of its `to_embed`
# and how many of those were embedded for it (a text two plans share is embedded once):
# `local_embedder` here, or indexer/ray_embed.py's on a Ray cluster.
Embedder = Callable[[Iterator[BatchPlan]], Iterator[tuple[BatchPlan, dict[str, np.ndarray], int]]]


def local_embedder(encoder: Encoder) -> Embedder:
    """Each batch's texts in one call of `encoder`, in this process."""

    def run(plans: Iterator[BatchPlan]) -> Iterator[tuple[BatchPlan, dict[str, np.ndarray], int]]:
        for plan in plans:
            vectors = embed(plan.to_embed, encoder)
            yield plan, vectors, len(vectors)

    return run


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
            catalog = snapshot = CatalogSnapshot.take(path, max_row_bytes=settings.max_row_bytes)
        path = catalog.name
        total, rejected = validate(catalog)
        if rejected and not skip_invalid:
            raise CatalogError(rejected)
        for row in rejected:
            logger.warning("skipped %s", row)
        if total == 0:
            raise SnapshotRefusedError(_empty_message(path, rejected))
        ensure_schema(engine, create_if_new=True)
        report = IndexReport(path=str(path), books=total, rejected=rejected)
        with generations.writer_lock(engine):
            if not keep_missing and not allow_mass_delete:
                _check_removals(settings, engine, catalog)
            _build(
                settings,
                engine,
                encoder,
                catalog=catalog,
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


def _empty_message(path: str | Path, rejected: list[InvalidRow]) -> str:
    why = (
        f"all {len(rejected)} of its rows were rejected (the first: {rejected[0]})"
        if rejected
        else "it is empty, or a CSV with a header only"
    )
    return (
        f"{path} holds no valid book: {why}. As a snapshot it would remove every book of the "
        "index, so nothing was written; check that it is the catalog you meant (its format "
        "must match its .jsonl or .csv suffix, uncompressed), or remove books with "
        "`attend delete ID …`"
    )


def _check_removals(settings: IndexSettings, engine: Engine, catalog: CatalogSnapshot) -> None:
    """Refuse a snapshot that removes more than `max_delete_fraction` of the active books."""
    with Session(engine) as session:
        active = store.active_generation_id(session=session)
        if active is None:
            return
        indexed = set(session.scalars(select(Book.id).where(store.visible_at(active))))
    if not indexed:
        return
    kept = sum(1 for record in _valid(catalog) if record.id in indexed)
    removed = len(indexed) - kept
    if removed > max(settings.max_delete_fraction * len(indexed), FEW_REMOVALS):
        raise SnapshotRefusedError(
            f"{catalog.name} would remove {removed} of the index's {len(indexed)} books "
            f"(it holds {kept} of them), more than ATTEND_MAX_DELETE_FRACTION="
            f"{settings.max_delete_fraction:g} allows; nothing was written. If that is what "
            "you mean, run it again with --allow-mass-delete (admin API: "
            '"allow_mass_delete": true), or with --keep-missing to keep them'
        )


def _build(
    settings: IndexSettings,
    engine: Engine,
    encoder: Encoder,
    *,
    catalog: CatalogSnapshot,
    report: IndexReport,
    keep_missing: bool,
    progress: Progress,
    embedder: Embedder,
) -> None:
    with Session(engine) as session, session.begin():
        building, report.resumed = generations.begin(
            session=session, model=encoder.name, catalog=catalog.name
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
        for batch in batched(_valid(catalog), settings.batch_size):
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
        generation = session.get_one(Generation, g)
        counts = generations.finish(
            session=session, generation=generation, rejected=len(report.rejected)
        )
        report.activated = counts.changed
        report.generation = store.active_generation_id(session=session)
        store.set_metadata(
            session=session,
            values={
                "model": encoder.name,
                "dim": encoder.dim,
                "dtype": store.DTYPE,
                "key_fields": list(FIELDS),
                "value_field": VALUE_FIELD,
                "book_count": counts.books if counts.changed else report.books,
                "indexed_at": datetime.now(UTC).isoformat(),
                "catalog": str(path),
            },
        )


@dataclass
class DeleteReport:
    removed: list[str]  # ids removed
    unknown: list[str]  # ids the active generation does not hold
    generation: int | None  # the active generation after the deletion


def delete_books(*, engine: Engine, book_ids: Sequence[str]) -> DeleteReport:
    """Remove books from the index: a new generation without them, activated at once."""
    ensure_schema(engine, create_if_new=False)
    book_ids = [normalize_id(b) for b in book_ids]  # as the catalog's were indexed
    with generations.writer_lock(engine), Session(engine) as session, session.begin():
        active = store.active_generation(session=session)
        if active is None:
            return DeleteReport([], list(book_ids), None)
        building = generations.building_generation(session=session)
        if building is not None:
            raise generations.IndexBusyError(
                engine.url.render_as_string(),
                f"generation {building.id} was left building by an interrupted `attend index`: "
                "run that again (it resumes) before deleting books",
            )
        present = {b for b in book_ids if store.get_book(session=session, book_id=b) is not None}
        generation, _ = generations.begin(session=session, model=active.model, catalog=None)
        generation.catalog = active.catalog
        batches.remove_books(session=session, generation=generation.id, book_ids=present)
        generations.finish(session=session, generation=generation)
        return DeleteReport(
            removed=[b for b in book_ids if b in present],
            unknown=[b for b in book_ids if b not in present],
            generation=store.active_generation_id(session=session),
        )


def _valid(catalog: CatalogSnapshot) -> Iterator[CatalogRecord]:
    return (row for row in catalog.scan() if isinstance(row, CatalogRecord))


def batched(rows: Iterator[CatalogRecord], n: int) -> Iterator[list[CatalogRecord]]:
    """itertools.batched, which Python 3.11 lacks."""
    while batch := list(islice(rows, n)):
        yield batch
