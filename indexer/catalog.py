"""Reading book catalogs: JSONL (one object a line) or CSV (a header row), every bad row named.

Required per book: `id` (a string, unique in the file) and `title`. Optional: `description`,
`authors` (a list, or a `;`-separated string), `year` (an integer), `language`. Every other
field is kept as metadata.

A row is valid only if both databases can store it and serve it back: no NUL character
(PostgreSQL refuses it in text), no lone surrogate (not encodable as UTF-8), a `year` within
the 32-bit INTEGER column, a `language` within its 64 characters, metadata nested at most
`MAX_DEPTH` levels with integers of at most 64 bits and finite numbers (PostgreSQL's JSON has no
NaN; Python parses at most 4,300 digits back). Rows are read one at a time, none longer than
`max_row_bytes`, so memory is bounded per row whatever the file.

A run reads a `CatalogSnapshot`: the file copied once into an anonymous temporary file (gone
with the process, however it ends), validated and indexed from those same bytes.
"""

from __future__ import annotations

import csv
import json
import math
import re
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from models.text import normalize_id

MAX_ID_CHARS = 256
MAX_LANGUAGE_CHARS = 64  # the column is VARCHAR(64)
MAX_ROW_BYTES = 1024 * 1024  # a catalog row's default limit (ATTEND_MAX_ROW_BYTES)
MAX_DEPTH = 32  # levels of a row's JSON, the row itself being 1 (255 broke /books/{id})
YEAR_MIN, YEAR_MAX = -(2**31), 2**31 - 1  # INTEGER on PostgreSQL (SQLite's is wider)
INT_MIN, INT_MAX = -(2**63), 2**63 - 1  # metadata integers: what JSON readers keep exactly-ish
FORMATS = {".jsonl": "jsonl", ".ndjson": "jsonl", ".csv": "csv"}
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")  # NUL, and surrogates (lone once decoded)
_KNOWN = {"id", "title", "description", "authors", "year", "language"}
_COPY_CHUNK = 1024 * 1024


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


class _RowTooLongError(Exception):
    pass


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
        return _scan(self.file, self.name, self.format, self.max_row_bytes)

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
        yield from _scan(f, str(path), fmt, max_row_bytes)


def read_catalog(path: str | Path) -> Iterator[CatalogRecord]:
    """The catalog's books; raises `CatalogError` at the first bad row."""
    for row in scan_catalog(path):
        if isinstance(row, InvalidRow):
            raise CatalogError([row])
        yield row


def _scan(
    f: IO[bytes], name: str, fmt: str, max_row_bytes: int
) -> Iterator[CatalogRecord | InvalidRow]:
    rows = (
        _jsonl_rows(f, name, max_row_bytes) if fmt == "jsonl" else _csv_rows(f, name, max_row_bytes)
    )
    seen: dict[str, int] = {}
    for line, raw in rows:
        if isinstance(raw, InvalidRow):
            yield raw
            continue
        try:
            record = _parse(raw, line)
        except _RowError as e:
            yield InvalidRow(name, line, str(e))
            continue
        if record.id in seen:
            yield InvalidRow(
                name, line, f"duplicate id {record.id!r} (first on line {seen[record.id]})"
            )
            continue
        seen[record.id] = line
        yield record


def _lines(f: IO[bytes], limit: int) -> Iterator[bytes | None]:
    """The file's lines (with their b"\\n"), each read with at most `limit` + 1 bytes in memory;
    None for a line longer than `limit`, whose rest is skipped."""
    while raw := f.readline(limit + 1):
        if len(raw) > limit and not raw.endswith(b"\n"):
            while raw and not raw.endswith(b"\n"):
                raw = f.readline(_COPY_CHUNK)
            yield None
            continue
        yield raw


def _too_long(limit: int) -> str:
    return f"row longer than {limit:,} bytes (ATTEND_MAX_ROW_BYTES)"


