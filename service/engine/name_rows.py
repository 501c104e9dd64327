"""What each book names, row by row: the facts the catalog's name indexes
(service/engine/catalog_names.py) are made from.

A row's authors (whole names, folded: case, accents, punctuation, so "J.R.R. Tolkien" and
"J. R. R. Tolkien" are one), its series (the key of its title's "(Series, #n)" marker, and the
series its catalog row names: Calibre's `series`, a MARC record's numbered series), its
subject headings and its publishers (folded) and the keys of its work
(service/engine/book_works.py: its folded title, and its description when long, each with its
first author) are each a fact of the row alone. So a swap folds the changed books only and
moves the other rows' facts (`following`): O(changed) text work and O(N) moves of references,
where folding every title, description and name again was most of a swap. What needs the
whole catalog (principal authors, works, which surnames are words, which headings are too
common to tell books apart) is made from these facts by `CatalogNames`.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from indexer.text_column import text_arrays, text_of_arrays
from models.text import fold
from service.engine.bm25_postings import RowMoves
from service.engine.row_lists import lists_arrays, lists_of, moved

# a title's closing marker: "(Discworld, #30)", "(The Lord of the Rings  #1)", "(Harry Potter
# #6-7)", "(Discworld  #14; Witches #4)": each ";"-part a series and the book's number in it
_MARKER = re.compile(r"\(([^()]*#[^()]*)\)\s*$")
_PART = re.compile(r"^(.*?)[,]?\s*#\s*[\d.]+(?:\s*-+\s*[\d.]+)?$")
_CLOSING = re.compile(r"\s*\([^()]*\)\s*$")  # "(Discworld #4)", "(Penguin Classics)"
_NOT_AUTHORS = frozenset({("anonymous",), ("unknown",), ("various",), ("various", "authors")})
MAX_NAME_TOKENS = 6
ARTICLES = frozenset({"the", "a", "an"})  # a title's leading article, a word before a name
MIN_SHARED_DESCRIPTION = 80  # characters: a blurb that long, word for word, is one edition's

AuthorKey = tuple[str, ...]  # a name's folded words
NAMED_COLUMNS = ("series", "subjects", "publishers")  # the columns of folded names
T = TypeVar("T")


def name_key(name: str) -> AuthorKey:
    """An author's key: the name's folded words, at most MAX_NAME_TOKENS of them."""
    return tuple(fold(name))[:MAX_NAME_TOKENS]


def series_keys(title: str) -> tuple[str, ...]:
    """The series a title names: ("discworld",) for "Mort (Discworld  #4)", ("discworld",
    "witches") for "Lords and Ladies (Discworld  #14; Witches #4)", () without a marker."""
    return tuple(_series_names(title))


def _series_names(title: str) -> dict[str, str]:
    """The series a title's marker names: each key, and the name as the title writes it."""
    m = _MARKER.search(title)
    if not m:
        return {}
    names: dict[str, str] = {}
    for part in m.group(1).split(";"):
        if (named := _PART.match(part.strip())) and (key := " ".join(fold(named.group(1)))):
            names.setdefault(key, named.group(1).strip())
    return names


def row_series(
    title: str, named: Sequence[str], written: dict[str, str] | None = None
) -> tuple[str, ...]:
    """The series of a book: its title's marker's, then those its row names (`named`), folded
    as a marker's are, so "Discworld" named and "(Discworld, #4)" in a title are one series.
    `written`: where each key's name as first written is kept."""
    names = _series_names(title)
    for name in named:
        if key := " ".join(fold(name)):
            names.setdefault(key, name.strip())
    if written is not None:
        for key, name in names.items():
            written.setdefault(key, name)
    return tuple(names)


def title_words(title: str) -> list[str]:
    """A title's folded words, its closing parenthetical ("(Discworld #4)") dropped."""
    return fold(_CLOSING.sub("", title) or title)


