"""The web page: plain HTML, JS and CSS shipped in the package (no build step)."""

from __future__ import annotations

from importlib.resources import files

from fastapi import APIRouter, HTTPException
from fastapi.responses import HTMLResponse, Response

router = APIRouter(tags=["page"])
_STATIC = files("service.api") / "static"
_TYPES = {".js": "text/javascript", ".css": "text/css"}


@router.get("/", response_class=HTMLResponse)
def index() -> HTMLResponse:
    """Search, explanations, similar books and recommendations, over the REST API."""
    return HTMLResponse((_STATIC / "index.html").read_text(encoding="utf-8"))


@router.get(
    "/static/{name}",
    response_class=Response,
    responses={
        200: {
            "description": "The file.",
            "content": {t: {"schema": {"type": "string"}} for t in _TYPES.values()},
        },
        404: {"description": "No such file."},
    },
)
def static(name: str) -> Response:
    """The page's script and style sheet."""
    suffix = name[name.rfind(".") :] if "." in name else ""
    if suffix not in _TYPES or "/" in name or name.startswith("."):
        raise HTTPException(404, f"no file {name!r}")
    resource = _STATIC / name
    if not resource.is_file():
        raise HTTPException(404, f"no file {name!r}")
    return Response(resource.read_text(encoding="utf-8"), media_type=_TYPES[suffix])