def _jsonl_rows(
    f: IO[bytes], name: str, limit: int
) -> Iterator[tuple[int, dict[str, Any] | InvalidRow]]:
    for line, raw in enumerate(_lines(f, limit), start=1):
        if raw is None:
            yield line, InvalidRow(name, line, _too_long(limit))
            continue
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            yield line, InvalidRow(name, line, f"invalid UTF-8 at byte {e.start}")
            continue
        if line == 1:
            text = text.removeprefix("\ufeff")  # a byte-order mark some editors write
        if not text.strip():
            continue
        try:
            obj = _loads(text)
        except json.JSONDecodeError as e:
            yield line, InvalidRow(name, line, f"broken JSON: {e.msg} at column {e.colno}")
            continue
        except _RowError as e:
            yield line, InvalidRow(name, line, str(e))
            continue
        if not isinstance(obj, dict):
            yield line, InvalidRow(name, line, f"expected a JSON object, got {_kind(obj)}")
            continue
        yield line, obj


def _loads(text: str) -> Any:
    """JSON with the limits of the databases: finite numbers, 64-bit integers, `MAX_DEPTH`."""
    try:
        obj = json.loads(
            text, parse_int=_parse_int, parse_float=_parse_float, parse_constant=_no_constant
        )
    except RecursionError:  # CPython's decoder recurses once per level
        raise _RowError(f"JSON nested deeper than {MAX_DEPTH} levels") from None
    if _depth(obj) > MAX_DEPTH:
        raise _RowError(f"JSON nested deeper than {MAX_DEPTH} levels")
    return obj


class _HugeInt:
    """An integer past 64 bits, kept as its digits so the row's check can name its field."""

    def __init__(self, digits: str):
        self.digits = digits


def _parse_int(digits: str) -> int | _HugeInt:
    # checked before int(): CPython refuses over 4,300 digits with a ValueError, not a row error
    if len(digits) > 20 or not INT_MIN <= (value := int(digits)) <= INT_MAX:
        return _HugeInt(digits)
    return value


def _parse_float(digits: str) -> float:
    value = float(digits)
    if not math.isfinite(value):
        raise _RowError(f"number {_clip(digits)} out of the floating-point range")
    return value


def _no_constant(name: str) -> float:
    raise _RowError(f"{name} is not a JSON number (the databases cannot store it)")


def _depth(obj: Any) -> int:
    """Levels of nested objects and lists, without recursion (a top-level object is 1)."""
    deepest, stack = 0, [(obj, 1)]
    while stack:
        value, level = stack.pop()
        if isinstance(value, dict):
            children: Iterable[Any] = value.values()
        elif isinstance(value, list):
            children = value
        else:
            continue
        deepest = max(deepest, level)
        if level > MAX_DEPTH:
            return level
        stack.extend((child, level + 1) for child in children)
    return deepest


def _csv_rows(
    f: IO[bytes], name: str, limit: int
) -> Iterator[tuple[int, dict[str, Any] | InvalidRow]]:
    # Lines are decoded one at a time; surrogateescape keeps undecodable bytes as lone
    # surrogates, so one bad row is reported with its line instead of aborting the whole file.
    csv.field_size_limit(max(csv.field_size_limit(), limit))
    lines = _CsvLines(f, limit)
    reader = csv.reader(lines)
    try:
        yield from _csv_records(name, reader, lines)
    except _RowTooLongError:  # inside a quoted field maybe: no telling where the next row starts
        line = lines.record_start
        yield line, InvalidRow(name, line, f"{_too_long(limit)}, reading stopped here")
    except csv.Error as e:  # the reader cannot go on past a malformed record
        line = reader.line_num
        yield line, InvalidRow(name, line, f"malformed CSV, reading stopped here: {e}")


class _CsvLines:
    """The lines `csv.reader` reads, decoded, and the bytes of the record being read, which
    may span lines (a quoted newline): past `limit` it raises `_RowTooLongError`."""

    def __init__(self, f: IO[bytes], limit: int):
        self.limit = limit
        self.pending = 0  # bytes of the current record so far
        self.record_start = 1
        self._lines = _lines(f, limit)
        self._first = True

    def __iter__(self) -> Iterator[str]:
        return self

    def __next__(self) -> str:
        raw = next(self._lines)
        if raw is None or self.pending + len(raw) > self.limit + 1:  # + its line break
            raise _RowTooLongError
        self.pending += len(raw)
        text = raw.decode("utf-8", errors="surrogateescape")
        if self._first:
            self._first = False
            text = text.removeprefix("\ufeff")  # a byte-order mark some editors write
        return text

    def next_record(self, line: int) -> None:
        self.pending, self.record_start = 0, line


