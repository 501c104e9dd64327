"""What a reader sees for books no benchmark judges: the top 5 similar books of standalone books
(no series, no other book by their principal authors) held by none of the suite's sets, and a
recommendation for pairs of liked books by prolific authors, as the service answers by default.

    .venv/bin/python -m benchmarks.unjudged_lists              # 10 books, 2 pairs
    .venv/bin/python -m benchmarks.unjudged_lists --books 20

The books are the most-rated standalone books of the shared catalog (the ones a reader is
likeliest to ask about) that are in neither the suite's topical nor junk-audit sets nor
../shared/data/similar_topical_dev.jsonl; the pairs are the two most prolific authors' most
rated books, then the next two. Indexes the shared catalog into the database first when it
holds no books (benchmarks/relevance.py's). Prints to stdout: a list to read, not a figure.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections import Counter
from pathlib import Path

from benchmarks._common import out
from benchmarks.relevance_books import Catalog, audited, topical
from benchmarks.relevance_reader import FILE
from benchmarks.relevance_served import SHARED, serve, suite_arguments
from service.engine import book_ranking


def _ratings(catalog: Path) -> dict[str, int]:
    counts = {}
    with catalog.open(encoding="utf-8") as lines:
        for line in lines:
            book = json.loads(line)
            counts[book["id"]] = int(book.get("ratings_count") or 0)
    return counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    suite_arguments(parser)
    parser.add_argument("--topical-dev", type=Path, default=SHARED / FILE)
    parser.add_argument("--books", type=int, default=10)
    parser.add_argument("--pairs", type=int, default=2)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)

    served = serve(args.database_url, args.catalog)
    settings, searcher, books = served.settings, served.searcher, served.books
    index = searcher.index
    catalog = Catalog(books, args.subjects)
    judged = {q.query for q in [*topical(catalog), *audited(catalog)]}
    with args.topical_dev.open(encoding="utf-8") as lines:
        judged |= {json.loads(line)["id"] for line in lines if line.strip()}
    ratings = _ratings(args.catalog)
    free = [r for r in range(len(books)) if catalog.standalone(r) and books[r].id not in judged]
    free.sort(key=lambda r: -ratings.get(books[r].id, 0))
    for r in free[: args.books]:
        found = book_ranking.similar(index, books[r].id, k=5, heads=settings.similar)
        flag = ", no strong match" if found.no_strong_match else ""
        out(
            f"\n{books[r].title} ({', '.join(books[r].authors[:1])}): match strength "
            f"{found.match_strength:.3f}{flag}"
        )
        for hit in found.results:
            authors = ", ".join(hit.book.authors[:1])
            out(
                f"  {hit.rank}. {hit.book.title} ({authors})  weight {hit.weight:.4f} "
                f"(by weight #{hit.relevance_rank}), cosine {hit.score:.2f}"
            )

    by_author = Counter(a for b in books for a in b.authors[:1])
    prolific = [a for a, _ in by_author.most_common(2 * args.pairs)]
    for first, second in zip(prolific[0::2], prolific[1::2], strict=True):
        liked = [
            max((b for b in books if b.authors[:1] == (a,)), key=lambda b: ratings.get(b.id, 0))
            for a in (first, second)
        ]
        rec = book_ranking.recommend(
            index, [b.id for b in liked], [], k=10, heads=settings.recommend
        )
        out(f"\nliked: {' + '.join(f'{b.title} ({b.authors[0]})' for b in liked)}")
        out(f"  match strength {rec.match_strength:.3f}")
        for got in rec.results:
            authors = ", ".join(got.book.authors[:1])
            out(f"  {got.rank}. {got.book.title} ({authors})  weight {got.weight:.4f}")
        out(f"  held back: {rec.held_back} by the liked authors")
    searcher.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
