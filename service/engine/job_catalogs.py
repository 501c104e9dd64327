"""The catalogs a re-index job reads that are not a file of the operator's: an upload, adopted
and bounded, and single-book writes written out as JSONL. Each is an anonymous temporary file
the job owns (closing it deletes it, so no crash leaves one behind)."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterable
from typing import IO, Any

from indexer.catalog import CatalogError, CatalogSnapshot, CatalogTooLargeError
from service.engine.exceptions import BadCatalogRequestError, UploadTooLargeError


def upload_catalog(
    file: IO[bytes], *, name: str, max_row_bytes: int, max_bytes: int | None
) -> CatalogSnapshot:
    """An uploaded catalog, a gzip or UTF-16 one decoded to `max_bytes` at most (off the event
    loop: it reads the whole upload). What is wrong with its bytes is the client's error,
    answered before any job: `UploadTooLargeError` past the bound, else
    `BadCatalogRequestError` naming the file."""
    try:
        return CatalogSnapshot.adopt(
            file, name=name, max_row_bytes=max_row_bytes, max_bytes=max_bytes
        )
    except CatalogTooLargeError as e:
        raise UploadTooLargeError(str(e)) from None
    except CatalogError as e:
        raise BadCatalogRequestError(str(e)) from None


def books_catalog(
    books: Iterable[dict[str, Any]], *, name: str, max_row_bytes: int
) -> CatalogSnapshot:
    """`books` (catalog rows as JSON objects) as a JSONL catalog."""
    f = tempfile.TemporaryFile()  # noqa: SIM115  # the job closes it, which deletes it
    try:
        for book in books:
            line = json.dumps(book, ensure_ascii=False).encode("utf-8", "surrogatepass")
            f.write(line + b"\n")
        f.seek(0)
        return CatalogSnapshot.adopt(f, name=name, max_row_bytes=max_row_bytes)
    except BaseException:
        f.close()
        raise
