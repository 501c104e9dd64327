"""The relevance suite's queries with books as the query, labelled by subject headings
(benchmarks/relevance.py runs them; issue 22).

A book's headings are the OpenLibrary subject headings of ../shared/data/subject_queries.jsonl
whose relevant lists hold it (about a sixth of the catalog has one). The headings are the
development set of the subjects kind: here they are only the source of labels, nothing is
tuned to them. A book is *standalone* when its title names no series (`series_of`) and no
other book of the catalog shares one of its authors (names compared casefolded).

- `topical` (more like this, beyond series and authors): every standalone book with at least
  one other book sharing two or more of its headings; those books are relevant, graded by the
  number of headings shared, capped at 3 (grades 2 and 3: nDCG's gains 3 and 7; MRR@10 and
  recall@100 count the query's top grade, as everywhere in the suite).
- `recommend` (two liked books, beyond their authors): `PAIRS` pairs of books with no author in
  common that share at least one heading, drawn by a seeded random sample of all such pairs
  (sorted by id first, so the draw does not depend on the index's order). Relevant: every
  other book that shares a heading with each liked book, graded by how many distinct headings
  of the two it carries, capped at 3. Every book by an author of either liked book is removed
  from the labels and from every row's ranking before scoring (`Pair.removed`): no row wins
  by returning the liked authors' own books. Pairs left with no relevant book are dropped.
- the junk audit: `AUDITED` standalone books with at least one heading, a seeded sample (by
  id); for each ranking, the share of its top 5 that share neither an author, a series nor a
  heading with the book. Headings are incomplete (most books carry none), so a book counted as
  junk may be a fine answer: the figure compares rows, it is not a rate of bad answers.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from benchmarks.relevance_labels import Book, Judged, series_of

TOP_GRADE = 3
PAIRS = 100  # each costs 6 recommend calls (attend and each head alone)
AUDITED = 30
AUDIT_DEPTH = 5
SEED = 22  # issue 22


@dataclass(frozen=True)
class Pair(Judged):
    """A `recommend` query: `query` is the two ids joined by "+"."""

    liked: tuple[int, int]
    removed: frozenset[int]  # every other book by an author of either liked book


class Catalog:
    """Headings, authors and series of the catalog's rows (index order)."""

    def __init__(self, books: Sequence[Book], subjects: Path):
        self.books = books
        self.row = rows = {b.id: i for i, b in enumerate(books)}
        self.headings: list[set[str]] = [set() for _ in books]
        with subjects.open(encoding="utf-8") as f:
            for line in f:
                row = json.loads(line)
                for book_id in row["relevant"]:
                    if book_id in rows:
                        self.headings[rows[book_id]].add(row["query"])
        self.by_author: dict[str, set[int]] = {}
        for row, b in enumerate(books):
            for name in b.authors:
                self.by_author.setdefault(name.casefold(), set()).add(row)
        self.series = [series_of(b.title) for b in books]

    def authors(self, row: int) -> set[str]:
        return {name.casefold() for name in self.books[row].authors}

    def mates(self, row: int) -> set[int]:
        """The other books by one of the book's authors."""
        return {r for a in self.authors(row) for r in self.by_author[a]} - {row}

    def standalone(self, row: int) -> bool:
        return self.series[row] is None and not self.mates(row)

    def headed(self) -> list[int]:
        """The rows with a heading, ordered by id."""
        return sorted((r for r, h in enumerate(self.headings) if h), key=self.id)

    def id(self, row: int) -> str:
        return self.books[row].id

    def related(self, row: int, other: int) -> bool:
        """Whether two books share an author, a series or a heading."""
        series = self.series[row]
        return bool(
            self.authors(row) & self.authors(other)
            or (series is not None and series == self.series[other])
            or self.headings[row] & self.headings[other]
        )


def topical(catalog: Catalog) -> list[Judged]:
    headed = catalog.headed()
    out = []
    for row in headed:
        if not catalog.standalone(row):
            continue
        mine = catalog.headings[row]
        grades = {
            r: min(TOP_GRADE, shared)
            for r in headed
            if r != row and (shared := len(mine & catalog.headings[r])) >= 2
        }
        if grades:
            out.append(Judged("topical", catalog.id(row), grades))
    return out


def pairs(catalog: Catalog) -> list[Pair]:
    headed = catalog.headed()
    eligible = [
        (a, b)
        for i, a in enumerate(headed)
        for b in headed[i + 1 :]
        if catalog.headings[a] & catalog.headings[b] and not catalog.authors(a) & catalog.authors(b)
    ]
    out = []
    # the first PAIRS of a seeded shuffle that still have a relevant book once the authors'
    # books are gone
    for a, b in random.Random(SEED).sample(eligible, len(eligible)):
        removed = frozenset(catalog.mates(a) | catalog.mates(b)) - {a, b}
        both = catalog.headings[a] | catalog.headings[b]
        grades = {
            r: min(TOP_GRADE, len(h & both))
            for r in headed
            if r not in removed
            and r not in (a, b)
            and (h := catalog.headings[r]) & catalog.headings[a]
            and h & catalog.headings[b]
        }
        if grades:
            query = f"{catalog.id(a)}+{catalog.id(b)}"
            out.append(Pair("recommend", query, grades, (a, b), removed))
        if len(out) == PAIRS:
            break
    return out


def audited(catalog: Catalog) -> list[Judged]:
    """The junk audit's books, as more-like-this queries (unlabelled: `junk` judges them)."""
    standalone = [r for r in catalog.headed() if catalog.standalone(r)]
    rows = random.Random(SEED).sample(standalone, min(AUDITED, len(standalone)))
    return [Judged("junk", catalog.id(r), {}) for r in rows]


def junk(catalog: Catalog, rows: Sequence[int], rankings: Sequence[Sequence[int]]) -> list[float]:
    """Per audited book, the share of the ranking's top 5 that is related to it in no way."""
    return [
        sum(not catalog.related(row, r) for r in ranked[:AUDIT_DEPTH]) / AUDIT_DEPTH
        for row, ranked in zip(rows, rankings, strict=True)
    ]
