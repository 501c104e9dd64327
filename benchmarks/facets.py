"""What facets cost a search, in one process, in turns: a plain search (k = 10), the same with
`sort=-year` (which ranks the relevant books, SORT_POOL at most, as facets do), and with every
facet (`facets=author,year,language,subjects,series`), one query at a time and in batches.

    .venv/bin/python -m benchmarks.facets --database-url sqlite:////tmp/g/books-1000000.db

The index is any indexed database (benchmarks/growth_catalog.py makes synthetic ones of any
size). Each round asks queries never asked before (no query cache), the three kinds in turns on
texts of the same length. The table gives each kind's median ms a query and its ratio to the
plain search: facets read the ranked books only, so they should cost what the sort's wider
ranking costs and little more.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from benchmarks._common import dump_json, log, out, run_as_the_service, table
from benchmarks.queries import ANGLES, QUERIES

KINDS = ("plain", "sort", "facets")


def measure(url: str, batch: int, rounds: int) -> dict[str, Any]:
    from sqlalchemy import create_engine

    from service.commands.threads import apply_serve_threads
    from service.config.settings import ServiceSettings
    from service.engine.facets import FACETS
    from service.engine.reloader import freeze_long_lived
    from service.engine.startup import build_searcher
    from service.engine.tickets import SearchOptions

    settings = ServiceSettings(database_url=url)
    apply_serve_threads(settings)
    engine = create_engine(url)
    t0 = time.perf_counter()
    searcher = build_searcher(settings, engine=engine)
    freeze_long_lived()
    log(f"loaded {len(searcher.index)} books in {time.perf_counter() - t0:.1f} s")
    options = {
        "plain": SearchOptions(k=10),
        "sort": SearchOptions(k=10, sort="-year"),
        "facets": SearchOptions(k=10, facets=FACETS),
    }
    texts = [f"{q} ({angle})" for angle in ANGLES for q in QUERIES]
    searcher.search_now(texts[-1:], options["facets"])  # BLAS choice, first touch
    ms: dict[str, list[float]] = {kind: [] for kind in KINDS}
    counted = []
    for r in range(max(1, min(rounds, len(texts) // batch))):
        part = texts[r * batch : (r + 1) * batch]
        for i, kind in enumerate(KINDS[r % 3 :] + KINDS[: r % 3]):  # each kind first in turn
            asked = [f"{t}{'?.!'[i]}" for t in part]  # never asked: no encoder cache
            t0 = time.perf_counter()
            answers = searcher.search_now(asked, options[kind])
            ms[kind].append((time.perf_counter() - t0) * 1000 / len(asked))
            if kind == "facets":
                counted += [a.facets["author"].books for a in answers if a.facets]
        log(f"round {r}: " + ", ".join(f"{k} {v[-1]:.1f} ms" for k, v in ms.items()))
    p50 = {kind: statistics.median(v) for kind, v in ms.items()}
    return {
        "books": len(searcher.index),
        "batch": batch,
        "rounds": len(ms["plain"]),
        "ms_per_query": p50,
        "relevant_books_median": statistics.median(counted) if counted else 0,
    }


def main() -> None:
    run_as_the_service()
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 32])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results = [measure(args.database_url, b, args.rounds) for b in args.batches]
    rows = []
    for res in results:
        p50 = res["ms_per_query"]
        rows.append(
            [
                f"{res['books']:,}",
                str(res["batch"]),
                *(f"{p50[k]:.1f}" for k in KINDS),
                f"{p50['sort'] / p50['plain']:.2f}×",
                f"{p50['facets'] / p50['plain']:.2f}×",
                f"{p50['facets'] / p50['sort']:.2f}×",
                f"{res['relevant_books_median']:g}",
            ]
        )
    out(
        table(
            [
                "books",
                "B",
                "plain ms/q",
                "sort ms/q",
                "facets ms/q",
                "sort / plain",
                "facets / plain",
                "facets / sort",
                "relevant books (median)",
            ],
            rows,
        )
    )
    if args.json:
        dump_json({"results": results})


if __name__ == "__main__":
    main()
