"""One row (a JSONL object, a CSV record keyed by its header) checked and made a `CatalogRecord`,
with every problem it has named at once.

A row is valid only if both databases can store it and serve it back: no NUL character
(PostgreSQL refuses it in text), no lone surrogate (not encodable as UTF-8), a `year` within the
32-bit INTEGER column, a `language` within its 64 characters, integers of at most 64 bits and
finite numbers in metadata (PostgreSQL's JSON has no NaN; Python parses at most 4,300 digits
back). The depth of its JSON is the reader's to check (indexer/catalog/jsonl_records.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from indexer.catalog import columns
from indexer.catalog.columns import NAMES, ColumnNames
from indexer.catalog.html_text import html_to_text, looks_like_html
from indexer.catalog.records import CatalogRecord
from models.text import normalize_id

MAX_ID_CHARS = 256
MAX_LANGUAGE_CHARS = 64  # the column is VARCHAR(64)
YEAR_MIN, YEAR_MAX = -(2**31), 2**31 - 1  # INTEGER on PostgreSQL (SQLite's is wider)
INT_MIN, INT_MAX = -(2**63), 2**63 - 1  # metadata integers: what JSON readers keep exactly-ish
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")  # NUL, and surrogates (lone once decoded)


class RowError(ValueError):
    """Why a row is not a book: its problems, `; `-separated."""


class HugeInt:
    """An integer past 64 bits, kept as its digits so the row's check can name its field."""

    def __init__(self, digits: str):
        self.digits = digits


@dataclass(frozen=True)
class ParsedRow:
    record: CatalogRecord
    id_from: str  # "id", the ISBN column it came from, or "" when derived from title and authors
    read_as: dict[str, str] = field(default_factory=dict)  # a column under another name → field
    fields: frozenset[str] = frozenset()  # the fields read from a column of the row
    excel_isbn: str = ""  # the ISBN column whose value Excel turned into 9.78044E+12


def is_valid_id(book_id: str) -> bool:
    """Whether a catalog row may have this id: 1 to MAX_ID_CHARS printable characters."""
    return 0 < len(book_id) <= MAX_ID_CHARS and not _CONTROL.search(book_id)


def parse_row(raw: dict[str, Any], line: int, names: ColumnNames = NAMES) -> ParsedRow:
    """The row as a book; `RowError` naming all of its problems otherwise."""
    problems = unstorable(raw)
    picked, extra = _pick(raw, names)
    before = len(problems)
    title = _text(picked, "title", problems)
    if title is None and len(problems) == before:
        problems.append("missing 'title'")
    authors = _authors(picked, problems)
    year = _year(picked, problems)
    language = _text(picked, "language", problems)
    if language is not None and len(language) > MAX_LANGUAGE_CHARS:
        problems.append(f"'language' must be at most {MAX_LANGUAGE_CHARS} characters")
    description = _text(picked, "description", problems)
    if description is not None and looks_like_html(description):
        description = html_to_text(description) or None  # Calibre's comments
    excel_isbn = "" if "id" in picked else _excel_isbn(picked)  # only an id-to-be is lost
    book_id, id_from = _id(picked, title, authors, extra, problems)
    if problems:
        raise RowError("; ".join(problems))
    assert title is not None and book_id is not None
    record = CatalogRecord(
        id=book_id,
        title=title,
        description=description,
        authors=authors,
        year=year,
        language=language,
        extra=extra,
        line=line,
    )
    read_as = {key: f for f, (key, _) in picked.items() if f not in (key, columns.ISBN)}
    for name in columns.NAMED_METADATA:  # mapped by the user: kept under the service's name
        if name in picked:
            extra[name] = picked[name][1]
    return ParsedRow(record, id_from, read_as, frozenset(picked), excel_isbn)


