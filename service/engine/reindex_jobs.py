"""Re-index jobs run inside the service (POST /admin/reindex): one at a time, each in its own
thread, so searches go on answering from the active generation while it builds the next. The
admin routes call only this module: it takes an upload's file, starts the job and says where
the job stands (`JobStanding`), and it alone calls the indexer for them.

Book writes (service/engine/book_writes.py) that arrive while a job runs are not refused: they
gather in one queued job, which starts when the running one ends and writes them all as one
generation (a later write of a book replacing an earlier one), up to MAX_QUEUED_BOOKS books;
past that, and for a whole re-index while a job runs or is queued, 409."""

from __future__ import annotations

import logging
import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from sqlalchemy import Engine

from indexer import pipeline
from indexer.catalog import CatalogSnapshot
from indexer.pipeline import IndexReport
from indexer.progress import Progress, ProgressSnapshot
from indexer.settings import IndexSettings
from models.encoder import Encoder
from service.engine.database_errors import Reporter, is_database_error
from service.engine.exceptions import JobRunningError
from service.engine.job_catalogs import books_catalog, upload_catalog

logger = logging.getLogger(__name__)

QUEUED, RUNNING, SUCCEEDED, FAILED = "queued", "running", "succeeded", "failed"
_KEPT = 100  # finished jobs remembered
MAX_QUEUED_BOOKS = 1000  # books a queued write job gathers at most


@dataclass
class Job:
    id: str
    catalog: str  # what the client named (a path, or the uploaded file's name)
    path: Path | CatalogSnapshot  # the file indexed, or an upload's private snapshot
    keep_missing: bool
    skip_invalid: bool
    cleanup: bool  # delete or close `path` afterwards (an upload)
    allow_mass_delete: bool = False
    state: str = QUEUED
    progress: Progress = field(default_factory=Progress)
    report: IndexReport | None = None
    error: str | None = None
    created_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    finished_at: datetime | None = None
    # a queued write job's books by id, until it starts (its file is written then)
    books: dict[str, dict[str, Any]] | None = None

    def standing(self) -> JobStanding:
        """Where the job stands now (read from any thread)."""
        p = self.progress.snapshot()
        return JobStanding(
            total=p.total,
            done=p.done,
            embedded=p.embedded,
            books_per_second=p.books_per_second,
            eta_s=p.eta_s,
            generation=p.generation,
        )


@dataclass(frozen=True)
class JobStanding:
    """A job's progress as the admin API shows it: the run's counts and rates at one moment."""

    total: int  # valid books in the catalog
    done: int  # books processed (written or found unchanged)
    embedded: int  # texts embedded so far
    books_per_second: float
    eta_s: float | None  # None unless indexing, at a known rate
    generation: int | None  # the generation being built


