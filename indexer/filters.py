"""Search filters, and the attention masks they give over a catalog's rows."""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from indexer.book_columns import BookColumns
from indexer.languages import language_key
from indexer.text_column import RowLookup
from models.text import fold

MASKS_CACHED = 64


@dataclass(frozen=True)
class Filters:
    """Which books a query may attend to. Text matches are case-insensitive."""

    # part of any author's name: a substring (case aside), or whole words of it as names are
    # folded ("J.R.R. Tolkien" keeps "J. R. R. Tolkien", "garcia marquez" "García Márquez")
    author: str | None = None
    year_min: int | None = None  # inclusive; books without a year are left out
    year_max: int | None = None
    language: str | None = None  # a language code in any ISO 639 form (indexer/languages.py)
    exclude: frozenset[str] = frozenset()  # ids left out (the books a similar query starts from)
    subject: str | None = None  # a subject heading, whole (case, accents, punctuation aside)
    series: str | None = None  # a series, whole, as a title's marker or the row names it
    publisher: str | None = None  # a publisher, whole (case, accents, punctuation aside)
    # the catalog rows a subject, series or publisher filter keeps, where the columns hold no
    # names (a shard's: service/cluster/shards/router.py sends them); None: the columns' `named`
    # finds them
    within: tuple[int, ...] | None = None

    @property
    def active(self) -> bool:
        bounds = (self.author, self.year_min, self.year_max, self.language)
        return bool(self.exclude) or self.by_name or any(v is not None for v in bounds)

    @property
    def by_name(self) -> bool:
        """Whether a subject, series or publisher filter is among these: the catalog's names
        answer it."""
        return any(v is not None for v in (self.subject, self.series, self.publisher))


def _author_words(names: tuple[str, ...]) -> str:
    """A book's authors' folded words as the author filter reads them, each name between " | "
    (a match never spans two names)."""
    return f" {' | '.join(' '.join(fold(name)) for name in names)} "


# the rows of the books filed under a subject heading, in a series or of a publisher: (field,
# value) → rows, "subject", "series" or "publisher" (service/engine/catalog_names.py
# `CatalogNames.rows_named`)
NamedRows = Callable[[str, str], np.ndarray]


