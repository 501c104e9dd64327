"""Past one machine, measured on this one: re-index throughput on Ray, and what a shard hop costs.

    .venv/bin/python -m benchmarks.ray_scale                 # 1,000 books of the shared catalog
    .venv/bin/python -m benchmarks.ray_scale --books 300 --queries 100 --json

1. Re-index: the same subset of the catalog (the first `--books` books, written to a temporary
   file) indexed into three fresh SQLite databases: in this process (`attend index`), and with
   `attend index --engine ray` on a local Ray with 1 and with 2 encoder actors. Ray's start-up is
   timed apart. The Ray databases are checked against the single-process one (same books, max
   |Δ| of every vector).
2. Shard hop: ms per single-query search with the query vectors made beforehand, what the
   service's searcher runs per batch (`rank_queries`: the default heads' mixture, title,
   description and lexical, exact top 10, no filters): on the local served index
   (`ServedIndex.local`), on the router's index over 2 in-process shards, and over 1 and 2 Ray
   Serve shard deployments (`ShardedKeys`, the same code the HTTP router runs), on the
   re-indexed catalog.
3. The attention core alone on 1,000,000 random keys, B = 1 and 64: the per-query cost that
   the sizing table in the README scales to 30M books.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch
from sqlalchemy.orm import Session

from benchmarks._common import run_as_the_service
from benchmarks.queries import unique_queries
from indexer import db, loaded_index, pipeline, ray_embed, store
from indexer.catalog import CatalogRecord, scan_catalog
from indexer.data import DEMO_CATALOG
from indexer.filters import Filters
from indexer.settings import IndexSettings
from models.attention import attend
from models.shard_merge import shard_bounds
from service.cluster.shards.router import ShardedKeys
from service.cluster.shards.shard import LocalShard, Shard
from service.config.settings import ServiceSettings
from service.engine.query_ranking import rank_queries
from service.engine.served_index import ServedIndex
from service.engine.startup import build_encoder

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data" / "books.jsonl"


def subset(catalog: Path, books: int, folder: Path) -> Path:
    """The first `books` valid rows of `catalog`, as a JSONL file in `folder`."""
    out = folder / "subset.jsonl"
    with catalog.open(encoding="utf-8") as src, out.open("w", encoding="utf-8") as dst:
        valid = (r for r in scan_catalog(catalog) if isinstance(r, CatalogRecord))
        wanted = {r.id for _, r in zip(range(books), valid, strict=False)}
        for line in src:
            if line.strip() and json.loads(line).get("id") in wanted:
                dst.write(line)
    return out


def reindex(catalog: Path, folder: Path, workers: list[int]) -> tuple[list[dict[str, Any]], str]:
    """The single-process run, then one Ray run per entry of `workers`; returns the rows and
    the single-process database's URL."""
    rows = []
    single = f"sqlite:///{folder / 'single.db'}"
    settings = IndexSettings(database_url=single)
    encoder = build_encoder(settings)
    report = _run(settings, encoder, catalog, None)
    rows.append(_row("single process", report, 0.0))
    reference = _load(single, encoder.name)
    t0 = time.perf_counter()
    with ray_embed.ray_session(None):
        startup = time.perf_counter() - t0
        for n in workers:
            url = f"sqlite:///{folder / f'ray{n}.db'}"
            settings = IndexSettings(database_url=url)
            embedder = partial(
                ray_embed.embed_plans, settings=settings, model=encoder.name, workers=n
            )
            report = _run(settings, encoder, catalog, embedder)
            row = _row(f"Ray, {n} actor{'s' if n > 1 else ''}", report, startup)
            got = _load(url, encoder.name)
            row["same_books"] = got.ids == reference.ids
            row["max_abs_diff"] = max(
                float(np.abs(got.keys[f] - reference.keys[f]).max()) for f in got.keys
            )
            rows.append(row)
    return rows, single


def _run(
    settings: IndexSettings, encoder: Any, catalog: Path, embedder: Any
) -> pipeline.IndexReport:
    engine = db.create_db_engine(settings.database_url)
    try:
        return pipeline.run(
            settings, engine=engine, encoder=encoder, path=catalog, embedder=embedder
        )
    finally:
        engine.dispose()


def _row(name: str, report: pipeline.IndexReport, startup: float) -> dict[str, Any]:
    return {
        "run": name,
        "books": report.books,
        "texts_embedded": report.embedded,
        "seconds": round(report.seconds, 2),
        "books_per_s": round(report.books / report.seconds, 2),
        "texts_per_s": round(report.embedded / report.seconds, 2),
        "ray_startup_s": round(startup, 2),
    }


def _load(url: str, model: str) -> loaded_index.LoadedIndex:
    engine = db.create_db_engine(url)
    try:
        with Session(engine) as session:
            return loaded_index.load_index(session=session, model=model)
    finally:
        engine.dispose()


def _descriptions(url: str, index: loaded_index.LoadedIndex) -> list[str | None]:
    """The lexical head's descriptions of `index`'s books, as the service reads them."""
    engine = db.create_db_engine(url)
    try:
        with Session(engine) as session:
            return store.book_descriptions(
                session=session, book_ids=index.ids, generation=index.generation
            )
    finally:
        engine.dispose()


