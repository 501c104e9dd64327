"""The relevance suite: Attend's rankings beside the hybrids a user could pick instead, on the
shared catalog and the same model, per kind of query (benchmarks/relevance_labels.py).

    .venv/bin/python -m benchmarks.relevance                 # the table
    .venv/bin/python -m benchmarks.relevance --json out.json # and every figure, per query too
    .venv/bin/python -m benchmarks.relevance --kinds topical,junk  # only some kinds

Indexes the shared catalog into the database first when it holds no books. Kinds: names,
subjects, intents, similar (benchmarks/relevance_labels.py); topical, recommend and the junk
audit (books as the query, labelled by subject headings: benchmarks/relevance_books.py);
authors and traps (benchmarks/relevance_authors.py). `--kinds` runs only those named (the
default: all). Rows:

- `attend`: the service's defaults (ATTEND_HEADS for a search, ATTEND_SIMILAR_HEADS for more
  like this), through the service's own code (Searcher, book_ranking.similar);
- `title`, `description`, `lexical`: each head alone, through the same code;
- `dense`: cosine over one embedding of "title. description" per book (the plain dense search);
- `bm25`: bm25s over title, authors and description, each once (stemmed, stop words dropped);
- `rrf`: reciprocal-rank fusion (k = 60) of `dense` and `bm25`, over their top 1,000.

For more like this (similar, topical, the junk audit), the book is the query: its own keys (or
embedding) and, for BM25, its title and authors (Attend's lexical head) or its whole text
(`bm25`). For recommend, two liked books are: Attend's book_ranking.recommend with the similar
heads, `dense` the normalised mean of their embeddings, `bm25` the sum of their documents'
scores, and every row's ranking loses the liked authors' books before it is scored.

Columns per kind: nDCG@10, MRR@10, recall@100, and `buried`: queries where a head alone had a
relevant book in its top 10 and `attend` had none. Then a paired bootstrap 95% interval of
attend − rrf in nDCG@10 per kind (a difference counts only when the interval excludes 0), and
the match strength behind `no_strong_match` on the labelled queries against nonsense ones
(when names, subjects or intents run). For authors, per row: the share of the queries naming
an author with 5 or more books whose top 5 holds 4 of them, and of the "about X" queries whose
first result is about X. The junk audit prints, per row, the mean share of the top 5 related
to the book in no way.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

from sqlalchemy.orm import Session

from benchmarks.relevance_authors import author_queries, checks, trap_queries
from benchmarks.relevance_books import Catalog, audited, junk, pairs, topical
from benchmarks.relevance_labels import KINDS, Judged, bootstrap, judged_queries, load_books, score
from benchmarks.relevance_queries import NONSENSE
from benchmarks.relevance_rank import (
    ROWS,
    Baselines,
    buried,
    recommend_rankings,
    rrf,
    search_rankings,
    similar_rankings,
    top,
)
from benchmarks.relevance_report import Figures, report
from indexer import db, pipeline, store
from indexer.settings import IndexSettings
from service.engine.searcher import SearchOptions
from service.engine.startup import build_encoder, build_searcher
from service.settings import ServiceSettings

__all__ = ["SHARED", "Baselines", "ensure_index", "main", "rrf", "top"]  # relevance_tune's

logger = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"
ALL_KINDS = (*KINDS, "topical", "recommend", "authors", "traps", "junk")


def ensure_index(database_url: str, catalog: Path) -> None:
    engine = db.create_db_engine(database_url)
    db.upgrade(engine)
    with Session(engine) as session:
        empty = store.count_books(session=session) == 0
    if empty:
        settings = IndexSettings(database_url=database_url)
        pipeline.run(settings, engine=engine, encoder=build_encoder(settings), path=catalog)
    engine.dispose()


def _kinds(value: str) -> list[str]:
    kinds = [k.strip() for k in value.split(",") if k.strip()]
    unknown = sorted(set(kinds) - set(ALL_KINDS))
    if unknown or not kinds:
        raise argparse.ArgumentTypeError(f"kinds are {', '.join(ALL_KINDS)}; not {unknown}")
    return [k for k in ALL_KINDS if k in kinds]


def main(argv: list[str] | None = None) -> int:  # noqa: PLR0915
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database-url", default="sqlite:///benchmarks/results/books.db")
    parser.add_argument("--catalog", type=Path, default=SHARED / "books.jsonl")
    parser.add_argument("--subjects", type=Path, default=SHARED / "subject_queries.jsonl")
    parser.add_argument("--kinds", type=_kinds, default=list(ALL_KINDS), help="comma-separated")
    parser.add_argument("--json", type=Path, help="also write every figure here")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    results = ROOT / "benchmarks" / "results"
    results.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()

    ensure_index(args.database_url, args.catalog)
    settings = ServiceSettings(database_url=args.database_url, device="cpu")
    engine = db.create_db_engine(args.database_url)
    searcher = build_searcher(settings, engine=engine)
    index = searcher.index
    by_id = {b.id: b for b in load_books(args.catalog)}
    books = [by_id[i] for i in index.books.ids]
    base = Baselines(books, searcher.encoder, results)
    kinds: list[str] = args.kinds
    queries: dict[str, list[Judged]] = {k: [] for k in kinds}
    old = judged_queries(books, args.subjects) if set(kinds) & set(KINDS) else []
    for q in old:
        if q.kind in queries:
            queries[q.kind].append(q)
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
            rankings = recommend_rankings(index, settings.similar, base, liked)
        elif kind in {"similar", "topical"}:
            qs = topical(catalog) if kind == "topical" else queries[kind]
            rankings = similar_rankings(index, settings.similar, base, qs)
        else:
            qs = queries[kind]
            if kind in {"authors", "traps"}:
                qs = [j for _, j in named] if kind == "authors" else trap_queries(books)
            rankings = search_rankings(searcher, base, qs)
        if kind == "authors":
            figures.author_checks = checks(named, rankings)
        if not qs:
            continue
        figures.table[kind] = {row: score(qs, rankings[row]) for row in ROWS}
        figures.counts[kind] = len(qs)
        figures.buried[kind] = buried(qs, rankings)
    if set(kinds) & {"names", "subjects", "intents"}:
        labelled = [q.query for q in old if q.kind != "similar"]
        figures.strengths = {
            name: [
                (r.match_strength, r.no_strong_match)
                for r in searcher.search_now(qs, SearchOptions(k=1))
            ]
            for name, qs in (("labelled", labelled), ("nonsense", NONSENSE))
        }
    engine.dispose()
    figures.intervals = {
        kind: bootstrap(rows["attend"].ndcg, rows["rrf"].ndcg)
        for kind, rows in figures.table.items()
    }
    sys.stdout.write(report(settings, figures) + f"\n({time.perf_counter() - t0:.0f} s)\n")
    if args.json:
        args.json.write_text(json.dumps(_as_json(settings, figures)) + "\n")
    return 0


def _as_json(settings: ServiceSettings, f: Figures) -> dict[str, object]:
    return {
        "catalog_size": f.size,
        "defaults": {
            "heads": settings.heads,
            "head_scales": settings.head_scales,
            "similar_heads": settings.similar_heads,
            "similar_head_scales": settings.similar_head_scales,
        },
        "queries": f.counts,
        "means": {k: {r: s.means() for r, s in rows.items()} for k, rows in f.table.items()},
        "per_query": {k: {r: s.ndcg for r, s in rows.items()} for k, rows in f.table.items()},
        "buried": f.buried,
        "attend_minus_rrf_ndcg_95": f.intervals,
        "match_strength": f.strengths,
        "author_checks": f.author_checks,
        "junk_top5_share": {row: sum(s) / len(s) for row, s in f.junk.items()},
        "junk_per_book": f.junk,
    }


if __name__ == "__main__":
    raise SystemExit(main())
