"""Bodies of the operator's endpoints: health, readiness and re-index jobs."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from service.engine.book_writes import MAX_BOOKS
from service.engine.reindex_jobs import Job


class Health(BaseModel):
    status: str
    catalog_size: int
    model: str
    device: str
    generation: int | None = Field(None, description="The index generation being served.")
    index_id: str | None = Field(
        None,
        description="The identity of the database the index was read from (a random id written "
        "when it was made; a database dropped and re-created gets another). `attend search` "
        "asks this server only when its database has the same id and generation.",
    )


class Ready(BaseModel):
    status: str = Field(description="`ready`.")
    catalog_size: int = Field(description="Books whose keys are loaded.")


class ReindexRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    catalog: str = Field(
        min_length=1,
        description="Path of a .jsonl, .csv, .xlsx, .mrc (MARC21) or .xml (MARCXML) catalog on the "
        "server (or upload one as the multipart/form-data file field `catalog`).",
    )
    keep_missing: bool = Field(
        False, description="Keep books the catalog lacks (default: the catalog is a snapshot)."
    )
    skip_invalid: bool = Field(
        False, description="Index the valid rows of a catalog with bad ones (default: refuse)."
    )
    allow_mass_delete: bool = Field(
        False,
        description="Index a catalog that removes more than ATTEND_MAX_DELETE_FRACTION "
        "(default 0.5) of the indexed books (default: the job fails and nothing is written).",
    )


class JobProgress(BaseModel):
    total: int = Field(description="Valid books in the catalog.")
    done: int = Field(description="Books processed so far.")
    embedded: int = Field(description="Texts embedded so far.")
    books_per_second: float
    eta_s: float | None
    generation: int | None = Field(description="The generation being built.")


class JobReport(BaseModel):
    added: int
    updated: int
    unchanged: int
    removed: int
    rejected: int
    embedded: int
    generation: int | None = Field(description="The active generation after the job.")
    seconds: float


class JobOut(BaseModel):
    id: str
    state: str = Field(description="queued, running, succeeded or failed.")
    catalog: str
    created_at: datetime
    finished_at: datetime | None
    progress: JobProgress
    report: JobReport | None = Field(description="The summary, once the job succeeded.")
    error: str | None


class BooksIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    books: list[dict[str, Any]] = Field(
        min_length=1,
        max_length=MAX_BOOKS,
        description=f"1 to {MAX_BOOKS} books, each a catalog row's fields with its `id`.",
    )


class DeletedOut(BaseModel):
    removed: list[str] = Field(description="The id removed.")
    generation: int | None = Field(description="The active generation, without the book.")


def job_out(job: Job) -> JobOut:
    p = job.standing()
    r = job.report
    return JobOut(
        id=job.id,
        state=job.state,
        catalog=job.catalog,
        created_at=job.created_at,
        finished_at=job.finished_at,
        progress=JobProgress(
            total=p.total,
            done=p.done,
            embedded=p.embedded,
            books_per_second=round(p.books_per_second, 2),
            eta_s=None if p.eta_s is None else round(p.eta_s, 1),
            generation=p.generation,
        ),
        report=None
        if r is None
        else JobReport(
            added=r.added,
            updated=r.updated,
            unchanged=r.unchanged,
            removed=r.removed,
            rejected=len(r.rejected),
            embedded=r.embedded,
            generation=r.generation,
            seconds=round(r.seconds, 2),
        ),
        error=job.error,
    )
