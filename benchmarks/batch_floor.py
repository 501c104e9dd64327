"""A batch of searches against its floor, in one process, in turns: does a batch of B queries
cost what its encoder call and one exact attend per head cost, or B single queries?

    .venv/bin/python -m benchmarks.batch_floor --database-url sqlite:////tmp/books-100k.db

The index is any indexed database (benchmarks/growth_catalog.py makes synthetic ones of any
size). Per round, in turns on the same queries (never asked before, so no query cache): the
searcher's `search_now` on one query at a time and on the B queries at once, then the floor:
the service's encoder on the B queries and one `attend` of the B queries over the served keys
per dense head (k = 10), the passes every search makes whatever else it does. A batch that
shared nothing over the catalog costs B single queries; one that shared every pass reaches its
floor. The table gives q/s of each and the searcher's q/s over the floor's.

Before the rounds, `--warm` batches of B other texts run unmeasured, as a service's first
requests do: a batch's first runs fault in the pages of its large buffers and grow the
allocator's heap (at 1M books the first batch took about twice as long as the fifth); the
log gives their seconds.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Any

from benchmarks._common import dump_json, log, out, run_as_the_service, table
from benchmarks.queries import ANGLES, QUERIES
from service.config.head_weights import DENSE_HEADS


def _seconds(run: Any) -> float:
    t0 = time.perf_counter()
    run()
    return time.perf_counter() - t0


def measure(
    url: str, batch: int, rounds: int, *, warm: int = 3, profile: bool = False
) -> dict[str, Any]:
    from sqlalchemy import create_engine

    from models.attention import attend
    from service.commands.threads import apply_serve_threads
    from service.config.settings import ServiceSettings
    from service.engine.reloader import freeze_long_lived
    from service.engine.startup import build_searcher
    from service.engine.tickets import SearchOptions

    settings = ServiceSettings(database_url=url)
    apply_serve_threads(settings)
    engine = create_engine(url)
    t0 = time.perf_counter()
    searcher = build_searcher(settings, engine=engine)
    freeze_long_lived()  # as the service does once its index is loaded
    log(f"loaded {len(searcher.index)} books in {time.perf_counter() - t0:.1f} s")
    index, encoder = searcher.index, searcher.encoder
    field_keys = [index.keys.by_field[h] for h in DENSE_HEADS]  # (N, d) each, as served
    texts = [f"{q} ({angle})" for angle in ANGLES for q in QUERIES]
    options = SearchOptions(k=10)
    searcher.search_now(texts[-1:], options)  # BLAS choice, first touch
    for w in range(warm):  # texts never measured: each a round's with a mark of its own
        warm_s = _seconds(
            lambda w=w: searcher.search_now([f"{t} ({w})" for t in texts[:batch]], options)
        )
        log(f"warm-up batch {w}: {warm_s:.3f} s")
    rows = []
    rounds = max(1, min(rounds, len(texts) // batch))  # no text asked twice
    for r in range(rounds):
        part = texts[r * batch : (r + 1) * batch]
        ones = [f"{t}?" for t in part]  # as many texts, none the batch's
        single = sum(_seconds(lambda t=t: searcher.search_now([t], options)) for t in ones)
        together = _seconds(lambda p=part: searcher.search_now(p, options))
        other = [f"{t}." for t in part]  # the encoder's cache never holds them

        def floor(other: list[str] = other) -> None:
            q = encoder.encode(other)
            for kf in field_keys:
                attend(q, kf, k=10, scale=20.0)

        floor_s = _seconds(floor)
        rows.append(
            {
                "single_qps": batch / single,
                "batch_qps": batch / together,
                "floor_qps": batch / floor_s,
            }
        )
        log(f"round {r}: {rows[-1]}")
    if profile:
        import cProfile
        import pstats

        part = texts[:batch]
        searcher.cache._vectors.clear()
        with cProfile.Profile() as prof:
            searcher.search_now(part, options)
        stats = pstats.Stats(prof).sort_stats(os.environ.get("SORT", "cumulative"))
        stats.print_stats(int(os.environ.get("LINES", "40")))
        if callers := os.environ.get("CALLERS"):
            stats.print_callers(callers)
    med = {k: statistics.median(row[k] for row in rows) for k in rows[0]}
    return {
        "books": len(index),
        "B": batch,
        **med,
        "batch_over_floor": med["batch_qps"] / med["floor_qps"],
        "single_over_floor": med["single_qps"] / med["floor_qps"],
        "rounds": rows,
    }


def main() -> None:
    run_as_the_service()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warm", type=int, default=3, help="unmeasured batches first")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    res = measure(args.database_url, args.batch, args.rounds, warm=args.warm, profile=args.profile)
    if args.json:
        dump_json(res)
        return
    out(
        table(
            ["books", "B", "single q/s", "batch q/s", "floor q/s", "batch/floor"],
            [
                [
                    str(res["books"]),
                    str(res["B"]),
                    f"{res['single_qps']:.1f}",
                    f"{res['batch_qps']:.1f}",
                    f"{res['floor_qps']:.1f}",
                    f"{res['batch_over_floor']:.2f}",
                ]
            ],
        )
    )


if __name__ == "__main__":
    main()