def hop(url: str, queries: int) -> list[dict[str, Any]]:
    """ms per single-query search (no encoder): local, in-process shards, Ray Serve shards."""
    from ray import serve

    from service.cluster.ray_serve import shard_config
    from service.cluster.shards.deployments import RayShard, ShardDeployment

    settings = ServiceSettings(database_url=url, device="cpu")
    encoder = build_encoder(settings)
    texts = unique_queries()[:queries]
    q = encoder.encode(texts)  # (Q, d)
    index = _load(url, encoder.name)
    descriptions = _descriptions(url, index)
    served: dict[str, ServedIndex] = {
        "local served index (one process)": ServedIndex.local(
            index, device="cpu", descriptions=descriptions
        )
    }
    local = [LocalShard(Shard(index, shard=s, shards=2, device="cpu")) for s in range(2)]
    served["2 in-process shards + merge"] = ServedIndex(
        index, ShardedKeys.of(index, local), descriptions=descriptions
    )
    with ray_embed.ray_session(None, num_cpus=4):  # logical CPUs: 3 shard replicas of 1 each
        serve.start()
        try:
            for n in (1, 2):
                handles = [
                    serve.run(
                        ShardDeployment.options(name=f"shard-{s}").bind(
                            shard_config(settings), s, n
                        ),  # type: ignore[attr-defined]
                        name=f"bench-{n}-{s}",
                        route_prefix=None,
                    )
                    for s in range(n)
                ]
                assert index.generation is not None
                clients = [
                    RayShard(
                        h,
                        generation=index.generation,
                        name=f"shard-{s}",
                        start=a,
                        stop=b,
                        timeout_s=600,
                    )
                    for s, (h, (a, b)) in enumerate(
                        zip(handles, shard_bounds(len(index), n), strict=True)
                    )
                ]
                label = f"{n} Ray Serve shard{'s' if n > 1 else ''} + merge"
                served[label] = ServedIndex(
                    index, ShardedKeys.of(index, clients), descriptions=descriptions
                )
            rows = [{"path": name, **_time(s, q, texts, settings)} for name, s in served.items()]
        finally:
            serve.shutdown()
    base = rows[0]["p50_ms"]
    for row in rows:
        row["hop_ms"] = round(row["p50_ms"] - base, 2)
    return rows


def _time(
    index: ServedIndex, q: torch.Tensor, texts: list[str], settings: ServiceSettings
) -> dict[str, float]:
    """ms per single-query `rank_queries` (the default heads, top 10, no filters)."""
    heads, scales = settings.default_heads, settings.scales  # parsed once, outside the timing

    def search(i: int) -> None:
        rank_queries(
            index,
            q[i : i + 1],
            texts[i : i + 1],
            k=10,
            heads=[heads],
            scales=scales,
            filters=[Filters()],
        )

    search(0)  # warm-up
    ms = []
    for i in range(q.shape[0]):
        t0 = time.perf_counter()
        search(i)
        ms.append((time.perf_counter() - t0) * 1000)
    ms.sort()
    return {
        "p50_ms": round(statistics.median(ms), 2),
        "p95_ms": round(ms[int(0.95 * (len(ms) - 1))], 2),
        "queries": len(ms),
    }


def core(n: int = 1_000_000, d: int = 384) -> list[dict[str, Any]]:
    """The attention core over n random unit keys (float32, CPU): ms per call and queries/s."""
    g = torch.Generator().manual_seed(0)
    keys = torch.nn.functional.normalize(torch.randn(n, d, generator=g), dim=-1)
    rows = []
    for b in (1, 64):
        q = torch.nn.functional.normalize(torch.randn(b, d, generator=g), dim=-1)
        attend(q, keys, k=10, scale=20.0)  # warm-up
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            attend(q, keys, k=10, scale=20.0)
            times.append(time.perf_counter() - t0)
        s = statistics.median(times)
        rows.append(
            {"N": n, "B": b, "ms_per_call": round(s * 1000, 1), "queries_per_s": round(b / s, 1)}
        )
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    cols = list(rows[0])
    lines = [" | ".join(cols), " | ".join("---" for _ in cols)]
    lines += [" | ".join(str(r.get(c, "")) for c in cols) for r in rows]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--catalog", type=Path, default=SHARED if SHARED.exists() else DEMO_CATALOG)
    parser.add_argument("--books", type=int, default=1000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    run_as_the_service()
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    with tempfile.TemporaryDirectory(prefix="attend-ray-scale-") as tmp:
        folder = Path(tmp)
        catalog = subset(args.catalog, args.books, folder)
        reindex_rows, single = reindex(catalog, folder, args.workers)
        hop_rows = hop(single, args.queries)
    core_rows = core()
    result = {
        "catalog": str(args.catalog),
        "books": args.books,
        "cpus": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "reindex": reindex_rows,
        "hop": hop_rows,
        "core": core_rows,
    }
    if args.json:
        sys.stdout.write(json.dumps(result, indent=2) + "\n")
        return
    sys.stdout.write(f"catalog {args.catalog}, first {args.books} books, {os.cpu_count()} CPUs\n\n")
    sys.stdout.write("Re-index\n" + table(reindex_rows) + "\n\n")
    sys.stdout.write(
        "Shard hop (B = 1, rank_queries with the default heads, encoder excluded)\n"
        + table(hop_rows)
        + "\n\n"
    )
    sys.stdout.write("Attention core, random keys, CPU float32\n" + table(core_rows) + "\n")


if __name__ == "__main__":
    main()