def _excel_isbn(picked: dict[str, tuple[str, Any]]) -> str:
    """The ISBN column's name where Excel wrote its number as 9.78044E+12 (digits lost: no
    id), which is then read as no ISBN; "" otherwise."""
    key, value = picked.get(columns.ISBN, ("", None))
    if isinstance(value, str) and columns.excel_number(value):
        del picked[columns.ISBN]  # kept in metadata as it is
        return key
    return ""


def _pick(
    raw: dict[str, Any], names: ColumnNames
) -> tuple[dict[str, tuple[str, Any]], dict[str, Any]]:
    """field → (the key read for it, its value), and the rest: metadata. A field several keys
    stand for ('author' and 'authors') is read from the first name of its list that has a value;
    the others stay in metadata. A date column stands for the year only when it holds one (its
    year is the value); else it stays in metadata as it is."""
    candidates: dict[str, list[str]] = {}
    values = dict(raw)
    for key, value in raw.items():
        f = names.field_of(key)
        if f == "year" and isinstance(value, str) and columns.is_date(key):
            if (year := columns.date_year(key, value)) is None:
                continue
            values[key] = year
        if f is not None:
            candidates.setdefault(f, []).append(key)
    picked: dict[str, tuple[str, Any]] = {}
    for f, keys in candidates.items():
        if len(keys) > 1:
            keys.sort(key=names.name_rank)
        given = [k for k in keys if values[k] is not None] or keys[:1]
        picked[f] = (given[0], values[given[0]])
    used = {key for f, (key, _) in picked.items() if f != columns.ISBN}  # _id takes an ISBN
    return picked, {k: v for k, v in raw.items() if k not in used}


def _id(
    picked: dict[str, tuple[str, Any]],
    title: str | None,
    authors: list[str],
    extra: dict[str, Any],
    problems: list[str],
) -> tuple[str | None, str]:
    if "id" in picked:
        key, value = picked["id"]
        return _given_id(key, value, problems), "id"
    if columns.ISBN in picked:
        key, value = picked[columns.ISBN]
        if isinstance(value, int) and not isinstance(value, bool):
            value = str(value)
        if isinstance(value, str) and columns.isbn_id(value):
            book_id = columns.isbn_id(value)
            if not is_valid_id(book_id):
                problems.append(
                    f"{key!r} cannot be the id: at most {MAX_ID_CHARS} printable characters"
                )
            del extra[key]
            return book_id, key
        if value is not None and not isinstance(value, str):
            problems.append(f"{key!r} must be a string, got {kind(value)}")
        # an empty ISBN stays in metadata as it was, and the id is derived
    if title is None:
        return None, ""
    return columns.derived_id(title, [*authors, *_unread_authors(extra)]), ""


def _unread_authors(extra: dict[str, Any]) -> list[str]:
    """The names in the columns that look like authors but were not read as them ('Writer'):
    part of a derived id, so that mapping one (`--column Writer=authors`, as the notice
    suggests) moves the names into the authors and leaves every id as it was."""
    found: list[str] = []
    for key, value in extra.items():
        if isinstance(value, str) and columns.NAMES.lookalike(key) == "authors":
            found += columns.split_authors(value)
        elif isinstance(value, list) and columns.NAMES.lookalike(key) == "authors":
            found += [v.strip() for v in value if isinstance(v, str) and v.strip()]
    return found


def _given_id(key: str, value: Any, problems: list[str]) -> str | None:
    if value is None:
        problems.append("missing 'id'")
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)  # JSON exports of a database's integer keys
    if not isinstance(value, str):
        problems.append(f"{key!r} must be a string, got {kind(value)}")
        return None
    book_id: str = normalize_id(value).strip()  # as looked up: NFC, no invisible characters
    if not book_id:
        problems.append(f"{key!r} is empty")
    elif not is_valid_id(book_id):
        problems.append(f"{key!r} must be at most {MAX_ID_CHARS} printable characters")
    else:
        return book_id
    return None


