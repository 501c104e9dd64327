"""The relevance suite: Attend's rankings beside the hybrids a user could pick instead, on the
shared catalog and the same model, per kind of query (benchmarks/relevance_labels.py).

    .venv/bin/python -m benchmarks.relevance                 # the table
    .venv/bin/python -m benchmarks.relevance --json out.json # and every figure, per query too
    .venv/bin/python -m benchmarks.relevance --kinds topical,junk  # only some kinds

Indexes the shared catalog into the database first when it holds no books. Kinds: names,
subjects, intents, similar (benchmarks/relevance_labels.py); topical, recommend and the junk
audit (books as the query, labelled by subject headings: benchmarks/relevance_books.py);
topical_dev (../shared/data/similar_topical_dev.jsonl with the reader's baseline of
../shared/data/README.md: benchmarks/relevance_reader.py); genre (genre-and-audience queries:
benchmarks/relevance_genre.py); authors and traps (benchmarks/relevance_authors.py).
`--kinds` runs only those named (the default: all). `--no-stemming` runs the same suite with
PyStemmer's English stemmer replaced by the identity (the lexical heads and `bm25` read whole
words), its served form built apart: the A/B of stemming. Rows:

- `attend`: the service's defaults (ATTEND_HEADS for a search, ATTEND_SIMILAR_HEADS for more
  like this), through the service's own code (Searcher, book_ranking.similar);
- `title`, `description`, `lexical`: each head alone, through the same code;
- `dense`: cosine over one embedding of "title. description" per book (the plain dense search);
- `bm25`: bm25s over title, authors and description, each once (stemmed, stop words dropped);
- `rrf`: reciprocal-rank fusion (k = 60) of `dense` and `bm25`, over their top 1,000;
- for topical_dev only, in place of the last three: `dense_td`, `bm25_td` (unstemmed, the
  book's whole "<title>. <description>" as the query) and `rrf_td`, as the README defines them.

For more like this (similar, topical, the junk audit), the book is the query: its own keys (or
embedding) and, for BM25, its title and authors (Attend's lexical head) or its whole text
(`bm25`). For recommend, two liked books are: Attend's book_ranking.recommend with the similar
heads, `dense` the normalised mean of their embeddings, `bm25` the sum of their documents'
scores, and every row's ranking loses the liked authors' books before it is scored
("recommend beyond the liked authors").

Columns per kind: nDCG@10, MRR@10, recall@100, and `buried`: queries where a head alone had a
relevant book in its top 10 and `attend` had none. Then a paired bootstrap 95% interval of
attend − rrf in nDCG@10 per kind (attend − rrf_td for topical_dev, with attend − dense_td and
the binary nDCG@10's intervals beside it; a difference counts only when the interval excludes
0), the match strength behind `no_strong_match` on the labelled queries against nonsense ones
(when names, subjects or intents run), and what the reader sees (benchmarks/relevance_works.py):
per kind and row, the distinct works in the top 10 and the share of top 10s holding two
editions of one work; for recommend, each pair's top 10 as the service answers by default
(the liked authors kept) and the share of it by the liked authors. For authors, per row: the
share of the queries naming an author with 5 or more books whose top 5 holds 4 of them, and of
the "about X" queries whose first result is about X. The junk audit prints, per row, the mean
share of the top 5 related to the book in no way.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from benchmarks.relevance_authors import AuthorQuery, author_queries, checks, trap_queries
from benchmarks.relevance_books import Catalog, audited, junk, pairs, topical
from benchmarks.relevance_genre import genre_queries
from benchmarks.relevance_labels import (
    KINDS,
    Book,
    Judged,
    bootstrap,
    judged_queries,
    score,
)
from benchmarks.relevance_queries import NONSENSE, OFF_TOPIC
from benchmarks.relevance_rank import (
    ROWS,
    SLOTS,
    Baselines,
    Rankings,
    buried,
    recommend_rankings,
    rrf,
    search_rankings,
    served_recommend,
    similar_rankings,
    top,
)
from benchmarks.relevance_reader import FILE, ReaderBaselines, binary_ndcg, topical_dev
from benchmarks.relevance_report import Figures, as_json, report
from benchmarks.relevance_served import ROOT, SHARED, serve, suite_arguments
from benchmarks.relevance_works import Works
from models.keys import LocalKeys
from service.engine.served_index import RANK_FIELD
from service.engine.tickets import SearchOptions

__all__ = ["Baselines", "main", "rrf", "top"]  # relevance_tune's

logger = logging.getLogger(__name__)

ALL_KINDS = (*KINDS, "genre", "topical", "topical_dev", "recommend", "authors", "traps", "junk")


def _kinds(value: str) -> list[str]:
    kinds = [k.strip() for k in value.split(",") if k.strip()]
    unknown = sorted(set(kinds) - set(ALL_KINDS))
    if unknown or not kinds:
        raise argparse.ArgumentTypeError(f"kinds are {', '.join(ALL_KINDS)}; not {unknown}")
    return [k for k in ALL_KINDS if k in kinds]


class _Unstemmed:
    """PyStemmer's interface, each word as it is."""

    def stemWord(self, word: str) -> str:  # noqa: N802  (PyStemmer's names)
        return word

    def stemWords(self, words: Sequence[str]) -> list[str]:  # noqa: N802
        return list(words)