def work_keys(title: str, description: str | None, by: AuthorKey | None) -> tuple[int, int]:
    """The keys of a book's work: its folded title (its closing parenthetical dropped) and its
    folded description (MIN_SHARED_DESCRIPTION characters or more), each with its first author
    `by`, as 64-bit digests (stable across processes: they are kept in the served form); 0 for
    a key it has not. A book without an author has none: nothing tells two books of one title
    apart."""
    if not by:
        return 0, 0
    name = " ".join(by)
    title_key = _digest("title", " ".join(title_words(title)), name)
    text = description or ""
    long = len(text) >= MIN_SHARED_DESCRIPTION
    return title_key, _digest("description", " ".join(fold(text)), name) if long else 0


def _digest(*parts: str) -> int:
    """A nonzero signed 64-bit digest of `parts`."""
    digest = hashlib.blake2b("\x1f".join(parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little", signed=True) | 1


@dataclass(frozen=True)
class NameRows:
    """Each row's authors, series, subject headings, publishers and work keys."""

    authors: list[tuple[AuthorKey, ...]]  # distinct within a row, in credit order
    series: list[tuple[str, ...]]
    subjects: list[tuple[str, ...]]  # every heading, folded, distinct within a row
    publishers: list[tuple[str, ...]]  # folded as the headings, distinct within a row
    work_keys: np.ndarray  # (N, 2) int64: `work_keys` of each row
    # a heading's, series' or publisher's key → the name as the catalog first wrote it (what a
    # facet shows):
    # a table of the distinct names, kept across swaps (a name no row holds any more is shown
    # by nothing)
    written: dict[str, str]

    @classmethod
    def of(
        cls,
        titles: Sequence[str],
        authors: Sequence[Sequence[str]],
        descriptions: Sequence[str | None] | None = None,
        *,
        subjects: Sequence[Sequence[str]] | None = None,
        series: Sequence[Sequence[str]] | None = None,
        publishers: Sequence[Sequence[str]] | None = None,
    ) -> NameRows:
        """The facts of books given column by column (descriptions, subjects, the series rows
        name and publishers: None where the catalog has none)."""
        row_authors: list[tuple[AuthorKey, ...]] = []
        # one tuple object per distinct name and per distinct tuple of a row's names: each
        # row's own folded copies cost ~340 bytes a book (32 MiB at 100,000 books)
        one_key: dict[AuthorKey, AuthorKey] = {}
        row_keys: dict[tuple[AuthorKey, ...], tuple[AuthorKey, ...]] = {}
        for names in authors:
            keys: list[AuthorKey] = []
            for name in names:
                key = name_key(name)
                if key and key not in keys and key not in _NOT_AUTHORS:
                    key = one_key.setdefault(key, key)
                    keys.append(key)
            row_authors.append(row_keys.setdefault(tuple(keys), tuple(keys)))
        one_series: dict[tuple[str, ...], tuple[str, ...]] = {}  # one object each, as above
        written: dict[str, str] = {}
        named = series or [()] * len(titles)
        row_keys_of = (row_series(t, n, written) for t, n in zip(titles, named, strict=True))
        series_rows = [one_series.setdefault(k, k) for k in row_keys_of]
        headings = _folded_names(subjects or [()] * len(titles), written)
        publisher_rows = _folded_names(publishers or [()] * len(titles), written)
        work = np.array(
            [
                work_keys(title, descriptions[row] if descriptions else None, by[0] if by else None)
                for row, (title, by) in enumerate(zip(titles, row_authors, strict=True))
            ],
            np.int64,
        ).reshape(len(titles), 2)
        return cls(row_authors, series_rows, headings, publisher_rows, work, written)

    def __len__(self) -> int:
        return len(self.authors)

    def following(self, moves: RowMoves, changed: NameRows) -> NameRows:
        """The facts of the next generation: these rows moved by `moves`, the changed rows'
        `changed` (in `moves.changed` order)."""
        authors = moved(self.authors, moves, changed.authors)
        keys = np.zeros((moves.size, 2), np.int64)
        stay = moves.new_row >= 0
        keys[moves.new_row[stay]] = self.work_keys[stay]
        keys[moves.changed] = changed.work_keys
        return NameRows(
            authors,
            moved(self.series, moves, changed.series),
            moved(self.subjects, moves, changed.subjects),
            moved(self.publishers, moves, changed.publishers),
            keys,
            {**changed.written, **self.written},
        )

    def arrays(self) -> dict[str, np.ndarray]:
        """The facts as arrays (service/engine/served_form.py): each table of names once (the
        authors' folded words, the series, the headings) and each row's list of numbers into
        it."""
        out = {"work_keys": self.work_keys}
        number: dict[AuthorKey, int] = {}
        rows = [[number.setdefault(k, len(number)) for k in keys] for keys in self.authors]
        out |= text_arrays("authors", [" ".join(key) for key in number])
        out |= lists_arrays("row_authors", rows)
        for name, column in self._named_columns():
            table: dict[str, int] = {}
            rows = [[table.setdefault(k, len(table)) for k in keys] for keys in column]
            out |= text_arrays(name, list(table)) | lists_arrays(f"row_{name}", rows)
        out |= text_arrays("written_keys", list(self.written))
        return out | text_arrays("written", list(self.written.values()))

    @classmethod
    def from_arrays(cls, arrays: Mapping[str, np.ndarray]) -> NameRows:
        """The facts `arrays()` gave, nothing folded again. ValueError where they do not hold
        together."""
        authors = [tuple(key.split(" ")) for key in text_of_arrays(arrays, "authors")]
        row_authors = _rows_of(authors, lists_of(arrays, "row_authors", len(authors)))
        series, subjects, publishers = (
            _rows_of(table, lists_of(arrays, f"row_{name}", len(table)))
            for name in NAMED_COLUMNS
            for table in [list(text_of_arrays(arrays, name))]
        )
        keys = np.asarray(arrays["work_keys"], np.int64)
        lengths = {len(row_authors), len(series), len(subjects), len(publishers)}
        if keys.ndim != 2 or keys.shape[1] != 2 or lengths != {len(keys)}:
            raise ValueError("the books' names in columns of other lengths")
        keyed = text_of_arrays(arrays, "written_keys")
        written = dict(zip(keyed, text_of_arrays(arrays, "written"), strict=True))
        return cls(row_authors, series, subjects, publishers, keys, written)

    def _named_columns(self) -> Iterator[tuple[str, list[tuple[str, ...]]]]:
        """The columns of folded names, by their name in the arrays (NAMED_COLUMNS)."""
        return zip(NAMED_COLUMNS, (self.series, self.subjects, self.publishers), strict=True)


def _folded_names(
    values: Sequence[Sequence[str]], written: dict[str, str]
) -> list[tuple[str, ...]]:
    """Each row's names folded (a heading's or a publisher's), each once in a row; `written`
    keeps each key's name as first written. One tuple object per distinct row of names (a
    publisher's thousands of books share one)."""
    rows: list[tuple[str, ...]] = []
    one: dict[tuple[str, ...], tuple[str, ...]] = {}
    for names in values:
        folded: dict[str, None] = {}
        for name in names:
            if key := " ".join(fold(name)):
                folded[key] = None
                written.setdefault(key, name.strip())
        row = tuple(folded)
        rows.append(one.setdefault(row, row))
    return rows


def _rows_of(table: Sequence[T], rows: list[tuple[int, ...]]) -> list[tuple[T, ...]]:
    """Each row's entries of `table`, one tuple object per distinct list."""
    one: dict[tuple[int, ...], tuple[T, ...]] = {}
    return [one.get(ids) or one.setdefault(ids, tuple(table[i] for i in ids)) for ids in rows]
