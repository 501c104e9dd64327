"""Single-book writes over the admin API: a book put, a batch of books posted, a book deleted,
each a small generation of its own, as crash-safe as a re-index (the pipeline's generations:
indexer/generations.py), searchable once the service swaps it in (the job's success does that).

A put or a post is a re-index job over the books given, as one JSONL file, that keeps every
other book (`keep_missing`): each book is checked first as a catalog row is (the same fields,
the same limits: indexer/catalog/rows.py), so a bad one is a 422 naming its problems, not a
failed job. Writes that come while a job runs join one queued job, which writes them together
when that job ends. A delete is a generation without the book, made at once
(indexer/deletion.py), not while a job runs or is queued.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from indexer.catalog.rows import RowError, parse_row
from indexer.deletion import DeleteReport, delete_books
from indexer.generations import IndexBusyError
from service.engine.exceptions import (
    BadCatalogRequestError,
    BookNotFoundError,
    JobRunningError,
    WriterBusyError,
)
from service.engine.reindex_jobs import MAX_QUEUED_BOOKS, Job, ReindexJobs

MAX_BOOKS = MAX_QUEUED_BOOKS  # books one POST /admin/books may write: a queued job's at most


def write_books(jobs: ReindexJobs, books: Sequence[dict[str, Any]], *, name: str) -> Job:
    """A job writing `books` (each a catalog row with an id), the others kept: started now, or
    queued after the running job with the other writes that came meanwhile
    (service/engine/reindex_jobs.py). Raises BadCatalogRequestError naming every bad book's
    problems, JobRunningError when the queued job is full. Call it off the event loop (it
    writes a file)."""
    problems = []
    seen: set[str] = set()
    for i, book in enumerate(books, start=1):
        try:
            parsed = parse_row(book, i)
        except RowError as e:
            problems.append(f"book {i}: {e}")
            continue
        if parsed.id_from != "id":
            problems.append(f"book {i}: missing 'id'")
        elif parsed.record.id in seen:
            problems.append(f"book {i}: the id {parsed.record.id!r} twice")
        seen.add(parsed.record.id)
    if problems:
        raise BadCatalogRequestError("; ".join(problems[:20]))
    return jobs.submit_books(books, name=name)


def delete_book(jobs: ReindexJobs, book_id: str) -> DeleteReport:
    """A generation without `book_id`, active at once and swapped in; BookNotFoundError when
    the index does not hold it, JobRunningError while a job runs or is queued (a delete is not
    queued: it answers with the generation that lacks the book)."""
    if (busy := jobs.busy()) is not None:
        raise JobRunningError(busy)
    try:
        report = delete_books(engine=jobs.engine, book_ids=[book_id])
    except IndexBusyError as e:
        raise WriterBusyError(str(e)) from None
    if not report.removed:
        raise BookNotFoundError(book_id)
    jobs.on_success()
    return report
