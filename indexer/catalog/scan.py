"""One read of a catalog file: its rows in file order, each a book or the reason it is not one,
ids unique, and notes of how it was read (columns read under another name, ids derived,
columns kept as metadata) for the user to check."""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any, NoReturn

from indexer.catalog import columns
from indexer.catalog.columns import NAMES, ColumnNames
from indexer.catalog.csv_records import csv_rows, delimiter_of
from indexer.catalog.json_array import json_array_rows
from indexer.catalog.jsonl_records import jsonl_rows
from indexer.catalog.marc_records import MarcStats, marc21_rows, marcxml_rows
from indexer.catalog.openlibrary_records import OpenLibraryStats, openlibrary_rows
from indexer.catalog.records import CatalogHeaderError, CatalogRecord, InvalidRow
from indexer.catalog.rows import ParsedRow, RowError, parse_row
from indexer.catalog.xlsx_records import xlsx_rows

_SHORT_INT = re.compile(r"-?\d{1,20}")  # int() of 4,300 digits raises: parse_row names those
_ESCAPED = re.compile("[\udc80-\udcff]")
_SHOWN = 10  # metadata columns named in the notice
_KEPT_NAMES = 10_000
_TITLE_ROWS = 10  # rows above a table's header a spreadsheet may have (a title, a date)
# formats whose fields are the reader's own (docs/catalogs.md): no column is a guess to name
_OWN_FIELDS = ("marc", "marcxml", "openlibrary")


@dataclass(frozen=True)
class CatalogCheck:
    """What a full read found: the books, the rows rejected, and one line per thing the user
    should know about how the file was read."""

    books: int
    rejected: list[InvalidRow]
    notices: list[str]
    # the books' ids, so the snapshot guard need not read the file again (indexer/snapshot_guard.py)
    ids: frozenset[str] = frozenset()


