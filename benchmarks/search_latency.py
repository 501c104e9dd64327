"""Index a catalog, serve it on loopback, and time GET /search one request at a time.

    .venv/bin/python -m benchmarks.search_latency                      # the shared catalog
    .venv/bin/python -m benchmarks.search_latency --catalog indexer/data/demo_books.jsonl --json

Prints the indexing run (books/s; a rerun on the same database embeds nothing), the latency of
GET /search over HTTP (p50/p95/p99) for queries never asked before and for repeated ones (the
query cache skips the encoder), and the two stages inside a search measured in-process in the
same run: the query encoder, and the ranking the searcher runs on its embedding (`rank_queries`:
the default heads' mixture, title, description and lexical, exact top 10 over the whole catalog,
no filters).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import time
from pathlib import Path

import httpx
from sqlalchemy.orm import Session

from benchmarks.queries import QUERIES, percentile, unique_queries
from benchmarks.service import Server
from indexer import db, pipeline
from indexer.data import DEMO_CATALOG
from indexer.filters import Filters
from indexer.settings import IndexSettings
from service.config.settings import ServiceSettings
from service.engine.query_ranking import rank_queries
from service.engine.startup import LocalPlacement, build_encoder, load_served

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data" / "books.jsonl"


def index(catalog: Path, url: str) -> dict[str, float]:
    settings = IndexSettings(database_url=url)
    engine = db.create_db_engine(url)
    encoder = build_encoder(settings)  # as `attend index` does: ONNX Runtime on the CPU
    try:
        report = pipeline.run(settings, engine=engine, encoder=encoder, path=catalog)
    finally:
        engine.dispose()
    return {
        "books": report.books,
        "embedded": report.embedded,
        "seconds": report.seconds,
        "books_per_s": report.books_per_second,
    }


def http_latency(url: str, rounds: int) -> dict[str, dict[str, float]]:
    """GET /search one request at a time: each of 200 distinct queries once (the encoder runs),
    then `rounds` passes over 20 queries already asked (the query cache answers)."""
    server = Server(url, {})
    try:
        server.wait_ready()
        with httpx.Client(base_url=server.base, timeout=30) as client:

            def timed(q: str) -> float:
                t0 = time.perf_counter()
                client.get("/search", params={"q": q}).raise_for_status()
                return (time.perf_counter() - t0) * 1000

            for q in QUERIES:  # warm-up, and fills the cache for the repeated pass
                timed(q)
            fresh = [timed(q) for q in unique_queries()[:200]]
            repeated = [timed(q) for _ in range(rounds) for q in QUERIES]
    finally:
        server.stop()
    return {"new_query": summary(fresh), "repeated_query": summary(repeated)}


def summary(times: list[float]) -> dict[str, float]:
    return {
        "n": len(times),
        "p50_ms": percentile(times, 50),
        "p95_ms": percentile(times, 95),
        "p99_ms": percentile(times, 99),
        "mean_ms": statistics.fmean(times),
    }


def stage_latency(url: str, rounds: int) -> dict[str, float | str]:
    settings = ServiceSettings(database_url=url, device="cpu")
    encoder = build_encoder(settings)
    engine = db.create_db_engine(url)
    with Session(engine) as session:
        served = load_served(LocalPlacement(settings), session, model=encoder.name)
    engine.dispose()
    heads, scales = settings.default_heads, settings.scales
    enc, rank = [], []
    for _ in range(rounds):
        for text in QUERIES:
            t0 = time.perf_counter()
            q = encoder.encode([text])
            t1 = time.perf_counter()
            rank_queries(served, q, [text], k=10, heads=[heads], scales=scales, filters=[Filters()])
            t2 = time.perf_counter()
            enc.append((t1 - t0) * 1000)
            rank.append((t2 - t1) * 1000)
    return {
        "catalog": len(served),
        "backend": getattr(encoder, "backend", "?"),
        "heads": settings.heads,
        "encode_p50_ms": statistics.median(enc),
        "rank_p50_ms": statistics.median(rank),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--catalog", type=Path, default=SHARED if SHARED.exists() else DEMO_CATALOG)
    parser.add_argument(
        "--database-url",
        help="default: a fresh SQLite file in benchmarks/results/; an existing index is reused "
        "(then the first run embeds only what changed)",
    )
    parser.add_argument("--rounds", type=int, default=10, help="passes over the 20 queries")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    results = ROOT / "benchmarks" / "results"
    results.mkdir(exist_ok=True)
    url = args.database_url
    if url is None:  # a fresh file, so the first run embeds the whole catalog
        path = results / f"{args.catalog.stem}.db"
        for stale in results.glob(f"{path.name}*"):
            stale.unlink()
        url = f"sqlite:///{path}"

    first = index(args.catalog, url)
    rerun = index(args.catalog, url)
    http = http_latency(url, args.rounds)
    stages = stage_latency(url, args.rounds)
    out = {
        "catalog": str(args.catalog),
        "database": url.split(":")[0],
        "index": first,
        "reindex_noop": rerun,
        "http": http,
        "stages": stages,
        "threads": os.cpu_count(),
    }
    if args.json:
        sys.stdout.write(json.dumps(out, indent=2) + "\n")
        return
    rows = [
        ("index: books", f"{first['books']:.0f} ({first['embedded']:.0f} embedded)"),
        ("index: seconds", f"{first['seconds']:.1f}"),
        ("index: books/s", f"{first['books_per_s']:.1f}"),
        ("re-index, nothing changed: seconds", f"{rerun['seconds']:.1f}"),
        *(
            (
                f"GET /search, {label}: p50 / p95 / p99 ms (n={h['n']:.0f})",
                f"{h['p50_ms']:.1f} / {h['p95_ms']:.1f} / {h['p99_ms']:.1f}",
            )
            for label, h in (
                ("new queries", http["new_query"]),
                ("repeated (cached) queries", http["repeated_query"]),
            )
        ),
        (
            f"  in-process: encode query ({stages['backend']}) p50 ms",
            f"{stages['encode_p50_ms']:.2f}",
        ),
        (
            f"  in-process: rank_queries, default heads, {stages['catalog']:.0f} books p50 ms",
            f"{stages['rank_p50_ms']:.2f}",
        ),
    ]
    width = max(len(r[0]) for r in rows)
    sys.stdout.write(f"catalog {args.catalog} on {out['database']}\n")
    for name, value in rows:
        sys.stdout.write(f"{name:<{width}}  {value}\n")


if __name__ == "__main__":
    main()
