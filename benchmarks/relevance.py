"""Relevance of head configurations on labelled queries (benchmarks/relevance_queries.py).

    .venv/bin/python -m benchmarks.relevance --database-url sqlite:///benchmarks/results/books.db
    .venv/bin/python -m benchmarks.relevance --json

Indexes the shared catalog into the database first when it holds no books. For each head
configuration, every labelled query is searched in-process (the service's own Searcher, k=10)
and scored: MRR@10 (1/rank of the first acceptable book, 0 when none is in the top 10) and
recall@10 (acceptable books in the top 10 / min(10, acceptable books)), overall and per kind of
query. Then the match strength behind "no strong match" for the labelled queries against
nonsense ones, under the default heads.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import statistics
import sys
from pathlib import Path

from sqlalchemy.orm import Session

from benchmarks.relevance_queries import NONSENSE, QUERIES, Labelled
from indexer import db, pipeline, store
from indexer.settings import IndexSettings
from service.main import build_encoder, build_searcher
from service.schemas import SearchOptions
from service.searcher import NO_STRONG_MATCH_BELOW, Searcher
from service.settings import ServiceSettings

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data" / "books.jsonl"
CONFIGS = [
    "description:1",
    "title:1",
    "lexical:1",
    "title:0.5,description:0.5",
    "description:0.8,lexical:0.2",
    "title:0.2,description:0.6,lexical:0.2",
    "title:0.3,description:0.5,lexical:0.2",
    "title:0.3,description:0.4,lexical:0.3",
    "title:0.4,description:0.4,lexical:0.2",
    "title:1,description:1,lexical:1",
]
K = 10


def acceptable(label: Labelled, titles: list[str], authors: list[list[str]]) -> set[int]:
    pattern = re.compile(label.title, re.IGNORECASE) if label.title else None
    return {
        row
        for row, (title, names) in enumerate(zip(titles, authors, strict=True))
        if (pattern and pattern.search(title))
        or (label.author and any(label.author in n for n in names))
    }


def evaluate(searcher: Searcher, heads: str) -> dict[str, dict[str, float]]:
    ranker = searcher.ranker
    rows = {book_id: i for i, book_id in enumerate(ranker.ids)}
    per_kind: dict[str, list[tuple[float, float]]] = {}
    options = SearchOptions(k=K, heads=heads)
    responses = searcher.search_now([q.query for q in QUERIES], options)
    for label, response in zip(QUERIES, responses, strict=True):
        good = acceptable(label, ranker.titles, ranker.authors)
        ranked = [rows[hit.id] for hit in response.results]
        first = next((r for r, row in enumerate(ranked, 1) if row in good), None)
        rr = 1.0 / first if first else 0.0
        recall = len(good & set(ranked)) / min(K, len(good))
        per_kind.setdefault(label.kind, []).append((rr, recall))
        per_kind.setdefault("all", []).append((rr, recall))
    return {
        kind: {
            "mrr": statistics.fmean(r for r, _ in values),
            "recall": statistics.fmean(r for _, r in values),
        }
        for kind, values in per_kind.items()
    }


def strength(searcher: Searcher, queries: list[str]) -> list[float]:
    """Each query's match strength, log(top weight · matched) / log(matched), under the
    service's default heads (no_strong_match is strength < NO_STRONG_MATCH_BELOW)."""
    responses = searcher.search_now(queries, SearchOptions(k=1))
    return [r.match_strength for r in responses]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database-url", default="sqlite:///benchmarks/results/books.db")
    parser.add_argument("--catalog", type=Path, default=SHARED)
    parser.add_argument("--lexical-scale", type=float, default=1.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    Path("benchmarks/results").mkdir(parents=True, exist_ok=True)

    engine = db.create_db_engine(args.database_url)
    db.upgrade(engine)
    with Session(engine) as session:
        empty = store.count_books(session=session) == 0
    if empty:
        settings = IndexSettings(database_url=args.database_url)
        pipeline.run(settings, engine=engine, encoder=build_encoder(settings), path=args.catalog)
    settings = ServiceSettings(
        database_url=args.database_url, device="cpu", lexical_scale=args.lexical_scale
    )
    searcher = build_searcher(settings, engine=engine)
    results = {heads: evaluate(searcher, heads) for heads in CONFIGS}
    labelled = strength(searcher, [q.query for q in QUERIES])
    nonsense = strength(searcher, NONSENSE)
    engine.dispose()

    if args.json:
        sys.stdout.write(
            json.dumps(
                {
                    "catalog_size": len(searcher.ranker),
                    "queries": len(QUERIES),
                    "lexical_scale": args.lexical_scale,
                    "default_heads": settings.heads,
                    "results": results,
                    "strength": {"labelled": labelled, "nonsense": nonsense},
                }
            )
            + "\n"
        )
        return 0
    kinds = ["all", "author", "title", "description"]
    counts = {k: sum(q.kind == k for q in QUERIES) for k in kinds[1:]}
    lines = [
        f"{len(QUERIES)} labelled queries ({', '.join(f'{n} {k}' for k, n in counts.items())}) "
        f"on {len(searcher.ranker)} books; lexical scale {args.lexical_scale}",
        "",
        f"{'heads':<40}" + "".join(f"{k + ' MRR':>16}{'R@10':>7}" for k in kinds),
    ]
    for heads, by_kind in results.items():
        cells = "".join(f"{by_kind[k]['mrr']:>16.3f}{by_kind[k]['recall']:>7.3f}" for k in kinds)
        lines.append(f"{heads:<40}{cells}")
    lines += [
        "",
        f"match strength under the default heads ({settings.heads}); no strong match below "
        f"{NO_STRONG_MATCH_BELOW}:",
        f"  labelled queries: min {min(labelled):.2f}, median {statistics.median(labelled):.2f}",
        f"  nonsense queries: {', '.join(f'{s:.2f}' for s in nonsense)} ({NONSENSE})",
    ]
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
