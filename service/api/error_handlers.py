"""The one place errors become HTTP answers: always `{"detail": "…"}`. The engine's errors
(service/engine/exceptions.py) map to a status each; the API's own are here."""

from __future__ import annotations

import difflib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from service.api.admission import BusyError, OverBudgetError
from service.api.telemetry import printable
from service.cluster.shards.shard import ShardsOutOfStepError, ShardTimeoutError
from service.engine.exceptions import (
    BadCatalogRequestError,
    BookNotFoundError,
    ExplanationUnavailableError,
    IndexEmptyError,
    JobNotFoundError,
    JobRunningError,
    NotReadyError,
    UploadTooLargeError,
    WriterBusyError,
)

logger = logging.getLogger(__name__)


class AdminAuthError(PermissionError):
    """No bearer token (401) or a wrong one (403) on an admin endpoint."""

    def __init__(self, status_code: int, message: str):
        self.status_code = status_code
        super().__init__(message)


NESTED_TOO_DEEP = (
    "the body's JSON is nested too deeply: more levels than the parser takes (about 1,000)"
)


# What a client may have meant by a parameter the route does not take, where spelling alone
# would not say (difflib finds `ofset` → `offset`, not `query` → `q`)
_MEANT = {
    "query": "q",
    "search": "q",
    "text": "q",
    "limit": "k",
    "top_k": "k",
    "n": "k",
    "size": "k",
    "skip": "offset",
    "page": "offset",
}
_LOCATIONS = ("query", "body", "path", "header", "cookie")


def _validation_message(exc: RequestValidationError, request: Request | None = None) -> str:
    """One sentence of every problem, unknown parameters first (`/search?query=dune` answered
    `q: Field required; Extra inputs are not permitted`, naming neither `query` nor `q`)."""
    unknown: list[str] = []
    meant: set[str] = set()  # what the unknown names were taken for: not also "missing"
    parts: list[tuple[str, str, str]] = []  # (where, message, error type)
    for err in exc.errors():
        if err.get("type") == "json_invalid":
            position = err["loc"][-1] if err.get("loc") else "?"
            reason = err.get("ctx", {}).get("error", "JSON decode error")
            parts.append(("", f"the body is not valid JSON: {reason} at character {position}", ""))
            continue
        loc = tuple(err.get("loc", ()))
        # the first element says where (query, body, path); the rest names the field, which
        # may itself be called `query`
        inside = loc[1:] if loc[:1] and loc[0] in _LOCATIONS else loc
        where = ".".join(str(p) for p in inside)
        if err.get("type") == "extra_forbidden" and len(inside) == 1 and request is not None:
            message, guess = _unknown(str(inside[0]), loc[0], request)
            unknown.append(message)
            meant |= {guess} if guess else set()
            continue
        if not where and loc[:1] == ("body",):
            where = "body"
        msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
        parts.append((where, f"{where}: {msg}" if where else msg, str(err.get("type"))))
    rest = [m for where, m, kind in parts if not (kind == "missing" and where in meant)]
    # once each: a body the route and one of its dependencies both take (/recommend's budget)
    # is validated twice, and each problem came back twice
    return "; ".join(dict.fromkeys(unknown + rest)) or "invalid request"


def _unknown(name: str, location: object, request: Request) -> tuple[str, str | None]:
    """`unknown parameter 'query' (did you mean 'q'?)`, from the names the route takes, and
    the name it guessed."""
    known = _names_taken(request, "body" if location == "body" else "query")
    what = "body field" if location == "body" else "parameter"
    meant = _MEANT.get(name.lower())
    if meant not in known:
        close = difflib.get_close_matches(name.lower().replace("-", "_"), known, n=1)
        meant = close[0] if close else None
    if meant is not None:
        return f"unknown {what} {name!r} (did you mean {meant!r}?)", meant
    return f"unknown {what} {name!r} (this endpoint takes {', '.join(known) or 'none'})", None


def _names_taken(request: Request, location: str) -> list[str]:
    """The query parameters (or body fields) of the route that answered: a parameter model's
    fields one by one."""
    stack = [getattr(request.scope.get("route"), "dependant", None)]
    names: list[str] = []
    while stack:
        dependant = stack.pop()
        if dependant is None:
            continue
        stack.extend(dependant.dependencies)
        for field in dependant.query_params if location == "query" else dependant.body_params:
            model = field.field_info.annotation
            if isinstance(model, type) and issubclass(model, BaseModel):
                names += [f.alias or n for n, f in model.model_fields.items()]
            else:
                names.append(field.alias)
    return list(dict.fromkeys(names))


