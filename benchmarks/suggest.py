"""`GET /suggest`'s engine at a catalog's size, against the simple thing: a scan of every
title, folded once beforehand, for the titles that hold the query's words (its last as a
prefix), sorted by readers. Prefixes are cut from the catalog's own titles and names (2 to 8
characters of a word, after none or one whole word), timed in turns, the same queries each way:
the scan, the word index's first 16 titles (what a page of 8 works reads), and the route's
whole work (8 works and 8 authors). Each query's full match list is checked equal to the
scan's.

    .venv/bin/python -m benchmarks.suggest --database-url sqlite:////tmp/g/books-100000.db
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from typing import Any

from benchmarks._common import dump_json, log, out, table


def _queries(titles: list[str], names: list[str], n: int, seed: int) -> list[str]:
    from models.text import fold

    rng = random.Random(seed)
    found: list[str] = []
    while len(found) < n:
        words = fold(rng.choice(titles if rng.random() < 0.7 else names))
        if not words:
            continue
        start = rng.randrange(len(words))
        whole = words[start : start + rng.choice((0, 1))]
        word = words[min(start + len(whole), len(words) - 1)]
        cut = word[: rng.randint(2, 8)]
        if len(cut) >= 2:
            found.append(" ".join([*whole, cut]))
    return found


def measure(url: str, n: int, seed: int) -> dict[str, Any]:
    from sqlalchemy import create_engine

    from models.text import fold
    from service.config.settings import ServiceSettings
    from service.engine.startup import build_searcher
    from service.engine.suggestions import Suggester

    searcher = build_searcher(ServiceSettings(database_url=url), engine=create_engine(url))
    index = searcher.index
    t0 = time.perf_counter()
    suggester = Suggester(index)
    built = time.perf_counter() - t0
    t0 = time.perf_counter()
    folded = [fold(t) for t in index.books.titles]  # the scan's one-time work
    folded_s = time.perf_counter() - t0
    queries = _queries(index.books.titles, suggester.names, n, seed)
    readers = None if index.readers is None else index.readers.cpu().numpy()

    def scan(query: str) -> list[int]:
        *whole, last = fold(query)
        rows = [
            r
            for r, words in enumerate(folded)
            if all(w in words for w in whole) and any(w.startswith(last) for w in words)
        ]
        if readers is not None:
            rows.sort(key=lambda r: (-readers[r], r))
        return rows

    times: dict[str, list[float]] = {"scan": [], "first 16 titles": [], "8 works, 8 authors": []}
    for q in queries:  # in turns
        t0 = time.perf_counter()
        want = scan(q)
        times["scan"].append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        suggester.titles.matches(fold(q), 16)
        times["first 16 titles"].append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        suggester.suggest(q, 8)  # the route's whole work: titles, a work once, and authors
        times["8 works, 8 authors"].append(time.perf_counter() - t0)
        assert suggester.titles.matches(fold(q), len(index)).tolist() == want, q
    return {
        "books": len(index),
        "queries": len(queries),
        "index_build_s": built,
        "scan_fold_s": folded_s,
        "ms": {
            name: {
                "p50": statistics.median(t) * 1e3,
                "p99": sorted(t)[int(0.99 * (len(t) - 1))] * 1e3,
            }
            for name, t in times.items()
        },
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--database-url", required=True)
    p.add_argument("--queries", type=int, default=300)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    log(f"suggest: {args.database_url}")
    result = measure(args.database_url, args.queries, args.seed)
    if args.json:
        dump_json(result)
        return
    out(
        f"{result['books']:,} books, {result['queries']} queries; word indexes made in "
        f"{result['index_build_s']:.2f} s (the scan's folding: {result['scan_fold_s']:.2f} s)"
    )
    rows = [[name, f"{m['p50']:.3f}", f"{m['p99']:.3f}"] for name, m in result["ms"].items()]
    out(table(["method", "p50 ms", "p99 ms"], rows))


if __name__ == "__main__":
    main()