def _csv_records(
    name: str, reader: Any, lines: _CsvLines
) -> Iterator[tuple[int, dict[str, Any] | InvalidRow]]:
    header = next(reader, None)
    if header is None:
        return
    names = [h.strip() for h in header]
    if "id" not in names or "title" not in names:
        yield 1, InvalidRow(name, 1, "CSV header must name the columns 'id' and 'title'")
        return
    start = reader.line_num + 1
    lines.next_record(start)
    for cells in reader:
        line, start = start, reader.line_num + 1
        lines.next_record(start)
        if not any(c.strip() for c in cells):
            continue
        if any(_has_surrogate(c) for c in cells):
            yield line, InvalidRow(name, line, "invalid UTF-8")
            continue
        if len(cells) != len(names):
            yield (
                line,
                InvalidRow(name, line, f"expected {len(names)} columns, got {len(cells)}"),
            )
            continue
        row: dict[str, Any] = {}
        for column, raw in zip(names, cells, strict=True):
            cell = raw.strip()
            if not cell:
                continue
            if column == "authors":
                row[column] = [a.strip() for a in cell.split(";") if a.strip()]
            elif column == "year":
                # int() of more than 4,300 digits raises; the range check in _parse names it
                short = re.fullmatch(r"-?\d{1,20}", cell)
                row[column] = int(cell) if short else cell
            else:
                row[column] = cell
        yield line, row


def is_valid_id(book_id: str) -> bool:
    """Whether a catalog row may have this id: 1 to MAX_ID_CHARS printable characters."""
    return 0 < len(book_id) <= MAX_ID_CHARS and not _CONTROL.search(book_id)


def _parse(raw: dict[str, Any], line: int) -> CatalogRecord:
    if (where := _unstorable(raw)) is not None:
        raise _RowError(where)
    book_id = raw.get("id")
    if book_id is None:
        raise _RowError("missing 'id'")
    if not isinstance(book_id, str):
        raise _RowError(f"'id' must be a string, got {_kind(book_id)}")
    book_id = normalize_id(book_id).strip()  # as looked up: NFC, no invisible characters
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
    year = _year(raw)
    language = _text(raw, "language")
    if language is not None and len(language) > MAX_LANGUAGE_CHARS:
        raise _RowError(f"'language' must be at most {MAX_LANGUAGE_CHARS} characters")
    return CatalogRecord(
        id=book_id,
        title=title,
        description=_text(raw, "description"),
        authors=[a.strip() for a in authors if a.strip()],
        year=year,
        language=language,
        extra={k: v for k, v in raw.items() if k not in _KNOWN},
        line=line,
    )


def _year(raw: dict[str, Any]) -> int | None:
    year = raw.get("year")
    if isinstance(year, str) and re.fullmatch(r"-?\d{21,}", year):  # a CSV cell's many digits
        raise _RowError(f"'year' {_clip(year)} out of range {YEAR_MIN} to {YEAR_MAX}")
    if year is not None and (isinstance(year, bool) or not isinstance(year, int)):
        raise _RowError(f"'year' must be an integer, got {_kind(year)} {_clip(repr(year))}")
    if year is not None and not YEAR_MIN <= year <= YEAR_MAX:
        raise _RowError(f"'year' {year} out of range {YEAR_MIN} to {YEAR_MAX}")
    return year


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


def _unstorable(raw: dict[str, Any]) -> str | None:
    """Why some text of the row (a key or a value, at any depth) cannot be stored, or None."""
    stack: list[tuple[str, Any]] = [(k, v) for k, v in raw.items()]
    while stack:
        name, value = stack.pop()
        texts = [name]
        if isinstance(value, str):
            texts.append(value)
        elif isinstance(value, dict):
            stack.extend((name, v) for v in value.values())
            texts.extend(value)
        elif isinstance(value, list):
            stack.extend((name, v) for v in value)
        elif isinstance(value, _HugeInt):
            if name == "year":
                return f"'year' {_clip(value.digits)} out of range {YEAR_MIN} to {YEAR_MAX}"
            return f"{name!r} holds the integer {_clip(value.digits)}, past the 64-bit range"
        for text in texts:
            if found := _UNSTORABLE.search(text):
                ch = found.group()
                what = "a NUL character" if ch == "\x00" else "a lone surrogate"
                return f"{name!r} holds {what} ({ch!r}), which the databases cannot store"
    return None


def _clip(text: str, n: int = 40) -> str:
    return text if len(text) <= n else f"{text[:n]}… ({len(text):,} characters)"
