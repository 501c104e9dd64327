"""Reading book catalogs: JSONL (one object a line) or CSV (a header row), every bad row named.

Required per book: `id` (a string, unique in the file) and `title`. Optional: `description`,
`authors` (a list, or a `;`-separated string), `year` (an integer), `language`. Every other
field is kept as metadata.
"""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MAX_ID_CHARS = 256
MAX_CSV_FIELD_CHARS = 16 * 1024 * 1024
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_KNOWN = {"id", "title", "description", "authors", "year", "language"}


@dataclass(frozen=True)
class CatalogRecord:
    id: str
    title: str
    description: str | None = None
    authors: list[str] = field(default_factory=list)
    year: int | None = None
    language: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    line: int = 0


@dataclass(frozen=True)
class InvalidRow:
    path: str
    line: int
    reason: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.reason}"


class CatalogError(ValueError):
    """The catalog cannot be indexed as it is; `rows` says where and why."""

    def __init__(self, rows: list[InvalidRow], message: str | None = None):
        self.rows = rows
        if message is None:
            shown = "\n  ".join(str(r) for r in rows[:20])
            more = f"\n  … and {len(rows) - 20} more" if len(rows) > 20 else ""
            message = f"{len(rows)} invalid row(s):\n  {shown}{more}"
        super().__init__(message)


class _RowError(ValueError):
    pass


def scan_catalog(path: str | Path) -> Iterator[CatalogRecord | InvalidRow]:
    """Every row of the catalog in file order, parsed, or the reason it cannot be."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".ndjson"):
        rows = _jsonl_rows(path)
    elif suffix == ".csv":
        rows = _csv_rows(path)
    else:
        raise CatalogError([], f"{path}: unknown catalog format {suffix!r}; use .jsonl or .csv")
    if not path.is_file():
        raise CatalogError([], f"{path}: no such file")
    seen: dict[str, int] = {}
    for line, raw in rows:
        if isinstance(raw, InvalidRow):
            yield raw
            continue
        try:
            record = _parse(raw, line)
        except _RowError as e:
            yield InvalidRow(str(path), line, str(e))
            continue
        if record.id in seen:
            yield InvalidRow(
                str(path), line, f"duplicate id {record.id!r} (first on line {seen[record.id]})"
            )
            continue
        seen[record.id] = line
        yield record


def read_catalog(path: str | Path) -> Iterator[CatalogRecord]:
    """The catalog's books; raises `CatalogError` at the first bad row."""
    for row in scan_catalog(path):
        if isinstance(row, InvalidRow):
            raise CatalogError([row])
        yield row


def _jsonl_rows(path: Path) -> Iterator[tuple[int, dict[str, Any] | InvalidRow]]:
    with path.open("rb") as f:
        for line, raw in enumerate(f, start=1):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                yield line, InvalidRow(str(path), line, f"invalid UTF-8 at byte {e.start}")
                continue
            if line == 1:
                text = text.removeprefix("\ufeff")  # a byte-order mark some editors write
            if not text.strip():
                continue
            try:
                obj = json.loads(text)
            except json.JSONDecodeError as e:
                yield line, InvalidRow(str(path), line, f"broken JSON: {e.msg} at column {e.colno}")
                continue
            if not isinstance(obj, dict):
                yield line, InvalidRow(str(path), line, f"expected a JSON object, got {_kind(obj)}")
                continue
            yield line, obj


def _csv_rows(path: Path) -> Iterator[tuple[int, dict[str, Any] | InvalidRow]]:
    # surrogateescape keeps undecodable bytes as lone surrogates, so one bad row is reported
    # with its line instead of aborting the whole file; utf-8-sig drops a byte-order mark.
    csv.field_size_limit(max(csv.field_size_limit(), MAX_CSV_FIELD_CHARS))
    with path.open(encoding="utf-8-sig", errors="surrogateescape", newline="") as f:
        reader = csv.reader(f)
        try:
            yield from _csv_records(path, reader)
        except csv.Error as e:  # the reader cannot go on past a malformed record
            line = reader.line_num
            yield line, InvalidRow(str(path), line, f"malformed CSV, reading stopped here: {e}")


def _csv_records(path: Path, reader: Any) -> Iterator[tuple[int, dict[str, Any] | InvalidRow]]:
    header = next(reader, None)
    if header is None:
        return
    names = [h.strip() for h in header]
    if "id" not in names or "title" not in names:
        yield 1, InvalidRow(str(path), 1, "CSV header must name the columns 'id' and 'title'")
        return
    start = reader.line_num + 1
    for cells in reader:
        line, start = start, reader.line_num + 1
        if not any(c.strip() for c in cells):
            continue
        if any(_has_surrogate(c) for c in cells):
            yield line, InvalidRow(str(path), line, "invalid UTF-8")
            continue
        if len(cells) != len(names):
            yield (
                line,
                InvalidRow(str(path), line, f"expected {len(names)} columns, got {len(cells)}"),
            )
            continue
        row: dict[str, Any] = {}
        for name, raw in zip(names, cells, strict=True):
            cell = raw.strip()
            if not cell:
                continue
            if name == "authors":
                row[name] = [a.strip() for a in cell.split(";") if a.strip()]
            elif name == "year":
                row[name] = int(cell) if re.fullmatch(r"-?\d+", cell) else cell
            else:
                row[name] = cell
        yield line, row


def is_valid_id(book_id: str) -> bool:
    """Whether a catalog row may have this id: 1 to MAX_ID_CHARS printable characters."""
    return 0 < len(book_id) <= MAX_ID_CHARS and not _CONTROL.search(book_id)


def _parse(raw: dict[str, Any], line: int) -> CatalogRecord:
    book_id = raw.get("id")
    if book_id is None:
        raise _RowError("missing 'id'")
    if not isinstance(book_id, str):
        raise _RowError(f"'id' must be a string, got {_kind(book_id)}")
    book_id = book_id.strip()
    if not book_id:
        raise _RowError("'id' is empty")
    if not is_valid_id(book_id):
        raise _RowError(f"'id' must be at most {MAX_ID_CHARS} printable characters")
    title = _text(raw, "title")
    if title is None:
        raise _RowError("missing 'title'")
    authors = raw.get("authors")
    if authors is None:
        authors = []
    elif isinstance(authors, str):
        authors = [a.strip() for a in authors.split(";") if a.strip()]
    elif not (isinstance(authors, list) and all(isinstance(a, str) for a in authors)):
        raise _RowError(f"'authors' must be a list of strings, got {_kind(authors)}")
    year = raw.get("year")
    if year is not None and (isinstance(year, bool) or not isinstance(year, int)):
        raise _RowError(f"'year' must be an integer, got {_kind(year)} {year!r}")
    return CatalogRecord(
        id=book_id,
        title=title,
        description=_text(raw, "description"),
        authors=[a.strip() for a in authors if a.strip()],
        year=year,
        language=_text(raw, "language"),
        extra={k: v for k, v in raw.items() if k not in _KNOWN},
        line=line,
    )


def _text(raw: dict[str, Any], name: str) -> str | None:
    value = raw.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise _RowError(f"{name!r} must be a string, got {_kind(value)}")
    return value.strip() or None


def _kind(value: object) -> str:
    return {
        dict: "an object",
        list: "a list",
        str: "a string",
        bool: "a boolean",
        int: "an integer",
        float: "a number",
        type(None): "null",
    }.get(type(value), type(value).__name__)


def _has_surrogate(text: str) -> bool:
    return any("\udc80" <= ch <= "\udcff" for ch in text)
