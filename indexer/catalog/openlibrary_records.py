"""Reading an Open Library dump (openlibrary.org/developers/dumps): editions or works, one record a
line as `type \\t key \\t revision \\t last_modified \\t JSON`, the record's JSON read as a
catalog row.

- `id`: the key's last part (`/books/OL10000135M` → `OL10000135M`);
- `title`: `title`, with `subtitle` after a colon;
- `authors`: none, for a dump names its authors by key only (`[{"key": "/authors/OL26320A"}]`,
  a work's `[{"author": {"key": …}}]`): the keys are kept as `author_keys`, to join with the
  authors dump;
- `description`: a text, or its `{"type": "/type/text", "value": …}` object's value;
- `year`: the year of `publish_date` (an edition's: "March 2008", "2003-05-01") or
  `first_publish_date` (a work's);
- `language`: the first of `languages` (`/languages/eng` → `eng`);
- metadata: `isbn` (the first ISBN-13, else ISBN-10), `publisher`, `subjects`, the edition's
  `works` keys, its `series` as `other_series` (a statement, not numbered).

A line of another type (an author, a redirect, a deletion) is no book: skipped, and counted in a
notice.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any

from indexer.catalog.columns import cell_year
from indexer.catalog.jsonl_records import lines, too_long

BOOK_TYPES = ("/type/edition", "/type/work")


@dataclass
class OpenLibraryStats:
    other_types: int = 0  # lines of authors, redirects, deletions: no books

    def notices(self, name: str) -> list[str]:
        if not self.other_types:
            return []
        return [
            f"{name}: {self.other_types:,} line(s) of other types than editions and works "
            "(authors, redirects, deletions) are no books: skipped"
        ]


def openlibrary_rows(
    f: IO[bytes], limit: int, stats: OpenLibraryStats
) -> Iterator[tuple[int, dict[str, Any] | str]]:
    """(line, the record as a row) for each edition or work, or (line, why it is not one)."""
    for line, raw in enumerate(lines(f, limit), start=1):
        if raw is None:
            yield line, too_long(limit)
            continue
        parts = raw.rstrip(b"\r\n").split(b"\t", 4)
        if len(parts) != 5:
            yield (
                line,
                (
                    f"expected 5 tab-separated columns (type, key, revision, date, JSON), got "
                    f"{len(parts)}"
                ),
            )
            continue
        kind = parts[0].decode("utf-8", "replace")
        if kind not in BOOK_TYPES:
            stats.other_types += 1
            continue
        try:
            record = json.loads(parts[4])
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            yield line, f"broken JSON in the record's column: {e}"
            continue
        if not isinstance(record, dict):
            yield line, "the record's column is no JSON object"
            continue
        yield line, _row(record, parts[1].decode("utf-8", "replace"))


def _row(record: dict[str, Any], key: str) -> dict[str, Any]:
    title = _text(record.get("title"))
    if title and (subtitle := _text(record.get("subtitle"))):
        title = f"{title}: {subtitle}"
    year = cell_year(_text(record.get("publish_date") or record.get("first_publish_date")) or "")
    isbns = [*_strings(record.get("isbn_13")), *_strings(record.get("isbn_10"))]
    row: dict[str, Any] = {
        "id": key.rsplit("/", 1)[-1],
        "title": title,
        "description": _text(record.get("description")),
        "year": year if isinstance(year, int) else None,
        "language": next((k.rsplit("/", 1)[-1] for k in _keys(record.get("languages"))), None),
        "isbn": isbns[0] if isbns else None,
        "author_keys": [k.rsplit("/", 1)[-1] for k in _keys(record.get("authors"))],
        "publisher": "; ".join(_strings(record.get("publishers"))) or None,
        "subjects": _strings(record.get("subjects")),
        "works": [k.rsplit("/", 1)[-1] for k in _keys(record.get("works"))],
        "other_series": _strings(record.get("series")),
    }
    return {k: v for k, v in row.items() if v not in (None, "", [])}


def _text(value: Any) -> str | None:
    """A text, or an Open Library text object's value."""
    if isinstance(value, dict):
        value = value.get("value")
    return value.strip() or None if isinstance(value, str) else None


def _strings(value: Any) -> list[str]:
    if not isinstance(value, list):
        return []
    return [v.strip() for v in value if isinstance(v, str) and v.strip()]


def _keys(value: Any) -> Iterator[str]:
    """The keys of a list of references: `{"key": …}`, or a work's `{"author": {"key": …}}`."""
    for item in value if isinstance(value, list) else []:
        ref = item.get("author") if isinstance(item, dict) and "author" in item else item
        if isinstance(ref, dict) and isinstance(ref.get("key"), str):
            yield ref["key"]