class CatalogScan:
    """Iterate for the rows; after the last, `notices()`. A CSV header that cannot be a
    catalog's raises `CatalogHeaderError` at the first row."""

    def __init__(
        self, f: IO[bytes], name: str, fmt: str, max_row_bytes: int, names: ColumnNames = NAMES
    ):
        self.name = name
        self._names = names
        self._rows: Iterator[tuple[int, dict[str, Any] | str]]
        self._fmt = fmt
        self._marc = MarcStats()  # a MARC file's counts; its "line" is a record's position
        self._openlibrary = OpenLibraryStats()
        if fmt == "marc":
            self._rows = marc21_rows(f, max_row_bytes, self._marc)
        elif fmt == "marcxml":
            self._rows = marcxml_rows(f, max_row_bytes, self._marc)
        elif fmt == "jsonl":
            self._rows = jsonl_rows(f, max_row_bytes)
        elif fmt == "json":
            self._rows = json_array_rows(f, max_row_bytes)
        elif fmt == "openlibrary":
            self._rows = openlibrary_rows(f, max_row_bytes, self._openlibrary)
        elif fmt == "xlsx":
            self._rows = self._table(xlsx_rows(f, max_row_bytes, name), sheet=True)
        else:
            self._rows = self._csv(f, max_row_bytes, tabs=fmt == "tsv")
        self._metadata: dict[str, None] = {}  # ordered set: the first row's order
        self._names_dropped = False  # a row's new names came past _KEPT_NAMES: not counted
        self._read_as: dict[str, str] = {}
        self._fields: set[str] = set()  # the fields some row read from a column
        self._unnamed: list[int] = []
        self._first_derived: CatalogRecord | None = None
        self._excel: tuple[str, CatalogRecord] | None = None  # an ISBN Excel turned to 9.7E+12
        self._excel_count = 0
        self._derived_count = 0
        self._delimiter = ","
        self._tabs = False  # tab-separated by the file's name (.tsv)
        self._above: list[int] = []  # the lines above the header row, skipped
        self._export: str | None = None  # the export the header is, where it is a known one

    def __iter__(self) -> Iterator[CatalogRecord | InvalidRow]:
        seen: dict[str, int] = {}
        for line, raw in self._rows:
            if isinstance(raw, str):
                yield InvalidRow(self.name, line, raw)
                continue
            try:
                parsed = parse_row(raw, line, self._names)
            except RowError as e:
                yield InvalidRow(self.name, line, self._where(raw) + str(e))
                continue
            record = parsed.record
            if record.id in seen:
                unit = "at record" if self._fmt in ("marc", "marcxml") else "on line"
                reason = f"duplicate id {record.id!r} (first {unit} {seen[record.id]})"
                if not parsed.id_from:
                    reason += (
                        ", an id derived from the same title and authors: give the books an "
                        "'id' or 'isbn' column to tell them apart"
                    )
                yield InvalidRow(self.name, line, reason)
                continue
            seen[record.id] = line
            self._note(parsed)
            yield record

    def _where(self, raw: dict[str, Any]) -> str:
        """A MARC record's control number, before why it is no book: the file's position alone
        does not find it in the library system."""
        control = raw.get("id") if self._fmt in ("marc", "marcxml") else None
        return f"001 {control!r}: " if isinstance(control, str) else ""

    def check(self) -> CatalogCheck:
        """Read to the end."""
        good, bad, ids = 0, [], set()
        for row in self:
            if isinstance(row, InvalidRow):
                bad.append(row)
            else:
                good += 1
                ids.add(row.id)
        return CatalogCheck(good, bad, self.notices(), frozenset(ids))

    def _note(self, parsed: ParsedRow) -> None:
        if len(self._metadata) < _KEPT_NAMES:  # a JSONL of a new key a row stays bounded
            self._metadata.update(dict.fromkeys(parsed.record.extra))
        elif not self._names_dropped:
            self._names_dropped = any(k not in self._metadata for k in parsed.record.extra)
        self._read_as.update(parsed.read_as)
        self._fields.update(parsed.fields)
        if parsed.id_from and parsed.id_from != "id":
            self._read_as[parsed.id_from] = "the id"
        if parsed.excel_isbn:
            self._excel_count += 1
            self._excel = self._excel or (parsed.excel_isbn, parsed.record)
        if not parsed.id_from:
            self._derived_count += 1
            self._first_derived = self._first_derived or parsed.record

    def notices(self) -> list[str]:
        """One line for each: columns read as a field of another name, ids derived, columns
        kept as metadata, those that look like fields but were not read, columns without a
        name."""
        out = self._marc.notices(self.name, self._fmt) if self._fmt in ("marc", "marcxml") else []
        out += self._openlibrary.notices(self.name)
        if self._export is not None:
            out.append(f"{self.name}: read as {self._export} (its header's columns say so)")
        if self._delimiter != ",":
            shown = "tab" if self._delimiter == "\t" else repr(self._delimiter)
            why = "its name" if self._tabs else "the header has no comma"
            out.append(f"{self.name}: read as {shown}-separated ({why})")
        if self._read_as:
            read = ", ".join(f"{k!r} as {f}" for k, f in self._read_as.items())
            out.append(f"{self.name}: read {read}")
        if self._excel is not None:
            key, book = self._excel
            out.append(
                f"{self.name}: {self._excel_count} book(s) have an ISBN as Excel writes a long "
                f"number (line {book.line}: {key!r} is {book.extra[key]!r}): its digits are "
                "lost, so it is no id; format the column as text in Excel before saving, or "
                "export the catalog again from where it came"
            )
        if (first := self._first_derived) is not None:
            out.append(
                f"{self.name}: {self._derived_count} book(s) without an id or ISBN got an id "
                f"derived from title and authors (line {first.line}: {first.id!r}); it stays "
                "the same while they do"
            )
        if self._fmt in _OWN_FIELDS:
            return out + self._above_notice()
        if self._metadata:
            names = [repr(k) for k in self._metadata]
            more = ""
            if len(names) > _SHOWN:
                # exact unless names were dropped: a CSV's header names them all at once
                many = "at least " if self._names_dropped else ""
                more = f" and {many}{len(names) - _SHOWN:,} more"
            out.append(
                f"{self.name}: kept as metadata, not as book fields: "
                f"{', '.join(names[:_SHOWN])}{more} (the fields: {', '.join(columns.FIELDS)})"
            )
        # a year or a description read from one column: another like it is no surprise (a
        # LibraryThing `Publication` beside its `Date`); further authors always are one
        fields_read = self._fields - {"authors"}
        guesses = {k: self._names.lookalike(k) for k in self._metadata}
        if lookalikes := {k: g for k, g in guesses.items() if g and g not in fields_read}:
            found = ", ".join(f"{k!r} ({g}?)" for k, g in lookalikes.items())
            k, g = next(iter(lookalikes.items()))
            out.append(
                f"{self.name}: not read, though they look like book fields: {found}; to read "
                f"one, map it: attend index --column {shlex.quote(f'{k}={g}')} (or "
                f'ATTEND_CATALOG_COLUMNS=\'{{"{k}": "{g}"}}\'); the books keep their ids'
            )
        out += self._above_notice()
        if self._unnamed:
            which = ", ".join(map(str, self._unnamed))
            out.append(f"{self.name}: column(s) {which} of the header have no name: not read")
        return out

    def _above_notice(self) -> list[str]:
        if not self._above:
            return []
        first, last = self._above[0], self._above[-1]
        lines = str(first) if first == last else f"{first}-{last}"
        return [
            f"{self.name}: the header is the first row with a title column: line(s) {lines} "
            "above it (a spreadsheet's title rows) were not read"
        ]

    def _csv(
        self, f: IO[bytes], limit: int, *, tabs: bool
    ) -> Iterator[tuple[int, dict[str, Any] | str]]:
        self._tabs = tabs
        self._delimiter = "\t" if tabs else delimiter_of(f, limit)
        yield from self._table(csv_rows(f, limit, self._delimiter))  # lazily, as the read goes

    def _table(
        self, rows: Iterator[tuple[int, list[str] | str]], *, sheet: bool = False
    ) -> Iterator[tuple[int, dict[str, Any] | str]]:
        """The rows of a table (a CSV, a `sheet`) keyed by its header: the first non-blank row,
        or where that has no title column, the first of the next rows that has one (a
        spreadsheet's title rows above it are skipped). A sheet's rows are as wide as the
        sheet: its empty columns right of the header's last name are no columns."""
        if (header := self._header(rows)) is None:
            return  # an empty file: no rows
        line, head = header
        names = [c.strip() for c in head]
        while sheet and names and not names[-1]:
            names.pop()
        if any(_has_surrogate(n) for n in names):
            self._header_error(line, "CSV header is not valid UTF-8: save the file as UTF-8")
        if (problem := columns.header_problem(names, self._names)) is not None:
            self._header_error(line, problem)
        self._unnamed = [i for i, n in enumerate(names, start=1) if not n]
        self._export = columns.export_of(names)
        kinds = [self._names.field_of(n) for n in names]
        for line, cells in rows:
            if isinstance(cells, str):
                yield line, cells
            elif any(c.strip() for c in cells):  # a blank line is no row
                yield line, _csv_row(names, kinds, _fit(cells, len(names)) if sheet else cells)

    def _header(self, rows: Iterator[tuple[int, list[str] | str]]) -> tuple[int, list[str]] | None:
        """The header row (None for a file of blank rows): the first non-blank row with a title
        column, _TITLE_ROWS rows down at most; else the first, whose problem is named."""
        above: list[tuple[int, list[str]]] = []
        for line, cells in rows:
            if isinstance(cells, str):
                self._header_error(line, f"CSV header cannot be read: {cells}")
            if not any(c.strip() for c in cells):
                continue
            if any(self._names.field_of(c.strip()) == "title" for c in cells):
                self._above = [n for n, _ in above]
                return line, cells
            above.append((line, cells))
            if len(above) > _TITLE_ROWS:
                break
        return above[0] if above else None

    def _header_error(self, line: int, reason: str) -> NoReturn:
        raise CatalogHeaderError(InvalidRow(self.name, line, reason))


