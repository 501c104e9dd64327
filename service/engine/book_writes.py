"""Single-book writes over the admin API: a book put, a batch of books posted, a book deleted,
each a small generation of its own, as crash-safe as a re-index (the pipeline's generations:
indexer/generations.py), searchable once the service swaps it in (the job's success does that).

A put or a post is a re-index job over the books given, as one JSONL file, that keeps every
other book (`keep_missing`): each book is checked first as a catalog row is (the same fields,
the same limits: indexer/catalog/rows.py), so a bad one is a 422 naming its problems, not a
failed job. A delete is a generation without the book, made at once (indexer/deletion.py), not
while a job runs.
"""

from __future__ import annotations

import json
import tempfile
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
from service.engine.reindex_jobs import QUEUED, RUNNING, Job, ReindexJobs

MAX_BOOKS = 1000  # books one POST /admin/books may write


def write_books(jobs: ReindexJobs, books: Sequence[dict[str, Any]], *, name: str) -> Job:
    """A job writing `books` (each a catalog row with an id), the others kept. Raises
    BadCatalogRequestError naming every bad book's problems, JobRunningError while a job runs.
    Call it off the event loop (it writes a file)."""
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
    f = tempfile.TemporaryFile()  # noqa: SIM115  # the job closes it, which deletes it
    try:
        for book in books:
            f.write(json.dumps(book, ensure_ascii=False).encode("utf-8", "surrogatepass") + b"\n")
        f.seek(0)
        return jobs.submit_upload(
            f, name=name, keep_missing=True, skip_invalid=False, allow_mass_delete=False
        )
    except BaseException:
        f.close()
        raise


def delete_book(jobs: ReindexJobs, book_id: str) -> DeleteReport:
    """A generation without `book_id`, active at once and swapped in; BookNotFoundError when
    the index does not hold it, JobRunningError while a job runs."""
    last = jobs.last()
    if last is not None and last.state in (QUEUED, RUNNING):
        raise JobRunningError(last.id)
    try:
        report = delete_books(engine=jobs.engine, book_ids=[book_id])
    except IndexBusyError as e:
        raise WriterBusyError(str(e)) from None
    if not report.removed:
        raise BookNotFoundError(book_id)
    jobs.on_success()
    return report
