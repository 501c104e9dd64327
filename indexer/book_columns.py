"""A catalog's book fields column by column: what a search shows for a hit and filters on.

One `BookColumns` travels whole from the store's `load_index` to the served index, the shards'
slices and every response; a hit's fields are `row(i)`, a `BookFields`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from itertools import accumulate, pairwise
from typing import Any

import numpy as np

from indexer.text_column import TextColumn, text_arrays, text_of_arrays

_NO_YEAR = np.iinfo(np.int64).min  # a year unknown, in `arrays()`


@dataclass(frozen=True)
class BookFields:
    """One book as a hit shows it."""

    id: str
    title: str
    authors: list[str]
    year: int | None
    language: str | None


@dataclass(frozen=True)
class BookColumns:
    """Row i of every column is one book: ids[i], titles[i], …; the ids and titles held as
    `TextColumn`s (their text and 8 bytes a book, where str objects cost ~50 bytes a book more),
    whatever sequence they are given as."""

    ids: Sequence[str]
    titles: Sequence[str]
    authors: list[list[str]]
    years: list[int | None]
    languages: list[str | None]

    def __post_init__(self) -> None:
        object.__setattr__(self, "ids", TextColumn.of(self.ids))
        object.__setattr__(self, "titles", TextColumn.of(self.titles))

    def __len__(self) -> int:
        return len(self.ids)

    def row(self, i: int) -> BookFields:
        return BookFields(
            self.ids[i], self.titles[i], self.authors[i], self.years[i], self.languages[i]
        )

    def take(self, rows: Sequence[int] | np.ndarray) -> BookColumns:
        """The books of `rows`, in that order."""
        at = np.asarray(rows, np.int64).tolist()
        return self._map(
            lambda column: (
                column.take(at) if isinstance(column, TextColumn) else [column[i] for i in at]
            )
        )

    def slice(self, start: int, stop: int) -> BookColumns:
        """Rows [start, stop)."""
        return self._map(lambda column: column[start:stop])

    def __add__(self, other: BookColumns) -> BookColumns:
        """These rows, then `other`'s."""
        return BookColumns(
            *(mine + theirs for mine, theirs in zip(self._columns(), other._columns(), strict=True))
        )

    def arrays(self) -> dict[str, np.ndarray]:
        """The columns as arrays, for a file (service/engine/served_form.py): each text column
        its text and offsets, the authors one text column of names and each row's first name's
        place in it, a year unknown as the least int64, a language unknown as a flag."""
        names = TextColumn.of(name for row in self.authors for name in row)
        out = {
            **text_arrays("ids", self.ids),
            **text_arrays("titles", self.titles),
            **text_arrays("names", names),
        }
        out["author_starts"] = np.fromiter(
            accumulate((len(a) for a in self.authors), initial=0), np.int64, len(self) + 1
        )
        out["years"] = np.array([_NO_YEAR if y is None else y for y in self.years], np.int64)
        out.update(text_arrays("languages", [lang or "" for lang in self.languages]))
        out["no_language"] = np.array([lang is None for lang in self.languages], np.bool_)
        return out

    @classmethod
    def from_arrays(cls, arrays: Mapping[str, np.ndarray]) -> BookColumns:
        """The columns `arrays()` gave. ValueError where they are not one length, or the
        authors' places do not span their names."""
        names = list(text_of_arrays(arrays, "names"))
        starts = arrays["author_starts"].tolist()
        languages = text_of_arrays(arrays, "languages")
        n = len(starts) - 1
        if not starts or starts[0] != 0 or starts[-1] != len(names):
            raise ValueError("book columns whose authors do not span their names")
        if np.any(np.diff(arrays["author_starts"]) < 0):
            raise ValueError("book columns whose authors' places go back")
        if {len(arrays["ids.starts"]) - 1, len(arrays["years"]), len(languages)} != {n}:
            raise ValueError("book columns of other lengths")
        return cls(
            ids=text_of_arrays(arrays, "ids"),
            titles=text_of_arrays(arrays, "titles"),
            authors=[names[a:b] for a, b in pairwise(starts)],
            years=[None if y == _NO_YEAR else y for y in arrays["years"].tolist()],
            languages=[
                None if none else lang
                for lang, none in zip(languages, arrays["no_language"].tolist(), strict=True)
            ],
        )

    def _columns(self) -> list[Any]:
        return [getattr(self, f.name) for f in fields(self)]

    def _map(self, f: Callable[[Any], Any]) -> BookColumns:
        return BookColumns(*(f(column) for column in self._columns()))
