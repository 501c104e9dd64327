"""The relevance suite's judged queries and its metrics (benchmarks/relevance.py runs them).

Four kinds of query, each judged by a rule over the catalog that no ranking of ours produced:

- `names`: an author's name or a title as typed (benchmarks/relevance_queries.py, kinds
  "author" and "title"): the books whose title matches its regex or whose author contains its
  name;
- `subjects`: OpenLibrary subject headings (../shared/data/subject_queries.jsonl): the books
  OpenLibrary files under the heading. Judgments are incomplete, so these compare rankers and
  say nothing absolute;
- `intents`: a reader's own words (the "description" kind of relevance_queries.py and
  benchmarks/intent_queries.py), each with the rule that labels it;
- `similar`: more like this, for every book of a series with two or more books in the catalog
  (titles carry the series: "The Wee Free Men (Discworld  #30)"): the other books of the series
  have grade 2, other books by one of its authors grade 1.

A query's grades map catalog rows to 1 (relevant) or 2; MRR@10 and recall@100 count the
highest grade of the query as relevant (series mates for `similar`, any relevant book
elsewhere), nDCG@10 uses the grades with gain 2^grade − 1.
"""

from __future__ import annotations

import json
import math
import re
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from benchmarks.relevance_queries import QUERIES, Labelled

KINDS = ("names", "subjects", "intents", "similar")
# the title's closing marker, "(Discworld  #30)" or "(Discworld  #14; Witches #4)", and its first
# part's series name (a book of two series is graded by its first)
_MARKER = re.compile(r"\(([^()]*#[^()]*)\)\s*$")
_FIRST = re.compile(r"^\s*(.*?)[,]?\s*#\s*[\d.]+(?:\s*-+\s*[\d.]+)?\s*(?:;|$)")


@dataclass(frozen=True)
class Book:
    id: str
    title: str
    authors: tuple[str, ...]
    description: str


@dataclass(frozen=True)
class Judged:
    kind: str
    query: str  # the text a reader types, or (similar) the id of the book
    grades: dict[int, int]  # catalog row → grade (1, or 2 for a series mate)

    @property
    def top_grade(self) -> int:
        return max(self.grades.values())