def _fit(cells: list[str], width: int) -> list[str]:
    """A sheet's row as wide as its header, where the cells past it are empty."""
    if any(c.strip() for c in cells[width:]):
        return cells  # the row's check names its columns
    return cells[:width] + [""] * (width - len(cells))


def _csv_row(names: list[str], kinds: list[str | None], cells: list[str]) -> dict[str, Any] | str:
    """A record's cells keyed by the header, or why they cannot be: an empty cell is no value
    (but an empty id is a missing one), a year of digits an integer."""
    if any(_has_surrogate(c) for c in cells):
        return "invalid UTF-8 (save the file as UTF-8: Excel's 'CSV UTF-8')"
    if len(cells) != len(names):
        return f"expected {len(names)} columns, got {len(cells)}"
    row: dict[str, Any] = {}
    for name, kind, raw in zip(names, kinds, cells, strict=True):
        cell = columns.unwrap_formula(raw.strip()).strip()
        if not name:
            continue
        if not cell:
            if kind == "id":  # a row of a catalog with ids must have one
                row[name] = None
        elif kind == "year" and _SHORT_INT.fullmatch(cell):
            row[name] = int(cell)
        elif kind == "year":
            row[name] = columns.cell_year(cell)
        else:
            row[name] = cell
    return row


def _has_surrogate(text: str) -> bool:
    """Whether decoding left an undecodable byte in `text` (surrogateescape's U+DC80-U+DCFF)."""
    return _ESCAPED.search(text) is not None
