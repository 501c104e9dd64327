"""Reading book catalogs: JSONL (one object a line) or CSV (a header row), every bad row named.

A book needs a `title`; `id` (a string or an integer, unique in the file), `description`,
`authors` (a list, or a string of names separated by `;` or `,`), `year` (an integer) and
`language` are optional, under the names exports give them (indexer/catalog/columns.py:
`Author`, `author_name`, `ISBN13`, …). A row without an id takes its ISBN, else an id derived
from title and authors. Every other field is kept as metadata.

A row with problems is reported with all of them at once (indexer/catalog/rows.py: what both
databases can store), a CSV header that cannot be a catalog's stops the read
(`CatalogHeaderError`), and no malformed CSV record ends the file
(indexer/catalog/csv_records.py). Rows are read one at a time, none longer than
`max_row_bytes`, so memory is bounded per row whatever the file.

A run reads a `CatalogSnapshot`: the file copied once into an anonymous temporary file (gone
with the process, however it ends), checked and indexed from those same bytes.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from indexer.catalog.jsonl_records import MAX_DEPTH
from indexer.catalog.records import CatalogError, CatalogHeaderError, CatalogRecord, InvalidRow
from indexer.catalog.rows import MAX_ID_CHARS, MAX_LANGUAGE_CHARS, is_valid_id
from indexer.catalog.scan import CatalogCheck, CatalogScan

__all__ = [
    "FORMATS",
    "MAX_DEPTH",
    "MAX_ID_CHARS",
    "MAX_LANGUAGE_CHARS",
    "MAX_ROW_BYTES",
    "CatalogCheck",
    "CatalogError",
    "CatalogHeaderError",
    "CatalogRecord",
    "CatalogSnapshot",
    "InvalidRow",
    "catalog_format",
    "is_valid_id",
    "read_catalog",
    "scan_catalog",
]

MAX_ROW_BYTES = 1024 * 1024  # a catalog row's default limit (ATTEND_MAX_ROW_BYTES)
FORMATS = {".jsonl": "jsonl", ".ndjson": "jsonl", ".csv": "csv"}
_COPY_CHUNK = 1024 * 1024


def catalog_format(name: str | Path) -> str:
    """ "jsonl" or "csv", from the file name's suffix; `CatalogError` for any other."""
    suffix = Path(name).suffix.lower()
    if suffix not in FORMATS:
        raise CatalogError([], f"{name}: unknown catalog format {suffix!r}; use .jsonl or .csv")
    return FORMATS[suffix]


class CatalogSnapshot:
    """One run's catalog: bytes that nobody else can change, read as often as the run needs.

    `take` copies a file into an anonymous temporary file (no name on disk, so nothing is left
    behind however the process ends); `adopt` wraps a file that is private already (an upload
    spooled into one). `name` is what errors and the index name: the original path."""

    def __init__(self, file: IO[bytes], *, name: str, max_row_bytes: int = MAX_ROW_BYTES):
        self.file = file
        self.name = name
        self.format = catalog_format(name)
        self.max_row_bytes = max_row_bytes
        self._check: CatalogCheck | None = None

    @classmethod
    def take(cls, path: str | Path, *, max_row_bytes: int = MAX_ROW_BYTES) -> CatalogSnapshot:
        path = Path(path)
        catalog_format(path)
        try:
            source = path.open("rb")
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            raise CatalogError([], f"{path}: no such file") from None
        with source:
            if not path.is_file():
                raise CatalogError([], f"{path}: no such file")
            copy = tempfile.TemporaryFile()  # noqa: SIM115  # closed by close()
            try:
                shutil.copyfileobj(source, copy, _COPY_CHUNK)
            except BaseException:
                copy.close()
                raise
        return cls(copy, name=str(path), max_row_bytes=max_row_bytes)

    @classmethod
    def adopt(
        cls, file: IO[bytes], *, name: str, max_row_bytes: int = MAX_ROW_BYTES
    ) -> CatalogSnapshot:
        return cls(file, name=name, max_row_bytes=max_row_bytes)

    def scan(self) -> Iterator[CatalogRecord | InvalidRow]:
        """Every row in file order, parsed, or the reason it cannot be (from the start)."""
        self.file.seek(0)
        return iter(CatalogScan(self.file, self.name, self.format, self.max_row_bytes))

    def records(self) -> Iterator[CatalogRecord]:
        """The books in file order, the rows that cannot be one skipped (`check` names those)."""
        return (row for row in self.scan() if isinstance(row, CatalogRecord))

    def check(self) -> CatalogCheck:
        """The books counted, the rows rejected and the notices, from one full read: the bytes
        cannot change, so a second call (the CLI checks before the model loads, the run
        again) reads nothing. Raises `CatalogHeaderError` for a CSV header no row can pass."""
        if self._check is None:
            self.file.seek(0)
            self._check = CatalogScan(self.file, self.name, self.format, self.max_row_bytes).check()
        return self._check

    def close(self) -> None:
        self.file.close()

    def __enter__(self) -> CatalogSnapshot:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def scan_catalog(
    path: str | Path, *, max_row_bytes: int = MAX_ROW_BYTES
) -> Iterator[CatalogRecord | InvalidRow]:
    """Every row of the catalog file in file order, parsed, or the reason it cannot be (read in
    place, once: a run reads a `CatalogSnapshot` instead)."""
    path = Path(path)
    fmt = catalog_format(path)
    if not path.is_file():
        raise CatalogError([], f"{path}: no such file")
    with path.open("rb") as f:
        yield from CatalogScan(f, str(path), fmt, max_row_bytes)


def read_catalog(path: str | Path) -> Iterator[CatalogRecord]:
    """The catalog's books; raises `CatalogError` at the first bad row."""
    for row in scan_catalog(path):
        if isinstance(row, InvalidRow):
            raise CatalogError([row])
        yield row
