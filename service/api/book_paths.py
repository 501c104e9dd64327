"""Book ids in URLs: any id is reachable, a `/` in it included (DOIs have one).

`/books/{id}`, `/books/{id}/similar` and `/books/{id}/explain` share a prefix, and an ASGI server
hands routing the path already percent-decoded, so `/books/dune%2Fsimilar` (the book with id
`dune/similar`) read as the similar books of `dune`. The rule: a `/` inside an id is written
`%2F`. `EncodedSlashes` keeps `%2F` (and `%25`, so that a literal `%2F` in an id survives)
encoded in the path routing sees under `/books/`, and the `book_id` convertor decodes the id the
route matched, then normalises it as the index does (`models.text.normalize_id`). A raw `/` is
still taken as part of the id, except before a final `/similar` or `/explain`, which name the
sub-routes: `/books/10.1000/xyz` is the book `10.1000/xyz`, and the book `a/similar` is
`/books/a%2Fsimilar`.
"""

from __future__ import annotations

import re
from urllib.parse import quote, unquote

from starlette.convertors import Convertor, register_url_convertor
from starlette.types import ASGIApp, Receive, Scope, Send

from models.text import normalize_id

PREFIX = "/books/"
_KEPT = re.compile(r"%2[fF5]")  # %2F and %25: left encoded for the convertor


class BookIdConvertor(Convertor[str]):
    regex = ".+"

    def convert(self, value: str) -> str:
        return normalize_id(unquote(value))

    def to_string(self, value: str) -> str:
        return quote(value, safe="")


register_url_convertor("book_id", BookIdConvertor())
BOOK = PREFIX + "{book_id:book_id}"  # the routes' path; importing it registers the convertor


def routing_path(raw_path: str) -> str:
    """`raw_path` percent-decoded except for %2F and %25 (upper-cased)."""
    parts = _KEPT.split(raw_path)
    kept = [m.group().upper() for m in _KEPT.finditer(raw_path)]
    out = [unquote(parts[0])]
    for escape, part in zip(kept, parts[1:], strict=True):
        out += [escape, unquote(part)]
    return "".join(out)


class EncodedSlashes:
    """Under /books/, route on the path with %2F (and %25) still encoded."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        raw = scope.get("raw_path") if scope["type"] == "http" else None
        if raw and scope["path"].startswith(PREFIX) and b"%" in raw:
            try:
                raw_path = bytes(raw).decode("ascii")  # an HTTP path is ASCII; else left as is
            except UnicodeDecodeError:
                raw_path = ""
            if _KEPT.search(raw_path):
                scope = {**scope, "path": routing_path(raw_path)}
        await self.app(scope, receive, send)
