"""The admin API: re-index in the background, follow the job. Present only when
ATTEND_ADMIN_TOKEN is set, and every call needs it as a bearer token."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from fastapi import APIRouter, Request, Response
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import UploadFile

from service.api.deps import AdminDep, JobsDep, SettingsDep
from service.api.error_handlers import NESTED_TOO_DEEP
from service.api.ops_schemas import JobOut, ReindexRequest, job_out
from service.engine.exceptions import BadCatalogRequestError, JobNotFoundError
from service.engine.reindex_jobs import Job, ReindexJobs

router = APIRouter(prefix="/admin", tags=["admin"], dependencies=[AdminDep])

_SUFFIXES = (".jsonl", ".ndjson", ".csv", ".xlsx", ".mrc", ".marc", ".xml")  # .xml: MARCXML
_UPLOAD_BODY = {
    "content": {
        "application/json": {"schema": ReindexRequest.model_json_schema()},
        "multipart/form-data": {
            "schema": {
                "type": "object",
                "required": ["catalog"],
                "properties": {
                    "catalog": {"type": "string", "format": "binary"},
                    "keep_missing": {"type": "boolean"},
                    "skip_invalid": {"type": "boolean"},
                    "allow_mass_delete": {"type": "boolean"},
                },
            }
        },
    },
    "required": True,
}


@router.post(
    "/reindex",
    status_code=202,
    openapi_extra={"requestBody": _UPLOAD_BODY},
    responses={409: {"description": "A job is already running."}},
)
async def reindex(
    request: Request, response: Response, jobs: JobsDep, settings: SettingsDep
) -> JobOut:
    """Re-index from a catalog path on the server (JSON) or an uploaded file (multipart)."""
    if request.headers.get("content-type", "").startswith("multipart/form-data"):
        job = await _submit_upload(request, jobs, settings.max_upload_bytes)
    else:
        try:
            body = ReindexRequest.model_validate_json(await request.body())
        except ValidationError as e:
            msg = "; ".join(_reason(x["loc"], x["msg"]) for x in e.errors())
            raise BadCatalogRequestError(msg or "invalid JSON body") from None
        path = Path(body.catalog)
        if path.suffix.lower() not in _SUFFIXES or not _is_file(path):
            raise BadCatalogRequestError(
                f"catalog {body.catalog!r} is not a .jsonl, .csv, .xlsx, .mrc or .xml file on the "
                "server"
            )
        job = jobs.submit(
            path,
            catalog=body.catalog,
            keep_missing=body.keep_missing,
            skip_invalid=body.skip_invalid,
            allow_mass_delete=body.allow_mass_delete,
            cleanup=False,
        )
    response.headers["Location"] = f"/admin/jobs/{job.id}"
    return job_out(job)


@router.get("/jobs/{job_id}", responses={404: {"description": "No such job."}})
def get_job(job_id: str, jobs: JobsDep) -> JobOut:
    """A re-index job's state, progress and, once done, its summary."""
    job = jobs.get(job_id)
    if job is None:
        raise JobNotFoundError(job_id)
    return job_out(job)


_FLAGS = ("keep_missing", "skip_invalid", "allow_mass_delete")


async def _submit_upload(request: Request, jobs: ReindexJobs, max_bytes: int) -> Job:
    """A job over the uploaded catalog (saved to an anonymous temporary file, which no crash
    leaves behind), with the flags of _FLAGS given as form fields; decompressed, it may hold
    `max_bytes` (the body's own bound)."""
    async with request.form() as form:
        upload = form.get("catalog")
        if not isinstance(upload, UploadFile):
            raise BadCatalogRequestError("upload the catalog as the form's file field 'catalog'")
        suffix = Path(upload.filename or "").suffix.lower()
        if suffix not in _SUFFIXES:
            raise BadCatalogRequestError(
                f"the uploaded catalog must be .jsonl, .csv, .xlsx, .mrc or .xml, not {suffix!r}"
            )

        name = upload.filename or f"upload{suffix}"

        def flag(name: str) -> bool:
            return str(form.get(name, "false")).lower() in ("1", "true", "yes", "on")

        flags = {f: flag(f) for f in _FLAGS}

        def save() -> Job:
            f = tempfile.TemporaryFile()  # noqa: SIM115  # the job closes it, which deletes it
            try:
                shutil.copyfileobj(upload.file, f, 1024 * 1024)
            except BaseException:
                f.close()
                raise
            return jobs.submit_upload(f, name=name, max_bytes=max_bytes, **flags)

        return await run_in_threadpool(save)


def _reason(loc: tuple[int | str, ...], msg: str) -> str:
    """A validation error as "field: message", or the message alone for the whole body."""
    if "recursion limit" in msg:
        return NESTED_TOO_DEEP
    return f"{'.'.join(map(str, loc))}: {msg}" if loc else msg


def _is_file(path: Path) -> bool:
    """Whether `path` is a file here; False for a path the OS refuses to look up (a name too
    long, say: ENAMETOOLONG is an OSError pathlib passes on, which would answer 500)."""
    try:
        return path.is_file()
    except OSError:
        return False
