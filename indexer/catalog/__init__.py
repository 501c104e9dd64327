"""Reading book catalogs: JSONL (one object a line), a JSON array, CSV/TSV (a header row), or
MARC21 and MARCXML (indexer/catalog/marc_records.py), any of them gzipped or in UTF-16
(indexer/catalog/formats.py), every bad row named.

A book needs a `title`; `id` (a string or an integer, unique in the file), `description`,
`authors` (a list, or a string of names separated by `;` or `,`), `year` (an integer) and
`language` are optional, under the names exports give them (indexer/catalog/columns.py:
`Author`, `author_name`, `ISBN13`, Goodreads', Calibre's and LibraryThing's columns, and the
user's own mapping, `columns`). A row without an id takes its ISBN, else an id derived
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

import hashlib
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from indexer.catalog.columns import ColumnNames
from indexer.catalog.formats import FORMATS, as_utf8, catalog_format, copy_decoded, refine
from indexer.catalog.jsonl_records import MAX_DEPTH
from indexer.catalog.records import (
    CatalogError,
    CatalogHeaderError,
    CatalogRecord,
    CatalogTooLargeError,
    InvalidRow,
)
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
    "CatalogTooLargeError",
    "ColumnNames",
    "InvalidRow",
    "catalog_format",
    "is_valid_id",
    "read_catalog",
    "scan_catalog",
]

MAX_ROW_BYTES = 1024 * 1024  # a catalog row's default limit (ATTEND_MAX_ROW_BYTES)


class CatalogSnapshot:
    """One run's catalog: bytes that nobody else can change, read as often as the run needs.

    `take` copies a file into an anonymous temporary file (no name on disk, so nothing is left
    behind however the process ends), decompressed and converted to UTF-8 on the way; `adopt`
    wraps a file that is private already (an upload spooled into one), converted the same way
    into a second one if it must be. `name` is what errors and the index name: the original
    path. `columns`: the user's mapping of header names to fields (ColumnNames); `encoding`:
    the text's, where it is not UTF-8 (else a text that is not is read as the encoding
    charset-normalizer finds, formats.as_utf8)."""

    def __init__(
        self,
        file: IO[bytes],
        *,
        name: str,
        max_row_bytes: int = MAX_ROW_BYTES,
        columns: dict[str, str] | None = None,
        notices: list[str] | None = None,
        encoding: str | None = None,
    ):
        self.name = name
        try:
            self.format, found = refine(file, catalog_format(name), name)
            if self.format not in ("marc", "marcxml", "xlsx"):  # each names its own encodings
                file, converted = as_utf8(file, name, encoding)
                found += converted
        except BaseException:
            file.close()
            raise
        self.file = file
        self.max_row_bytes = max_row_bytes
        self.names = _names(columns)
        self.notices = [*(notices or []), *found]  # how the bytes were read
        self._check: CatalogCheck | None = None

    @classmethod
    def take(
        cls,
        path: str | Path,
        *,
        max_row_bytes: int = MAX_ROW_BYTES,
        columns: dict[str, str] | None = None,
        encoding: str | None = None,
    ) -> CatalogSnapshot:
        path = Path(path)
        catalog_format(path)
        _names(columns)
        try:
            source = path.open("rb")
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            raise CatalogError([], f"{path}: no such file") from None
        with source:
            if not path.is_file():
                raise CatalogError([], f"{path}: no such file")
            copy = tempfile.TemporaryFile()  # noqa: SIM115  # closed by close()
            try:
                notices = copy_decoded(source, copy, str(path))
                return cls(
                    copy,
                    name=str(path),
                    max_row_bytes=max_row_bytes,
                    columns=columns,
                    notices=notices,
                    encoding=encoding,
                )
            except BaseException:
                copy.close()
                raise

    @classmethod
    def adopt(
        cls,
        file: IO[bytes],
        *,
        name: str,
        max_row_bytes: int = MAX_ROW_BYTES,
        columns: dict[str, str] | None = None,
        encoding: str | None = None,
        max_bytes: int | None = None,
    ) -> CatalogSnapshot:
        """`max_bytes`: what the file may hold decoded (an upload's bound, which a gzip body
        could otherwise inflate past many times over); `CatalogTooLargeError` past it."""
        file.seek(0)
        head = file.read(4)
        file.seek(0)
        notices: list[str] = []
        if head.startswith((b"\x1f\x8b", b"\xff\xfe", b"\xfe\xff")):  # gzip, UTF-16
            copy = tempfile.TemporaryFile()  # noqa: SIM115  # closed by close()
            try:
                notices = copy_decoded(file, copy, name, max_bytes=max_bytes)
            except BaseException:
                copy.close()
                raise
            finally:
                file.close()
            file = copy
        file.seek(0)
        return cls(
            file,
            name=name,
            max_row_bytes=max_row_bytes,
            columns=columns,
            notices=notices,
            encoding=encoding,
        )

    def scan(self) -> Iterator[CatalogRecord | InvalidRow]:
        """Every row in file order, parsed, or the reason it cannot be (from the start)."""
        self.file.seek(0)
        return iter(self._scan())

    def records(self) -> Iterator[CatalogRecord]:
        """The books in file order, the rows that cannot be one skipped (`check` names those)."""
        return (row for row in self.scan() if isinstance(row, CatalogRecord))

    def check(self) -> CatalogCheck:
        """The books counted, the rows rejected and the notices, from one full read: the bytes
        cannot change, so a second call (the CLI checks before the model loads, the run
        again) reads nothing. Raises `CatalogHeaderError` for a CSV header no row can pass."""
        if self._check is None:
            self.file.seek(0)
            check = self._scan().check()
            self._check = CatalogCheck(
                check.books, check.rejected, self.notices + check.notices, check.ids
            )
        return self._check

    def digest(self) -> str:
        """A digest of the snapshot's bytes (BLAKE2b, 128 bits): which catalog a run read."""
        h = hashlib.blake2b(digest_size=16)
        self.file.seek(0)
        while chunk := self.file.read(1 << 20):
            h.update(chunk)
        return h.hexdigest()

    def _scan(self) -> CatalogScan:
        return CatalogScan(self.file, self.name, self.format, self.max_row_bytes, self.names)

    def close(self) -> None:
        self.file.close()

    def __enter__(self) -> CatalogSnapshot:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def scan_catalog(
    path: str | Path, *, max_row_bytes: int = MAX_ROW_BYTES, columns: dict[str, str] | None = None
) -> Iterator[CatalogRecord | InvalidRow]:
    """Every row of the catalog file in file order, parsed, or the reason it cannot be (from a
    snapshot of it, read once)."""
    with CatalogSnapshot.take(path, max_row_bytes=max_row_bytes, columns=columns) as snapshot:
        yield from snapshot.scan()


def read_catalog(path: str | Path) -> Iterator[CatalogRecord]:
    """The catalog's books; raises `CatalogError` at the first bad row."""
    for row in scan_catalog(path):
        if isinstance(row, InvalidRow):
            raise CatalogError([row])
        yield row


def _names(columns: dict[str, str] | None) -> ColumnNames:
    """The user's mapping as ColumnNames; a bad one is the catalog's error, before any read."""
    try:
        return ColumnNames(columns)
    except ValueError as e:
        raise CatalogError([], str(e)) from None