def _without_stemming() -> None:
    """Every stemmer made from here on the identity (the service's tokenizers make theirs when
    an index is built), and the served form in a folder of this run's: a form of stemmed
    postings must not be read."""
    import os
    import tempfile

    import Stemmer

    Stemmer.Stemmer = lambda *_, **__: _Unstemmed()
    os.environ["ATTEND_SERVED_DIR"] = tempfile.mkdtemp(prefix="attend-unstemmed-")


def main(argv: list[str] | None = None) -> int:  # noqa: PLR0915
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    suite_arguments(parser)
    parser.add_argument("--topical-dev", type=Path, default=SHARED / FILE)
    parser.add_argument("--kinds", type=_kinds, default=list(ALL_KINDS), help="comma-separated")
    parser.add_argument("--json", type=Path, help="also write every figure here")
    parser.add_argument("--no-stemming", action="store_true", help="words unstemmed (an A/B)")
    args = parser.parse_args(argv)
    if args.no_stemming:
        _without_stemming()
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    results = ROOT / "benchmarks" / "results"
    results.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()

    suite = serve(args.database_url, args.catalog)
    settings, searcher, books = suite.settings, suite.searcher, suite.books
    index = searcher.index
    row_of = {b.id: i for i, b in enumerate(books)}
    base = Baselines(books, searcher.encoder, results)
    assert isinstance(index.keys, LocalKeys)  # the suite runs in one process
    works = Works(books, index.keys.host()[RANK_FIELD])
    kinds: list[str] = args.kinds
    old = judged_queries(books, args.subjects) if set(kinds) & set(KINDS) else []
    queries = {k: [q for q in old if q.kind == k] for k in kinds}
    catalog = Catalog(books, args.subjects)
    named = author_queries(books)
    figures = Figures(len(books))
    for kind in kinds:
        if kind == "junk":
            audit = audited(catalog)
            rankings = similar_rankings(index, settings.similar, base, audit)
            rows = [catalog.row[q.query] for q in audit]
            figures.junk = {row: junk(catalog, rows, rankings[row]) for row in ROWS}
            continue
        if kind == "recommend":
            liked = pairs(catalog)
            qs: list[Judged] = list(liked)
            rankings = recommend_rankings(index, settings.recommend, base, liked)
            served = served_recommend(index, settings.recommend, base, liked)
            _as_served(figures, works, [p.liked for p in liked], served)
        elif kind == "topical_dev":
            qs = topical_dev(args.topical_dev, row_of)
            rankings = similar_rankings(index, settings.similar, base, qs)
            rankings = _reader_rows(rankings, books, base, [row_of[q.query] for q in qs])
            figures.binary[kind] = {
                row: binary_ndcg(qs, r) for row, r in rankings.items() if row != SLOTS
            }
        elif kind in {"similar", "topical"}:
            qs = topical(catalog) if kind == "topical" else queries[kind]
            rankings = similar_rankings(index, settings.similar, base, qs)
        else:
            qs = _searched(kind, queries, named, books, args.catalog)
            rankings = search_rankings(searcher, base, qs)
        if kind == "authors":
            figures.author_checks = checks(named, {r: v for r, v in rankings.items() if r != SLOTS})
        if not qs:
            continue
        # Attend is scored as read (each work's editions under its slot: relevance_rank's
        # as_read), and its works counted over its slots, which is what the reader sees
        slots = rankings.pop(SLOTS, None)
        figures.table[kind] = {row: score(qs, rankings[row]) for row in rankings}
        figures.counts[kind] = len(qs)
        figures.buried[kind] = buried(qs, rankings)
        shown = rankings | ({"attend": slots} if slots is not None else {})
        figures.works[kind] = {row: works.figures(shown[row]) for row in rankings}
    if set(kinds) & {"names", "subjects", "intents"}:
        labelled = [q.query for q in old if q.kind != "similar"]
        figures.strengths = {
            name: [
                (r.match_strength, r.no_strong_match)
                for r in searcher.search_now(qs, SearchOptions(k=1))
            ]
            for name, qs in (
                ("labelled", labelled),
                ("nonsense", NONSENSE),
                ("off_topic", OFF_TOPIC),
            )
        }
    suite.engine.dispose()
    _intervals(figures)
    sys.stdout.write(report(settings, figures) + f"\n({time.perf_counter() - t0:.0f} s)\n")
    if args.json:
        args.json.write_text(json.dumps(as_json(settings, figures)) + "\n")
    return 0