def _authors(picked: dict[str, tuple[str, Any]], problems: list[str]) -> list[str]:
    """The authors, then the further authors of a column of them (Goodreads' `Additional
    Authors`), each name once."""
    names: dict[str, None] = {}  # ordered set
    for f in ("authors", columns.MORE_AUTHORS):
        key, authors = picked.get(f, (f, None))
        if authors is None:
            continue
        if isinstance(authors, str):
            names.update(dict.fromkeys(columns.split_authors(authors)))
        elif isinstance(authors, list) and all(isinstance(a, str) for a in authors):
            names.update(dict.fromkeys(a.strip() for a in authors if a.strip()))
        else:
            problems.append(f"{key!r} must be a string or a list of strings, got {kind(authors)}")
    return list(names)


def _year(picked: dict[str, tuple[str, Any]], problems: list[str]) -> int | None:
    key, year = picked.get("year", ("year", None))
    if isinstance(year, float) and year.is_integer() and abs(year) < 2**31:
        year = int(year)  # 2008.0: a spreadsheet's number
    if isinstance(year, str) and re.fullmatch(r"-?\d{21,}", year):  # a CSV cell's many digits
        problems.append(f"{key!r} {clip(year)} out of range {YEAR_MIN} to {YEAR_MAX}")
    elif isinstance(year, HugeInt):
        pass  # named by unstorable()
    elif year is not None and (isinstance(year, bool) or not isinstance(year, int)):
        problems.append(f"{key!r} must be an integer, got {kind(year)} {clip(repr(year))}")
    elif year is not None and not YEAR_MIN <= year <= YEAR_MAX:
        problems.append(f"{key!r} {year} out of range {YEAR_MIN} to {YEAR_MAX}")
    else:
        return year or None  # 0: "unknown" in exports (no calendar has a year 0)
    return None


def _text(picked: dict[str, tuple[str, Any]], name: str, problems: list[str]) -> str | None:
    key, value = picked.get(name, (name, None))
    if value is None:
        return None
    if not isinstance(value, str):
        problems.append(f"{key!r} must be a string, got {kind(value)}")
        return None
    return value.strip() or None


def kind(value: object) -> str:
    return {
        dict: "an object",
        list: "a list",
        str: "a string",
        bool: "a boolean",
        int: "an integer",
        float: "a number",
        type(None): "null",
        HugeInt: "an integer",
    }.get(type(value), type(value).__name__)


def unstorable(raw: dict[str, Any]) -> list[str]:
    """Why some text of the row (a key or a value, at any depth) cannot be stored: one reason
    per field, in the row's order."""
    found = []
    for name, value in raw.items():
        # the common case, a flat value with nothing to report, without _unstorable_in's stack
        flat = isinstance(value, str | int | float | None)
        if (
            flat
            and not _UNSTORABLE.search(name)
            and not (isinstance(value, str) and _UNSTORABLE.search(value))
        ):
            continue
        if (why := _unstorable_in(name, value)) is not None:
            found.append(why)
    return found


def _unstorable_in(name: str, root: Any) -> str | None:
    """Why field `name` (its name, a text in its value, a key of an object in it) cannot be
    stored, or None; without recursion."""
    stack, texts = [root], [name]
    while True:
        for text in texts:
            if hit := _UNSTORABLE.search(text):
                ch = hit.group()
                what = "a NUL character" if ch == "\x00" else "a lone surrogate"
                return f"{name!r} holds {what} ({ch!r}), which the databases cannot store"
        if not stack:
            return None
        value, texts = stack.pop(), []
        if isinstance(value, str):
            texts = [value]
        elif isinstance(value, dict):
            texts = list(value)
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
        elif isinstance(value, HugeInt):
            if columns.field_of(name) == "year":
                return f"{name!r} {clip(value.digits)} out of range {YEAR_MIN} to {YEAR_MAX}"
            return f"{name!r} holds the integer {clip(value.digits)}, past the 64-bit range"


def clip(text: str, n: int = 40) -> str:
    return text if len(text) <= n else f"{text[:n]}… ({len(text):,} characters)"