class FilterColumns:
    """The columns filters read, prepared once per catalog, and the masks they give: (N,) bool,
    True for a book a query may attend to, on `device`. The last MASKS_CACHED masks are cached.

    The cache is a plain LRU, not `functools.lru_cache` over the bound method: that made the
    columns a reference cycle (columns → cache → bound method → columns), so a retired
    generation's columns waited for the cycle collector, which the service keeps off its
    long-lived objects (service/engine/reloader.py, `freeze_long_lived`)."""

    def __init__(
        self,
        books: BookColumns,
        *,
        device: torch.device,
        follows: tuple[FilterColumns, np.ndarray] | None = None,
        named: NamedRows | None = None,
        offset: int = 0,
    ):
        """`follows`: the columns of the generation before, and where each of these rows was
        there ((N,) int64, −1 for a changed book): its columns moved (and its ids' hashes), only
        the changed books' values made (the same columns as made whole). `named`: the rows of
        a subject heading, a series or a publisher (None: a shard's columns, whose filters carry
        their rows, `Filters.within`); `offset`: the catalog row of these books' first (a
        shard's start)."""
        self.device = device
        self.size = len(books)
        self.named = named
        self.offset = offset
        rows: Sequence[int] = range(len(books))
        if follows is not None:
            before, sources = follows
            rows = np.flatnonzero(sources < 0).tolist()
        # a year of NaN never satisfies a bound
        year = torch.tensor(
            [math.nan if (y := books.years[r]) is None else y for r in rows], dtype=torch.float64
        )  # (N,), or the changed rows'
        # one string per distinct value, not one per book (60 and 80 bytes a book): a catalog
        # has a few languages, and many books share their authors
        languages: dict[str | None, str] = {}
        language = [
            languages.get(lang) or languages.setdefault(lang, language_key(lang))
            for lang in (books.languages[r] for r in rows)
        ]
        authors: dict[tuple[str, ...], str] = {}
        author = [
            authors.get(key := tuple(a)) or authors.setdefault(key, "\n".join(a).casefold())
            for a in (books.authors[r] for r in rows)
        ]
        # the authors' folded words: made at the first author filter, not at a start (folding
        # every name of a large catalog takes seconds), then moved by each swap like the rest
        self._books, self._words_lock = books, threading.Lock()
        self._words: list[str] | None = None
        if follows is None:
            self._year, self._language, self._author = year, language, author
            self._rows = RowLookup(books.ids)  # 12 bytes a book, where a dict took ~60
        else:
            at = sources.clip(0).tolist()
            self._year = before._year[torch.from_numpy(sources.clip(0))]
            self._year[rows] = year
            self._language = [before._language[s] for s in at]
            self._author = [before._author[s] for s in at]
            for i, r in enumerate(rows):
                self._language[r], self._author[r] = language[i], author[i]
            if before._words is not None:
                self._words = [before._words[s] for s in at]
                for r in rows:
                    self._words[r] = _author_words(tuple(books.authors[r]))
            self._rows = RowLookup(books.ids, follows=(before._rows, sources))
        self._masks: OrderedDict[Filters, Tensor] = OrderedDict()
        self._masks_lock = threading.Lock()  # the searcher's worker and the routes' threads

    def author_words(self) -> list[str]:
        """Each book's authors' folded words (`_author_words`), made at the first call."""
        with self._words_lock:
            if self._words is None:
                one: dict[tuple[str, ...], str] = {}
                self._words = [
                    one.get(key := tuple(a)) or one.setdefault(key, _author_words(key))
                    for a in self._books.authors
                ]
            return self._words

    def row_of(self, book_id: str) -> int | None:
        """The row of `book_id`, None when it is not among these books."""
        return self._rows.get(book_id)

    def mask(self, filters: Filters) -> Tensor | None:
        """(N,) bool, True for the books the filters keep; None when there are no filters."""
        if not filters.active:
            return None
        with self._masks_lock:
            if (cached := self._masks.get(filters)) is not None:
                self._masks.move_to_end(filters)
                return cached
        keep = self._build_mask(filters)
        with self._masks_lock:
            self._masks[filters] = keep
            while len(self._masks) > MASKS_CACHED:
                self._masks.popitem(last=False)
        return keep

    def batch_mask(self, filters: Sequence[Filters]) -> Tensor | None:
        """None without filters, (N,) when every query shares them, else (B, N)."""
        masks = [self.mask(f) for f in filters]
        if all(m is None for m in masks):
            return None
        if len(set(filters)) == 1:
            return masks[0]
        everything = torch.ones(self.size, dtype=torch.bool, device=self.device)
        return torch.stack([everything if m is None else m for m in masks])  # (B, N)

    def _build_mask(self, filters: Filters) -> Tensor:
        keep = torch.ones(self.size, dtype=torch.bool)  # (N,)
        if filters.year_min is not None:
            keep &= self._year >= filters.year_min
        if filters.year_max is not None:
            keep &= self._year <= filters.year_max
        if filters.language is not None:
            lang = language_key(filters.language)
            keep &= torch.tensor([x == lang for x in self._language], dtype=torch.bool)
        if filters.author is not None:
            name, folded = filters.author.casefold(), fold(filters.author)
            if folded:
                words, of = f" {' '.join(folded)} ", self.author_words()
                held = [name in a or words in w for a, w in zip(self._author, of, strict=True)]
            else:  # "…": no words to match
                held = [name in a for a in self._author]
            keep &= torch.tensor(held, dtype=torch.bool)
        if filters.by_name:
            keep &= self._named_mask(filters)
        for book_id in filters.exclude:
            if (row := self.row_of(book_id)) is not None:
                keep[row] = False
        return keep.to(self.device)

    def _named_mask(self, filters: Filters) -> Tensor:
        """(N,) bool: the books that a subject, series or publisher filter keeps."""
        if filters.within is not None:
            rows = np.asarray(filters.within, np.int64) - self.offset
            rows = rows[(rows >= 0) & (rows < self.size)]
        elif self.named is not None:
            rows = np.arange(self.size)
            for field in ("subject", "series", "publisher"):
                if (value := getattr(filters, field)) is not None:
                    rows = np.intersect1d(rows, self.named(field, value))
        else:
            raise ValueError("a filter by name needs the catalog's names or its rows")
        keep = torch.zeros(self.size, dtype=torch.bool)
        keep[torch.from_numpy(rows)] = True
        return keep