def _searched(
    kind: str,
    queries: dict[str, list[Judged]],
    named: list[tuple[AuthorQuery, Judged]],
    books: Sequence[Book],
    catalog: Path,
) -> list[Judged]:
    """The typed queries of a search kind."""
    if kind == "authors":
        return [j for _, j in named]
    if kind == "traps":
        return trap_queries(books)
    if kind == "genre":
        return genre_queries(books, catalog)
    return queries[kind]


def _as_served(
    f: Figures, works: Works, liked: list[tuple[int, int]], served: dict[str, Rankings]
) -> None:
    """Recommend's top 10s as the service answers by default: the liked authors' share and
    the distinct works, per row."""
    f.served_per_pair = {row: works.liked_share(liked, ranked) for row, ranked in served.items()}
    f.served = {
        row: {"liked_authors@10": statistics.fmean(f.served_per_pair[row])} | works.figures(r)
        for row, r in served.items()
    }
    f.example = works.example(served["attend"])


def _reader_rows(
    rankings: dict[str, Rankings], books: Sequence[Book], base: Baselines, rows: list[int]
) -> dict[str, Rankings]:
    """Attend's rows and the heads', with the README's baseline in place of the suite's."""
    reader = ReaderBaselines(books, base.embeddings)
    kept = {row: r for row, r in rankings.items() if row not in {"dense", "bm25", "rrf"}}
    return kept | reader.rankings(rows)


def _intervals(f: Figures) -> None:
    """attend − rrf (rrf_td for topical_dev) per kind; for topical_dev also − dense_td, and
    both in binary nDCG@10."""
    for kind, rows in f.table.items():
        versus = "rrf_td" if "rrf_td" in rows else "rrf"
        f.intervals[kind] = (versus, *_paired(rows["attend"].ndcg, rows[versus].ndcg))
    for kind, binary in f.binary.items():
        graded = f.table[kind]
        f.versus[kind] = {
            "graded − dense_td": _paired(graded["attend"].ndcg, graded["dense_td"].ndcg),
            "binary − rrf_td": _paired(binary["attend"], binary["rrf_td"]),
            "binary − dense_td": _paired(binary["attend"], binary["dense_td"]),
        }


def _paired(a: list[float], b: list[float]) -> tuple[float, float, float]:
    """(mean of a − b, low, high of its paired bootstrap 95% interval)."""
    return (statistics.fmean(a) - statistics.fmean(b), *bootstrap(a, b))


if __name__ == "__main__":
    raise SystemExit(main())
