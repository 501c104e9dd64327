"""What a reader sees in a top 10: how many distinct works, and how much of a recommendation is
the liked authors' own books (issue 29; benchmarks/relevance.py reports them).

Defined here from the catalog file alone, never from the product's code, so that the suite
judges the product's grouping and caps independently:

- a *work* is a normalised title and a first author: the title casefolded, its trailing
  parentheticals dropped ("(Discworld  #4)", "(Penguin Classics)", one after another),
  whitespace collapsed; the first credited author casefolded. "The Curious Incident of the
  Dog in the Night-Time" in two editions by Mark Haddon is one work;
- per ranking: the number of distinct works among its first `DEPTH` books, and whether two of
  them are editions of one work (`doubled`);
- for a pair of liked books: the share of the top `DEPTH` that shares an author (names
  casefolded) with either liked book;
- how alike a ranking's books are to one another (its variety, read the other way): the mean
  cosine between the description keys of two books of its top `DEPTH` (`alike`; ten books
  about one thing are close to 1).
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Sequence

import numpy as np

from benchmarks.relevance_labels import Book

DEPTH = 10
_TRAILING = re.compile(r"\s*\([^()]*\)\s*$")


def work_of(book: Book) -> tuple[str, str]:
    """(normalised title, first author casefolded): one key per work."""
    title = book.title.casefold()
    while (stripped := _TRAILING.sub("", title)) != title and stripped:
        title = stripped
    first = book.authors[0].casefold() if book.authors else ""
    return " ".join(title.split()), " ".join(first.split())


class Works:
    """The work of each catalog row (index order), and the figures over rankings of rows."""

    def __init__(self, books: Sequence[Book], keys: np.ndarray):
        """`keys`: (N, d) the books' unit-length description keys, in the books' order."""
        self.books = books
        self.keys = keys
        self.work = [work_of(b) for b in books]
        self.authors = [{a.casefold() for a in b.authors} for b in books]

    def figures(self, rankings: Sequence[Sequence[int]]) -> dict[str, float]:
        """Mean distinct works in the top DEPTH, and the share of top DEPTHs holding two
        editions of one work."""
        distinct = [len({self.work[r] for r in ranked[:DEPTH]}) for ranked in rankings]
        doubled = [n < len(ranked[:DEPTH]) for n, ranked in zip(distinct, rankings, strict=True)]
        alike = [self.alike(ranked[:DEPTH]) for ranked in rankings if len(ranked) > 1]
        return {
            "distinct_works@10": statistics.fmean(distinct) if distinct else 0.0,
            "doubled@10": statistics.fmean(doubled) if doubled else 0.0,
            "alike@10": statistics.fmean(alike) if alike else 0.0,
        }

    def alike(self, rows: Sequence[int]) -> float:
        """The mean cosine of the description keys of two distinct books of `rows`."""
        k = self.keys[list(rows)].astype(np.float64)  # (n, d)
        n = len(rows)
        sim = k @ k.T
        return float((sim.sum() - np.trace(sim)) / (n * (n - 1)))

    def liked_share(
        self, liked: Sequence[tuple[int, int]], rankings: Sequence[Sequence[int]]
    ) -> list[float]:
        """Per pair of liked rows: the share of the ranking's top DEPTH by one of their
        authors (of DEPTH slots, so a short list is not flattered)."""
        out = []
        for (a, b), ranked in zip(liked, rankings, strict=True):
            names = self.authors[a] | self.authors[b]
            out.append(sum(bool(self.authors[r] & names) for r in ranked[:DEPTH]) / DEPTH)
        return out

    def example(self, rankings: Sequence[Sequence[int]]) -> list[str]:
        """The titles of the first doubled work met in the rankings (for the report)."""
        for ranked in rankings:
            seen: dict[tuple[str, str], int] = {}
            for r in ranked[:DEPTH]:
                if (w := self.work[r]) in seen:
                    return [self.books[seen[w]].title, self.books[r].title]
                seen[w] = r
        return []
