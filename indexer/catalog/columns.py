"""Which catalog field a column (a CSV header name, a JSONL key) stands for, as exports name them.

Names are matched case-insensitively, with spaces and hyphens read as underscores, so `Title`,
`Author Name` and `ISBN-13` are recognised, under the names of the exports readers have
(Goodreads, Calibre, LibraryThing, Open Library): `Author`, `Primary Author`, `author_name` are
the authors and `Additional Authors` / `Secondary Author` are joined to them; `Original
Publication Year`, else `Year Published`, is the year, and a date column (`pubdate`, `Date`) its
year; `summary`, `synopsis`, `blurb`, `comments` (Calibre's, HTML) or `review` the description.
`isbn13` and `isbn` become the id of a row that has no `id` field; every other column is kept as
metadata, and one that looks like a field but is none of these names is named in a notice
(`lookalike`) with the setting that maps it: `ColumnNames` with the user's own names first
(`attend index --column 'Writer=authors'`, ATTEND_CATALOG_COLUMNS). A book without an id or an
ISBN gets an id derived from its title and authors: stable from one export to the next, so a
re-index finds the book unchanged.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from functools import lru_cache

FIELDS = ("id", "title", "description", "authors", "year", "language")
ISBN = "isbn"  # not a field: the id of a row without one
MORE_AUTHORS = "more authors"  # not a field: names joined to the authors
METADATA = "metadata"  # what a user's mapping names to keep a known name out of the fields
# the name a column is known by → the field it holds; earlier names win when a row has several
_ALIASES: dict[str, tuple[str, ...]] = {
    "id": ("id", "book_id"),  # Goodreads' and LibraryThing's export: "Book Id"
    "title": ("title", "book_title"),  # Book-Crossing's BX-Books.csv: "Book-Title"
    # Calibre's is `comments` (HTML, reduced to text); LibraryThing's `Summary`. A `Review`
    # (LibraryThing's, StoryGraph's) is the reader's, not the book's: metadata
    "description": ("description", "summary", "synopsis", "blurb", "comments"),
    "authors": ("authors", "author", "author_name", "primary_author", "book_author"),
    MORE_AUTHORS: ("additional_authors", "secondary_author", "secondary_authors"),
    # Goodreads: the first edition's year, else this edition's; Calibre and LibraryThing: a date
    "year": (
        "year",
        "original_publication_year",
        "year_of_publication",  # Book-Crossing's
        "year_published",
        "publication_year",
        "first_publish_year",
        "pubdate",
        "publication_date",
        "published",
        "date",
    ),
    "language": ("language", "language_code"),  # goodbooks-10k's `language_code`
    ISBN: ("isbn13", "isbn_13", "isbn", "isbn/uid"),  # StoryGraph's "ISBN/UID"
}
# metadata a user's mapping may name, which the service reads under this name: a column of
# subject headings or tags (the subjects head), of series (the series head)
NAMED_METADATA = ("subjects", "series")
MAPPABLE = (*FIELDS, ISBN, *NAMED_METADATA, METADATA)  # what a user's mapping may name
DATE_NAMES = frozenset({"pubdate", "publication_date", "published", "date"})  # text: its year
_FIELD_OF = {name: f for f, names in _ALIASES.items() for name in names}
_RANK = {name: i for names in _ALIASES.values() for i, name in enumerate(names)}
# a 4-digit year in a date ("2016-11-18T08:00:00+00:00", "c1965", "[1965?]"); Calibre writes
# 0101-01-01 for "no date", which this does not match
_DATE_YEAR = re.compile(r"(?<!\d)([1-9]\d{3})(?!\d)")
# what a field's column may be called that is none of its names: header words → the field
_LOOKALIKE = (
    ("authors", re.compile(r"author|writer|creator")),
    ("year", re.compile(r"year|publi|pubdate|pub_date|copyright")),
    ("description", re.compile(r"descr|summar|synops|blurb|abstract|overview|annotation")),
)
# author-, year- or description-like names that are not those fields: a sort key, a role, an id
_NOT_LOOKALIKE = re.compile(r"_(l_f|sort|roles?|ids?|count|link|url)$|^(author_sort|publisher)$")
_ISBN_NOISE = re.compile(r"[\s\-]")
_LIFE_DATES = re.compile(r"\d{3,4}")  # "1892-1973" in a library's heading
_SLUG_DROP = re.compile(r"[^a-z0-9]+")


@lru_cache(maxsize=4096)
def field_of(name: str) -> str | None:
    """The field column `name` holds ("Author" → "authors", "ISBN13" → "isbn"), or None:
    metadata."""
    return _FIELD_OF.get(normal_name(name))


def normal_name(name: str) -> str:
    """A field's name as names are matched: lower case, spaces and hyphens one underscore."""
    return re.sub(r"[\s\-]+", "_", name.strip().lower())


@lru_cache(maxsize=4096)
def name_rank(name: str) -> int:
    """Where `name` stands among its field's names: the lowest rank is read, if it has a value."""
    return _RANK.get(normal_name(name), 0)


def date_year(name: str, value: str) -> int | None:
    """The year of a date column's text, None where it has none (or `name` is no date column)."""
    if normal_name(name) not in DATE_NAMES:
        return None
    found = _DATE_YEAR.search(value)
    return int(found.group(1)) if found else None


# a year cell as spreadsheets and library exports write it: "2008.0" (goodbooks-10k's, a float
# column), "c1998", "[1998?]", "1998-2001" (its first year), "March 2008", "-720"
_FLOAT_YEAR = re.compile(r"(-?\d{1,9})\.0*")
_SIGNED = re.compile(r"-\d{1,9}")
_DECIMAL = re.compile(r"-?\d+[.,]\d+")


