"""A catalog's book fields column by column: what a search shows for a hit and filters on.

One `BookColumns` travels whole from the store's `load_index` to the served index, the shards'
slices and every response; a hit's fields are `row(i)`, a `BookFields`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from typing import Any

from indexer.text_column import TextColumn


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

    def take(self, rows: Sequence[int]) -> BookColumns:
        """The books of `rows`, in that order."""
        return self._map(lambda column: [column[i] for i in rows])

    def slice(self, start: int, stop: int) -> BookColumns:
        """Rows [start, stop)."""
        return self._map(lambda column: column[start:stop])

    def __add__(self, other: BookColumns) -> BookColumns:
        """These rows, then `other`'s."""
        return BookColumns(
            *(mine + theirs for mine, theirs in zip(self._columns(), other._columns(), strict=True))
        )

    def _columns(self) -> list[Any]:
        return [getattr(self, f.name) for f in fields(self)]

    def _map(self, f: Callable[[Any], Any]) -> BookColumns:
        return BookColumns(*(f(column) for column in self._columns()))