def _not_json(request: Request, exc: RequestValidationError) -> str | None:
    """The 415 message when a body was sent as something other than JSON, else None."""
    if not any(tuple(err.get("loc", ()))[:1] == ("body",) for err in exc.errors()):
        return None
    content_type = request.headers.get("content-type")
    if content_type is None:
        return "the body needs Content-Type: application/json" if exc.body else None
    media = content_type.split(";")[0].strip().lower()
    if media == "application/json" or media.endswith("+json"):
        return None
    return f"the body must be JSON (Content-Type: application/json), not {media or 'empty'}"


_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


def _allowed_methods(request: Request) -> list[str]:
    """Every method some route of this path answers, for a 405's Allow header: the routes are
    asked, one method at a time, whether they would take the request."""
    return [
        method
        for method in _METHODS
        if any(
            route.matches({**request.scope, "method": method})[0] == Match.FULL
            for route in request.app.router.routes
        )
    ]


def document_errors(app: FastAPI) -> None:
    """Make the OpenAPI schema say what errors look like: every 4xx and 5xx answer is
    `ErrorDetail` (FastAPI's default says 422 is a list of validation errors; ours is a
    sentence), every operation may answer 400 (a URL that is not UTF-8), and operations with a
    body 413 and 415 (see service/api/guards.py)."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        schema = build()
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        components["ErrorDetail"] = _ERROR_SCHEMA
        for name in ("HTTPValidationError", "ValidationError"):
            components.pop(name, None)
        for path in schema.get("paths", {}).values():
            for operation in path.values():
                responses = operation.setdefault("responses", {})
                statuses = {"400": "The URL is not valid UTF-8."}
                if "requestBody" in operation:
                    statuses["413"] = "The body is larger than ATTEND_MAX_BODY_BYTES."
                    statuses["415"] = "The body is not JSON."
                    statuses["422"] = "The body is not valid for this operation."
                for status, description in statuses.items():
                    responses.setdefault(status, {"description": description})
                for status, response in responses.items():
                    if status[0] in "45":
                        response["content"] = {
                            "application/json": {
                                "schema": {"$ref": "#/components/schemas/ErrorDetail"}
                            }
                        }
        return schema

    app.openapi = openapi  # type: ignore[method-assign]


_ERROR_SCHEMA = {
    "title": "ErrorDetail",
    "type": "object",
    "properties": {"detail": {"type": "string", "description": "What was wrong, in a sentence."}},
    "required": ["detail"],
}


# Domain errors whose message is the whole answer, by the status they answer with.
_STATUS: dict[type[Exception], int] = {
    BookNotFoundError: 404,
    JobNotFoundError: 404,
    JobRunningError: 409,
    WriterBusyError: 409,
    BadCatalogRequestError: 422,
    UploadTooLargeError: 413,
    OverBudgetError: 422,
    IndexEmptyError: 503,
    ExplanationUnavailableError: 503,
    NotReadyError: 503,
    ShardsOutOfStepError: 503,
}


def _detail_handler(status: int) -> Callable[[Request, Exception], Awaitable[Response]]:
    async def handle(_: Request, exc: Exception) -> Response:
        return JSONResponse({"detail": str(exc)}, status_code=status)

    return handle


def install_error_handlers(app: FastAPI) -> None:
    document_errors(app)

    for exc_type, status in _STATUS.items():
        app.add_exception_handler(exc_type, _detail_handler(status))

    @app.exception_handler(AdminAuthError)
    async def _auth(_: Request, exc: AdminAuthError) -> JSONResponse:
        headers = {"WWW-Authenticate": "Bearer"} if exc.status_code == 401 else None
        return JSONResponse({"detail": str(exc)}, status_code=exc.status_code, headers=headers)

    @app.exception_handler(ShardTimeoutError)
    async def _shard_timeout(_: Request, exc: ShardTimeoutError) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=503, headers={"Retry-After": "1"})

    @app.exception_handler(BusyError)
    async def _busy(_: Request, exc: BusyError) -> JSONResponse:
        headers = {"Retry-After": str(exc.retry_after_s)}
        return JSONResponse({"detail": str(exc)}, status_code=429, headers=headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        if message := _not_json(request, exc):
            return JSONResponse({"detail": message}, status_code=415)
        return JSONResponse({"detail": _validation_message(exc, request)}, status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> Response:
        if exc.status_code == 400 and isinstance(exc.__cause__, RecursionError):
            # FastAPI's body reader answers 400 for any parse error but JSON's own; JSON nested
            # past json.loads' recursion limit is bad input like any other invalid body: 422
            return JSONResponse({"detail": NESTED_TOO_DEEP}, status_code=422)
        headers = dict(exc.headers or {})
        if exc.status_code == 405:  # Starlette names only the first route's methods
            headers["Allow"] = ", ".join(_allowed_methods(request))
        return await http_exception_handler(
            request, StarletteHTTPException(exc.status_code, exc.detail, headers)
        )

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        logger.exception("unhandled error on %s %s", request.method, printable(request.url.path))
        return JSONResponse(
            {"detail": "internal error; the server log has the details"}, status_code=500
        )
