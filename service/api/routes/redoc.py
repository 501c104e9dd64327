"""/redoc: ReDoc from the app's own copy of its bundle (fastapi-offline's), reaching no other host.

ReDoc 2's sidebar always shows Redocly's logo as an image from their CDN (`cdn.redoc.ly`, in the
bundle itself, with no option to turn it off). The page's Content-Security-Policy lets images
come only from the app (and data: URLs), so the browser never asks the CDN, and ReDoc drops the
image when it fails to load: no logo, no request leaving the machine. fastapi-offline's own
/redoc is turned off in service/api/main.py for this one.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.openapi.docs import get_redoc_html
from fastapi.responses import HTMLResponse

router = APIRouter()

# where fastapi-offline mounts the assets of /docs and /redoc
STATIC_URL = "/static-offline-docs"
IMAGES_FROM_THE_APP_ONLY = "img-src 'self' data:"


@router.get("/redoc", include_in_schema=False)
async def redoc(request: Request) -> HTMLResponse:
    root = request.scope.get("root_path", "")
    page = get_redoc_html(
        openapi_url=f"{root}{request.app.openapi_url}",
        title=f"{request.app.title} - ReDoc",
        redoc_js_url=f"{root}{STATIC_URL}/redoc.standalone.js",
        redoc_favicon_url=f"{root}{STATIC_URL}/favicon.png",
        with_google_fonts=False,
    )
    page.headers["Content-Security-Policy"] = IMAGES_FROM_THE_APP_ONLY
    return page