def cell_year(cell: str) -> int | str:
    """A CSV year cell as the year it says, or the cell itself where it says none (the row's
    check then names it). 0 is a year no calendar has: exports write it for "unknown" (Book-
    Crossing's), so the caller reads it as none."""
    if found := _FLOAT_YEAR.fullmatch(cell) or _SIGNED.fullmatch(cell):
        return int(found.group(1) if found.re is _FLOAT_YEAR else found.group())
    if _DECIMAL.fullmatch(cell):
        return cell  # 1999.5: a number, and no year
    found = _DATE_YEAR.search(cell)
    return int(found.group(1)) if found else cell


def is_date(name: str) -> bool:
    return normal_name(name) in DATE_NAMES


class ColumnNames:
    """The names read as fields: the user's mapping (header → one of MAPPABLE) first, then the
    names exports use. Raises ValueError for a mapping to a name that is none of MAPPABLE."""

    def __init__(self, mapping: dict[str, str] | None = None):
        self.mapping = {normal_name(k): v.strip().lower() for k, v in (mapping or {}).items()}
        for name, f in self.mapping.items():
            if f not in MAPPABLE:
                raise ValueError(
                    f"the column {name!r} is mapped to {f!r}, which is none of "
                    f"{', '.join(MAPPABLE)}"
                )

    def field_of(self, name: str) -> str | None:
        if self.mapping and (f := self.mapping.get(normal_name(name))) is not None:
            return None if f == METADATA else f
        return field_of(name)

    def name_rank(self, name: str) -> int:
        return -1 if self.mapping and normal_name(name) in self.mapping else name_rank(name)

    def lookalike(self, name: str) -> str | None:
        """The field a metadata column `name` looks like it holds, when it is none of that
        field's names and the user did not map it (so it was not read): else None."""
        normal = normal_name(name)
        if normal in self.mapping or normal in _FIELD_OF or _NOT_LOOKALIKE.search(normal):
            return None
        return next((f for f, words in _LOOKALIKE if words.search(normal)), None)


NAMES = ColumnNames()  # the exports' names only


def header_problem(names: list[str], known: ColumnNames = NAMES) -> str | None:
    """Why a CSV header cannot be a catalog's, with what to change; None when it can."""
    seen: dict[str, int] = {}
    for i, name in enumerate(names, start=1):
        if name and name in seen:
            return (
                f"CSV header names the column {name!r} twice (columns {seen[name]} and {i}); "
                "give each column its own name"
            )
        seen[name] = i
    if not any(known.field_of(n) == "title" for n in names):
        found = ", ".join(repr(n) for n in names if n) or "none"
        return (
            f"CSV header has no 'title' column (its columns: {found}); name the column that "
            "holds the book titles 'title' (an 'id' column is optional: without one the id is "
            "the 'isbn' or 'isbn13' column, else derived from title and authors), or map it: "
            "--column 'NAME=title'"
        )
    return None


def split_authors(text: str) -> list[str]:
    """A cell of authors as a list. `;` and ` & ` (Calibre's) always separate; `,` separates
    when every name between the commas has two words or more ("Neil Gaiman, Terry
    Pratchett"), or when there are three names or more ("Homer, Robert Fagles, E.V. Rieu":
    goodbooks-10k's), none of them a date; so a single "Herbert, Frank" or "Tolkien, J. R. R."
    stays one name, and "Tolkien, J. R. R., 1892-1973" too."""
    if ";" in text or " & " in text:
        parts = re.split(r";| & ", text)
    else:
        parts = [p for p in text.split(",") if p.strip()]
        listed = len(parts) >= 3 and not any(_LIFE_DATES.search(p) for p in parts)
        if len(parts) > 1 and not listed and any(len(p.split()) < 2 for p in parts):
            parts = [text]
    return [p.strip() for p in parts if p.strip()]


# Excel shows a 13-digit ISBN as a number in scientific notation, and saves it so: 9.78044E+12
_SCIENTIFIC = re.compile(r"\d(?:\.\d+)?E\+\d+", re.IGNORECASE)


def excel_number(value: str) -> bool:
    """Whether `value` is a long number as Excel writes it (9.78044E+12): its digits lost."""
    return _SCIENTIFIC.fullmatch(value.strip()) is not None


def unwrap_formula(cell: str) -> str:
    """A spreadsheet's text formula as its text: `="0441172717"` (Goodreads writes ISBNs so,
    that Excel keeps their zeros) → `0441172717`; any other cell as it is."""
    if cell.startswith('="') and cell.endswith('"') and len(cell) >= 3:
        return cell[2:-1]
    return cell


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


# the exports known by their headers: the columns only that export has, as `normal_name` reads them
EXPORTS = (
    ("a Goodreads library export", {"book_id", "author_l_f", "exclusive_shelf"}),
    ("a Calibre export", {"author_sort", "uuid", "series_index"}),
    ("a LibraryThing export", {"primary_author", "sort_character"}),
    ("a StoryGraph export", {"isbn/uid", "read_status"}),
    ("Book-Crossing's BX-Books", {"book_title", "book_author", "year_of_publication"}),
    ("goodbooks-10k's books.csv", {"goodreads_book_id", "original_title", "language_code"}),
)


def export_of(names: list[str]) -> str | None:
    """The export a header is (its columns hold one's own), or None."""
    normal = {normal_name(n) for n in names}
    return next((name for name, own in EXPORTS if own <= normal), None)
