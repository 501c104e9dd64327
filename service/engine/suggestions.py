"""Completions as a reader types (`GET /suggest`): the titles and the author names whose words
hold what was typed, its last word as a prefix ("hobb" → The Hobbit, "potter phil" → Harry
Potter and the Philosopher's Stone, "tolk" → J. R. R. Tolkien), accents, case and punctuation
aside, in any order; a work once, the most read first (the readers' rating counts, else the
catalog's order), an author by their number of books.

Each list of texts (the titles, the distinct author names) is indexed by its folded words: the
distinct words sorted, and each word's texts (CSR arrays). A query's complete words are looked up
exactly and its last word as the range of words it begins; the texts holding them all are the
matches: a few binary searches and numpy set operations, whatever the catalog's size. The
indexes are made once per served generation, on the first request.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from models.text import fold
from service.engine.served_index import ServedIndex

MIN_CHARS = 2  # a query of fewer folded characters suggests nothing: every text would match


@dataclass(frozen=True)
class TitleSuggestion:
    id: str
    title: str
    authors: list[str]
    year: int | None


@dataclass(frozen=True)
class AuthorSuggestion:
    name: str
    books: int


@dataclass(frozen=True)
class Suggestions:
    query: str
    titles: list[TitleSuggestion]
    authors: list[AuthorSuggestion]


class WordIndex:
    """Texts by their folded words, each word's texts in the order given (`order`: the most
    read first), so that the first matches are the best and a query reads no more of a long
    list than it needs. `matches(words, need)`: the first `need` texts holding every word of
    `words` but the last, and a word the last begins."""

    def __init__(self, texts: Sequence[str], order: np.ndarray | None = None):
        order = np.arange(len(texts)) if order is None else order  # place → text
        lists: dict[str, list[int]] = {}
        for place, i in enumerate(order.tolist()):
            for word in dict.fromkeys(fold(texts[i])):
                lists.setdefault(word, []).append(place)
        self.order = order
        self.words = sorted(lists)
        counts = np.array([len(lists[w]) for w in self.words], np.int64)
        self.starts = np.concatenate([[0], np.cumsum(counts)])  # (W + 1,)
        # (Σ,) each word's places, ascending: its texts, best first
        self.places = np.array([p for w in self.words for p in lists[w]], np.int64)

    def _span(self, lo: str, hi: str) -> range:
        """The words in [lo, hi), as positions in `words`."""
        return range(bisect.bisect_left(self.words, lo), bisect.bisect_left(self.words, hi))

    def _first(self, words: range, m: int) -> tuple[np.ndarray, bool]:
        """The first `m` places holding one of `words`, ascending, and whether that is all of
        them: the first m of each word's list hold the first m of their union."""
        heads = [
            self.places[self.starts[w] : min(self.starts[w + 1], self.starts[w] + m)] for w in words
        ]
        if not heads:
            return np.empty(0, np.int64), True
        found = heads[0] if len(heads) == 1 else np.unique(np.concatenate(heads))
        whole = all(self.starts[w + 1] - self.starts[w] <= m for w in words)
        return found[:m], whole and len(found) <= m

    def _holding(self, places: np.ndarray, word: int) -> np.ndarray:
        """The `places` whose text holds word `word` (its list searched, not read whole)."""
        own = self.places[self.starts[word] : self.starts[word + 1]]
        at = np.searchsorted(own, places).clip(max=max(len(own) - 1, 0))
        return places[(len(own) > 0) & (own[at] == places)] if len(own) else places[:0]

    def matches(self, words: Sequence[str], need: int) -> np.ndarray:
        """The texts (best first) holding each complete word of `words` and a word their last
        one begins ("" when the last word is complete too): the first `need`, or all."""
        *whole, last = words
        exact = [self._span(w, w + "\0") for w in whole]
        if any(len(r) == 0 for r in exact):
            return np.empty(0, np.int64)
        words_of = [r.start for r in exact]
        if last:
            drive, rest = self._span(last, last + "\U0010ffff"), words_of
        elif words_of:  # the rarest complete word drives, the others are checked
            rarest = min(words_of, key=lambda w: self.starts[w + 1] - self.starts[w])
            drive, rest = range(rarest, rarest + 1), [w for w in words_of if w != rarest]
        else:
            return np.empty(0, np.int64)
        m = max(need, 16)
        while True:
            first, complete = self._first(drive, m)
            for word in rest:
                first = self._holding(first, word)
            if len(first) >= need or complete:
                found: np.ndarray = self.order[first[:need]]
                return found
            m *= 4


class Suggester:
    """The word indexes of one served generation's titles and authors."""

    def __init__(self, index: ServedIndex):
        self.index = index
        readers = None if index.readers is None else index.readers.cpu().numpy()
        rows = np.arange(len(index))
        # the most read first, the catalog's order among equals
        order = rows if readers is None else np.lexsort((rows, -readers))
        self.titles = WordIndex(index.books.titles, order)
        counts: dict[str, int] = {}
        for names in index.books.authors:
            for name in dict.fromkeys(names):
                counts[name] = counts.get(name, 0) + 1
        self.names = list(counts)
        self.books = np.array([counts[n] for n in self.names], np.int64)
        by_books = np.lexsort((np.arange(len(self.names)), -self.books))
        self.authors = WordIndex(self.names, by_books)

    def suggest(self, query: str, k: int) -> Suggestions:
        words = fold(query)
        if len("".join(words)) < MIN_CHARS:
            return Suggestions(query, [], [])
        if query[-1:].isspace():  # the last word is complete
            words = [*words, ""]
        authors = self.authors.matches(words, k).tolist()
        return Suggestions(
            query,
            self._titles(words, k),
            [AuthorSuggestion(self.names[i], int(self.books[i])) for i in authors],
        )

    def _titles(self, words: list[str], k: int) -> list[TitleSuggestion]:
        """The first `k` works of the matching titles, each by its best edition."""
        work, books = self.index.names.works.work, self.index.books
        need = 2 * k
        while True:
            rows = self.titles.matches(words, need).tolist()
            out: list[TitleSuggestion] = []
            seen: set[int] = set()
            for row in rows:
                if (w := int(work[row])) not in seen:
                    seen.add(w)
                    book = TitleSuggestion(
                        books.ids[row],
                        books.titles[row],
                        list(books.authors[row]),
                        books.years[row],
                    )
                    out.append(book)
            if len(out) >= k or len(rows) < need:
                return out[:k]
            need *= 4


class SuggestionIndexes:
    """The Suggester of the generation served now, made by the first request for it. The
    requests that come while it is made get None (no suggestions yet) at once, rather than
    wait in the threads every route shares."""

    def __init__(self) -> None:
        self._making = threading.Lock()
        self._current: Suggester | None = None

    def of(self, index: ServedIndex) -> Suggester | None:
        if (current := self._current) is not None and current.index is index:
            return current
        if not self._making.acquire(blocking=False):
            return None
        try:
            if (current := self._current) is None or current.index is not index:
                current = self._current = Suggester(index)
            return current
        finally:
            self._making.release()
