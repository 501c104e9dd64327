"""Reading CSV record by record, so that no record, however malformed, ends the file.

Each record is parsed by its own `csv.reader` (strict), over lines decoded one at a time
(surrogateescape keeps undecodable bytes as lone surrogates, so one bad row is reported with its
line instead of aborting the file), at most `limit` bytes of them. What cannot be parsed is
reported with its line, and reading goes on:

- a record that fails on its one line: at the next line. One with balanced quotes is read as
  the csv module reads it leniently (`"a" b` is `a b`, as before this reader was strict);
- a quoted field that runs on without its closing quote (the record breaks lines later, or at
  the end of the file): at the line after the one it opened on. The lines it swallowed are
  read again as records, so a stray `"` costs one row, not the rest of the file. (PostgreSQL's
  COPY aborts with "unterminated CSV quoted field"; the csv module alone read to the end.)
- a record past `limit` bytes: skipped to its end (a newline outside quotes) in 1 MB chunks,
  or, if its quote never closes, at the line after its first, as above.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
from typing import IO

from indexer.catalog.jsonl_records import CHUNK, too_long


class _TooLongError(Exception):
    pass


class _Source:
    """The file read line by line, with the offset reached: where a record starts again."""

    def __init__(self, f: IO[bytes]):
        self.f = f
        self.pos = f.tell()

    def readline(self, n: int) -> bytes:
        raw = self.f.readline(n)
        self.pos += len(raw)
        return raw

    def seek(self, pos: int) -> None:
        self.f.seek(pos)
        self.pos = pos


class _Record:
    """The lines `csv.reader` pulls for one record: decoded, counted, at most `limit` bytes."""

    def __init__(self, source: _Source, limit: int, *, bom: bool):
        self.source = source
        self.room = limit + 1  # + the record's line break
        self.lines = 0  # lines pulled (the last one maybe cut at the limit)
        self.newlines = 0
        self.quotes = 0  # '"' read: odd while a quoted field is open
        self.texts: list[str] = []
        self.ended = False  # the file ended within the record
        self._bom = bom

    def __iter__(self) -> Iterator[str]:
        return self

    def __next__(self) -> str:
        raw = self.source.readline(self.room + 1)
        if not raw:
            self.ended = True
            raise StopIteration
        self.lines += 1
        self.quotes += raw.count(b'"')
        self.newlines += raw.endswith(b"\n")
        if len(raw) > self.room:
            raise _TooLongError
        self.room -= len(raw)
        text = raw.decode("utf-8", errors="surrogateescape")
        if self._bom:
            self._bom = False
            text = text.removeprefix("\ufeff")  # a byte-order mark some editors write
        self.texts.append(text)
        return text

    @property
    def open_quote(self) -> bool:
        return self.quotes % 2 == 1


def delimiter_of(f: IO[bytes], limit: int) -> str:
    """`,`, or `;` or a tab when the first line has no comma but those: Excel writes `;` where
    the comma is the decimal sign. The file is left where it was."""
    start = f.tell()
    first = f.readline(limit + 1)
    f.seek(start)
    if b"," in first:
        return ","
    semicolons, tabs = first.count(b";"), first.count(b"\t")
    if semicolons or tabs:
        return ";" if semicolons >= tabs else "\t"
    return ","


def csv_rows(
    f: IO[bytes], limit: int, delimiter: str = ","
) -> Iterator[tuple[int, list[str] | str]]:
    """(line, cells) for each record, the header first, or (line, why it cannot be read): the
    line is the record's first."""
    csv.field_size_limit(max(csv.field_size_limit(), limit))
    source = _Source(f)
    line = 1
    while True:
        start = source.pos
        record = _Record(source, limit, bom=start == 0)
        try:
            cells = next(csv.reader(record, strict=True, delimiter=delimiter), None)
        except _TooLongError:
            more = _skip_rest(source, inside=record.open_quote, at_line_end=record.newlines > 0)
            if more is None:
                yield line, _unterminated(line, "no closing quote before the end of the file")
                line = _resume(source, start, line)
                continue
            last = line + record.newlines + more - 1
            span = f": lines {line}–{last} skipped" if last > line else ""
            yield line, too_long(limit) + span
            line = last + 1
            continue
        except csv.Error as e:
            if record.lines > 1 or (record.ended and record.open_quote):
                why = (
                    "no closing quote before the end of the file"
                    if record.ended
                    else f"the record breaks on line {line + record.lines - 1} ({e})"
                )
                yield line, _unterminated(line, why)
                line = _resume(source, start, line)
                continue
            try:
                cells = _escaped(record.texts, delimiter) or next(
                    csv.reader(record.texts, delimiter=delimiter), None
                )
            except csv.Error as lenient:
                yield line, f"malformed CSV: {lenient}"
                line += record.newlines
                continue
        if cells is None:
            return
        yield line, cells
        line += record.newlines


def _escaped(texts: list[str], delimiter: str) -> list[str] | None:
    """The cells of a record that quotes `"` inside a quoted field as `\\"` (Book-Crossing's
    BX-Books.csv), which a CSV reader reads as the field's end: None where it has none, or
    does not read so either."""
    if not any('\\"' in t for t in texts):
        return None
    reader = csv.reader(texts, delimiter=delimiter, escapechar="\\", doublequote=False, strict=True)
    try:
        return next(reader, None)
    except csv.Error:
        return None


def _unterminated(line: int, why: str) -> str:
    return f"unterminated quoted field starting on line {line}: {why}; read on from line {line + 1}"


def _resume(source: _Source, start: int, line: int) -> int:
    """Back to the line after `line` (which starts at offset `start`); that line's number."""
    source.seek(start)
    while (raw := source.readline(CHUNK)) and not raw.endswith(b"\n"):
        pass
    return line + 1


def _skip_rest(source: _Source, *, inside: bool, at_line_end: bool) -> int | None:
    """Read on to the end of an over-long record, a newline outside quotes, counting quotes as
    the record's fields open and close them: the newlines read, or None if the file ends
    inside quotes."""
    if at_line_end and not inside:
        return 0
    newlines = 0
    while chunk := source.readline(CHUNK):
        inside ^= chunk.count(b'"') % 2 == 1
        if chunk.endswith(b"\n"):
            newlines += 1
            if not inside:
                return newlines
    return None if inside else newlines
