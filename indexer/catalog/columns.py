"""Which catalog field a column (a CSV header name, a JSONL key) stands for, as exports name them.

Names are matched case-insensitively, with spaces and hyphens read as underscores, so `Title`,
`Author Name` and `ISBN-13` are recognised. `author`, `authors` and `author_name` are the
authors; `isbn13` and `isbn` become the id of a row that has no `id` field; every other column
is kept as metadata. A book without an id or an ISBN gets an id derived from its title and
authors: stable from one export to the next, so a re-index finds the book unchanged.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from functools import lru_cache

FIELDS = ("id", "title", "description", "authors", "year", "language")
ISBN = "isbn"  # not a field: the id of a row without one
# the name a column is known by → the field it holds; earlier names win when a row has several
_ALIASES: dict[str, tuple[str, ...]] = {
    "id": ("id", "book_id"),  # Goodreads' export: "Book Id"
    "title": ("title",),
    "description": ("description",),
    "authors": ("authors", "author", "author_name"),
    "year": ("year",),
    "language": ("language",),
    ISBN: ("isbn13", "isbn_13", "isbn"),
}
_FIELD_OF = {name: f for f, names in _ALIASES.items() for name in names}
_RANK = {name: i for names in _ALIASES.values() for i, name in enumerate(names)}
_ISBN_NOISE = re.compile(r"[\s\-]")
_SLUG_DROP = re.compile(r"[^a-z0-9]+")


@lru_cache(maxsize=4096)
def field_of(name: str) -> str | None:
    """The field column `name` holds ("Author" → "authors", "ISBN13" → "isbn"), or None:
    metadata."""
    return _FIELD_OF.get(_normal(name))


def _normal(name: str) -> str:
    return re.sub(r"[\s\-]+", "_", name.strip().lower())


@lru_cache(maxsize=4096)
def rank(name: str) -> int:
    """Where `name` stands among its field's names: the lowest rank is read, if it has a value."""
    return _RANK.get(_normal(name), 0)


def header_problem(names: list[str]) -> str | None:
    """Why a CSV header cannot be a catalog's, with what to change; None when it can."""
    seen: dict[str, int] = {}
    for i, name in enumerate(names, start=1):
        if name and name in seen:
            return (
                f"CSV header names the column {name!r} twice (columns {seen[name]} and {i}); "
                "give each column its own name"
            )
        seen[name] = i
    if not any(field_of(n) == "title" for n in names):
        found = ", ".join(repr(n) for n in names if n) or "none"
        return (
            f"CSV header has no 'title' column (its columns: {found}); name the column that "
            "holds the book titles 'title' (an 'id' column is optional: without one the id is "
            "the 'isbn' or 'isbn13' column, else derived from title and authors)"
        )
    return None


def split_authors(text: str) -> list[str]:
    """A cell of authors as a list. `;` always separates; `,` separates only when every name
    between the commas has two words or more ("Neil Gaiman, Terry Pratchett"), so a single
    "Herbert, Frank" or "Tolkien, J. R. R." stays one name."""
    if ";" in text:
        parts = text.split(";")
    else:
        parts = text.split(",")
        if len([p for p in parts if p.strip()]) > 1 and any(len(p.split()) < 2 for p in parts):
            parts = [text]
    return [p.strip() for p in parts if p.strip()]


def isbn_id(value: str) -> str:
    """An ISBN as an id: without hyphens, spaces, or the `="…"` spreadsheets wrap it in
    (`="0441172717"`, as Goodreads exports it); an upper-case X."""
    value = value.strip()
    if value.startswith("="):
        value = value[1:].strip().strip('"')
    return _ISBN_NOISE.sub("", value).upper()


def derived_id(title: str, authors: list[str]) -> str:
    """A stable id from title and authors: a slug of the title and a hash of both, in which
    case and spacing do not count ("dune-1f3a9c0b2e")."""

    def key(text: str) -> str:
        return " ".join(unicodedata.normalize("NFKC", text).casefold().split())

    digest = hashlib.blake2b(
        "\x1f".join([key(title), *map(key, authors)]).encode("utf-8", "surrogatepass"),
        digest_size=5,
    ).hexdigest()
    ascii_title = unicodedata.normalize("NFKD", title).encode("ascii", "ignore").decode()
    slug = _SLUG_DROP.sub("-", ascii_title.lower()).strip("-")[:48].rstrip("-") or "book"
    return f"{slug}-{digest}"
