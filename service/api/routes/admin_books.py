"""Single-book writes on the admin API (service/engine/book_writes.py): put one book, post a
batch, delete one; the admin token as for every admin call."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Response
from starlette.concurrency import run_in_threadpool

from service.api.deps import AdminDep, JobsDep
from service.api.ops_schemas import BooksIn, DeletedOut, JobOut, job_out
from service.engine.book_writes import delete_book, write_books
from service.engine.exceptions import BadCatalogRequestError

router = APIRouter(prefix="/admin", tags=["admin"], dependencies=[AdminDep])
_NAME = "admin-books.jsonl"  # the catalog a write's job names
_BUSY: dict[int | str, dict[str, Any]] = {
    409: {"description": "The queued write job is full, or another writer is running."}
}
_DELETE_BUSY: dict[int | str, dict[str, Any]] = {
    409: {"description": "A job runs or a write job is queued, or another writer is running."}
}


@router.put("/books/{book_id:path}", status_code=202, responses=_BUSY)
async def put_book(
    book_id: str, book: Annotated[dict[str, Any], Body()], response: Response, jobs: JobsDep
) -> JobOut:
    """Write one book (a catalog row's fields; its id is the path's) as a generation of its own,
    the others kept: a job, searchable once it succeeds; while a job runs, the queued write job
    it joins."""
    if "id" in book and str(book["id"]) != book_id:
        raise BadCatalogRequestError(f"the book's id {book['id']!r} is not the path's {book_id!r}")
    job = await run_in_threadpool(write_books, jobs, [{**book, "id": book_id}], name=_NAME)
    response.headers["Location"] = f"/admin/jobs/{job.id}"
    return job_out(job)


@router.post("/books", status_code=202, responses=_BUSY)
async def post_books(body: BooksIn, response: Response, jobs: JobsDep) -> JobOut:
    """Write a batch of books (each with its id) as one generation, the others kept."""
    job = await run_in_threadpool(write_books, jobs, body.books, name=_NAME)
    response.headers["Location"] = f"/admin/jobs/{job.id}"
    return job_out(job)


@router.delete(
    "/books/{book_id:path}",
    responses={404: {"description": "No book with this id."}, **_DELETE_BUSY},
)
async def remove_book(book_id: str, jobs: JobsDep) -> DeletedOut:
    """Remove one book: a generation without it, active and served when this answers."""
    report = await run_in_threadpool(delete_book, jobs, book_id)
    return DeletedOut(removed=report.removed, generation=report.generation)