class ReindexJobs:
    """Starts re-index jobs and remembers the last ones; `on_success` runs after each success
    (the service swaps in the new generation without waiting for its next poll)."""

    def __init__(
        self,
        *,
        settings: IndexSettings,
        engine: Engine,
        encoder: Encoder,
        on_success: Callable[[], object] = lambda: None,
    ):
        self.settings = settings
        self.engine = engine
        self.encoder = encoder
        self.on_success = on_success
        self._jobs: OrderedDict[str, Job] = OrderedDict()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._last: Job | None = None
        self._queued: Job | None = None  # the write job that starts when the running one ends
        self._closing = False

    def submit(
        self,
        path: Path | CatalogSnapshot,
        *,
        catalog: str,
        keep_missing: bool,
        skip_invalid: bool,
        cleanup: bool,
        allow_mass_delete: bool = False,
    ) -> Job:
        """Start a job, or raise `JobRunningError` while one runs or is queued."""
        with self._lock:
            if (busy := self._busy()) is not None:
                if cleanup:
                    _discard(path)
                if busy is self._queued:
                    raise JobRunningError(busy.id, "is queued after the running one")
                raise JobRunningError(busy.id)
            job = Job(uuid.uuid4().hex, catalog, path, keep_missing, skip_invalid, cleanup)
            job.allow_mass_delete = allow_mass_delete
            return self._begin(job)

    def submit_books(self, books: Sequence[dict[str, Any]], *, name: str) -> Job:
        """A job writing `books` (checked catalog rows, each with its id), every other book
        kept: started now, or while a job runs the queued write job they join (the same job for
        every write until it starts). `JobRunningError` when the queued job would pass
        MAX_QUEUED_BOOKS. Call it off the event loop (it writes a file)."""
        with self._lock:
            if self._busy() is not None:
                return self._queue(books, name=name)
        snapshot = self._books(books, name=name)
        with self._lock:
            if self._busy() is None:
                return self._begin(Job(uuid.uuid4().hex, name, snapshot, True, False, True))
            _discard(snapshot)  # a job started meanwhile
            return self._queue(books, name=name)

    def _queue(self, books: Sequence[dict[str, Any]], *, name: str) -> Job:
        """`books` joined to the queued write job (made if there is none), under the lock."""
        queued = self._queued or Job(uuid.uuid4().hex, name, Path(), True, False, True)
        gathered = {**(queued.books or {}), **{str(b["id"]): b for b in books}}
        if len(gathered) > MAX_QUEUED_BOOKS:
            why = f"is queued with the most books it takes ({MAX_QUEUED_BOOKS:,}): write these "
            raise JobRunningError(queued.id, why + "once it has started")
        queued.books = gathered
        if self._queued is None:
            self._remember(queued)
            self._queued = queued
        return queued

    def busy(self) -> str | None:
        """The id of the job running or queued, None when there is none."""
        with self._lock:
            busy = self._busy()
            return None if busy is None else busy.id

    def _busy(self) -> Job | None:
        """The job that holds the index (the queued one after the running one), under the lock."""
        if self._queued is not None:
            return self._queued
        return self._last if self._last and self._last.state in (QUEUED, RUNNING) else None

    def _remember(self, job: Job) -> None:
        self._jobs[job.id] = job
        while len(self._jobs) > _KEPT:
            self._jobs.popitem(last=False)

    def _begin(self, job: Job) -> Job:
        """`job` remembered and run in a thread of its own, under the lock."""
        self._remember(job)
        self._last = job
        self._thread = threading.Thread(
            target=self._run, args=(job,), name=f"attend-reindex-{job.id[:8]}", daemon=True
        )
        self._thread.start()
        return job

    def _books(self, books: Iterable[dict[str, Any]], *, name: str) -> CatalogSnapshot:
        return books_catalog(books, name=name, max_row_bytes=self.settings.max_row_bytes)

    def submit_upload(
        self,
        file: IO[bytes],
        *,
        name: str,
        keep_missing: bool,
        skip_invalid: bool,
        allow_mass_delete: bool,
        max_bytes: int | None = None,
    ) -> Job:
        """Start a job over an uploaded catalog: `file`, an anonymous temporary file the job owns
        (it closes it, which deletes it), read with the app's row bound. A gzip or UTF-16 upload
        is decoded here first, to `max_bytes` at most: call it off the event loop."""
        rows = self.settings.max_row_bytes
        snapshot = upload_catalog(file, name=name, max_row_bytes=rows, max_bytes=max_bytes)
        return self.submit(
            snapshot,
            catalog=name,
            keep_missing=keep_missing,
            skip_invalid=skip_invalid,
            allow_mass_delete=allow_mass_delete,
            cleanup=True,
        )

    def get(self, job_id: str) -> Job | None:
        with self._lock:
            return self._jobs.get(job_id)

    def status(self) -> ProgressSnapshot:
        """The progress of the running job, or of the last one (read-only; for /metrics)."""
        with self._lock:
            job = self._last
        return job.progress.snapshot() if job is not None else ProgressSnapshot()

    def close(self, timeout: float = 5.0) -> None:
        """Wait briefly for a running job; one still running stays resumable in the database. A
        queued write job does not start: it fails, saying so."""
        with self._lock:
            self._closing = True
            thread = self._thread
        if thread is not None:
            thread.join(timeout=timeout)
        with self._lock:
            queued, self._queued = self._queued, None
        if queued is not None:
            queued.error = "the service stopped before this job started: write the books again"
            queued.state, queued.finished_at, queued.books = FAILED, datetime.now(UTC), None

    def _run(self, job: Job) -> None:
        job.state = RUNNING
        logger.info("re-index job %s: %s", job.id, job.catalog)
        try:
            job.report = pipeline.run(
                self.settings,
                engine=self.engine,
                encoder=self.encoder,
                path=job.path,
                skip_invalid=job.skip_invalid,
                keep_missing=job.keep_missing,
                allow_mass_delete=job.allow_mass_delete,
                progress=job.progress,
            )
        except Exception as e:
            if is_database_error(e):  # the driver's text (SQL, host) to the log, not the client
                job.error = Reporter(f"re-index job {job.id}")(e)
            else:  # the catalog's own errors: a sentence naming the line, for the client
                logger.warning("re-index job %s failed: %s", job.id, e)
                job.error = str(e)
            job.state = FAILED
        else:
            try:  # before the job reads as succeeded: its searches then see the new generation
                self.on_success()
            except Exception:
                logger.exception("swapping in the new generation after job %s failed", job.id)
            job.state = SUCCEEDED
        finally:
            job.finished_at = datetime.now(UTC)
            if job.cleanup:
                _discard(job.path)
            self._start_queued()

    def _start_queued(self) -> None:
        """The queued write job started, its books written to its file first."""
        with self._lock:
            job = self._queued
            if job is None or self._closing:
                return
            try:
                job.path = self._books((job.books or {}).values(), name=job.catalog)
            except Exception as e:  # a full disk: the job fails, the next write starts anew
                logger.warning("queued write job %s could not start: %s", job.id, e)
                job.error, job.state = f"its books could not be written: {e}", FAILED
                job.finished_at, self._queued = datetime.now(UTC), None
                return
            job.books, self._queued = None, None
            self._begin(job)


def _discard(path: Path | CatalogSnapshot) -> None:
    """An upload's file gone: a snapshot is an anonymous file, which closing deletes."""
    if isinstance(path, CatalogSnapshot):
        path.close()
    else:
        path.unlink(missing_ok=True)
