"""Domain errors and the one place they become HTTP answers: always `{"detail": "…"}`."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

logger = logging.getLogger(__name__)


class BookNotFoundError(LookupError):
    def __init__(self, book_id: str):
        self.book_id = book_id
        super().__init__(f"no book with id {book_id!r}")


class IndexEmptyError(RuntimeError):
    def __init__(self) -> None:
        super().__init__("the index holds no books yet: run `attend index CATALOG` first")


def _validation_message(exc: RequestValidationError) -> str:
    parts = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err.get("loc", ()) if p not in ("query", "body", "path"))
        msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
        parts.append(f"{where}: {msg}" if where else msg)
    return "; ".join(parts) or "invalid request"


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(BookNotFoundError)
    async def _not_found(_: Request, exc: BookNotFoundError) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=404)

    @app.exception_handler(IndexEmptyError)
    async def _empty(_: Request, exc: IndexEmptyError) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=503)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse({"detail": _validation_message(exc)}, status_code=422)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        logger.exception("unhandled error on %s %s", request.method, request.url.path)
        return JSONResponse(
            {"detail": "internal error; the server log has the details"}, status_code=500
        )