def load_books(path: Path) -> list[Book]:
    books = []
    with path.open(encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            books.append(
                Book(row["id"], row["title"], tuple(row["authors"]), row.get("description") or "")
            )
    return books


def series_of(title: str) -> str | None:
    """The series a title names ("discworld" for "Mort (Discworld  #4)"), None without one."""
    m = _MARKER.search(title)
    first = _FIRST.match(m.group(1)) if m else None
    return " ".join(first.group(1).casefold().split()) or None if first else None


def _acceptable(label: Labelled, books: Sequence[Book]) -> dict[int, int]:
    pattern = re.compile(label.title, re.IGNORECASE) if label.title else None
    return {
        row: 1
        for row, b in enumerate(books)
        if (pattern and pattern.search(b.title))
        or (label.author and any(label.author in name for name in b.authors))
    }


def judged_queries(books: Sequence[Book], subjects: Path | None) -> list[Judged]:
    """Every judged query of the suite, over `books` (the catalog's rows, in index order)."""
    rows = {b.id: i for i, b in enumerate(books)}
    out = [
        Judged("names" if q.kind in ("author", "title") else "intents", q.query, grades)
        for q in QUERIES
        if (grades := _acceptable(q, books))
    ]
    out += _intents(books)
    if subjects is not None and subjects.exists():
        with subjects.open(encoding="utf-8") as f:
            for line in f:
                row = json.loads(line)
                grades = {rows[i]: 1 for i in row["relevant"] if i in rows}
                if grades:
                    out.append(Judged("subjects", row["query"], grades))
    out += _similar(books)
    return out


def _intents(books: Sequence[Book]) -> list[Judged]:
    try:
        from benchmarks import intent_queries
    except ImportError:  # pragma: no cover - the set is part of the suite
        return []
    catalog = [
        {"id": b.id, "title": b.title, "authors": list(b.authors), "description": b.description}
        for b in books
    ]
    rows = {b.id: i for i, b in enumerate(books)}
    out = []
    for intent in intent_queries.INTENTS:
        ids = intent_queries.relevant(intent, catalog)
        if ids:
            out.append(Judged("intents", intent.query, {rows[i]: 1 for i in ids}))
    return out


def _similar(books: Sequence[Book]) -> list[Judged]:
    """Series mates grade 2, the authors' other books grade 1; never the book's own other
    editions (benchmarks/relevance_works.py), which are the same book and no answer."""
    from benchmarks.relevance_works import work_of  # it imports Book from here

    works = [work_of(b) for b in books]
    series: dict[str, list[int]] = {}
    for row, b in enumerate(books):
        if (name := series_of(b.title)) is not None:
            series.setdefault(name, []).append(row)
    by_author: dict[str, set[int]] = {}
    for row, b in enumerate(books):
        for name in b.authors:
            by_author.setdefault(name.casefold(), set()).add(row)
    out = []
    for mates in series.values():
        if len(mates) < 2:
            continue
        for row in mates:
            grades = {
                r: 1 for name in books[row].authors for r in by_author[name.casefold()] if r != row
            }
            grades.update({r: 2 for r in mates if r != row})
            grades = {r: g for r, g in grades.items() if works[r] != works[row]}
            if grades:
                out.append(Judged("similar", books[row].id, grades))
    return out


# ---- metrics: `ranked` is a ranking's catalog rows, best first


def ndcg(ranked: Sequence[int], grades: dict[int, int], k: int = 10) -> float:
    dcg = sum((2 ** grades.get(r, 0) - 1) / math.log2(i + 2) for i, r in enumerate(ranked[:k]))
    ideal = sorted(grades.values(), reverse=True)[:k]
    best = sum((2**g - 1) / math.log2(i + 2) for i, g in enumerate(ideal))
    return dcg / best if best else 0.0


def mrr(ranked: Sequence[int], relevant: set[int], k: int = 10) -> float:
    return next((1.0 / (i + 1) for i, r in enumerate(ranked[:k]) if r in relevant), 0.0)


def recall(ranked: Sequence[int], relevant: set[int], k: int = 100) -> float:
    return len(relevant.intersection(ranked[:k])) / len(relevant) if relevant else 0.0


@dataclass(frozen=True)
class Scored:
    """Per query of one kind: nDCG@10, MRR@10, recall@100 and whether the top 10 holds a
    relevant book."""

    ndcg: list[float]
    mrr: list[float]
    recall: list[float]
    hit10: list[bool]

    def means(self) -> dict[str, float]:
        return {
            "ndcg@10": statistics.fmean(self.ndcg),
            "mrr@10": statistics.fmean(self.mrr),
            "recall@100": statistics.fmean(self.recall),
        }


def score(queries: Sequence[Judged], rankings: Sequence[Sequence[int]]) -> Scored:
    nd, mr, rc, hit = [], [], [], []
    for q, ranked in zip(queries, rankings, strict=True):
        relevant = {r for r, g in q.grades.items() if g == q.top_grade}
        nd.append(ndcg(ranked, q.grades))
        mr.append(mrr(ranked, relevant))
        rc.append(recall(ranked, relevant))
        hit.append(any(r in q.grades for r in ranked[:10]))
    return Scored(nd, mr, rc, hit)


def bootstrap(
    a: Sequence[float], b: Sequence[float], *, n: int = 10_000, seed: int = 0
) -> tuple[float, float]:
    """Paired bootstrap 95% interval of mean(a) − mean(b) over queries: (low, high)."""
    d = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
    picks = np.random.default_rng(seed).integers(0, len(d), size=(n, len(d)))
    means = d[picks].mean(axis=1)
    return float(np.quantile(means, 0.025)), float(np.quantile(means, 0.975))
