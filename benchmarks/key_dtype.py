"""Half-precision keys (`ATTEND_KEY_DTYPE=bfloat16|float16`) against float32, in one process:
what they give up of the exact answer, and what they save.

    .venv/bin/python -m benchmarks.key_dtype --database-url sqlite:////tmp/books.db
    .venv/bin/python -m benchmarks.key_dtype --database-url sqlite:////tmp/g/books-1000000.db

Over one served index whose keys are cast once per dtype (the rest shared) and held on the
device `ATTEND_DEVICE` picks (the CPU here, a GPU where there is one), the searcher's
`search_now` on the queries a reader types: the subject queries of
../shared/data/subject_queries.jsonl and the benchmark's own (benchmarks/queries.py), k = 10.
Per dtype: how many top 10s differ from float32's (ids in order), the largest relative error
of a weight over the books both rank in the same place, the largest entropy difference; then in
turns, on queries never asked before, q/s at B = 1 and at B = 32, and the keys' bytes.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

from benchmarks._common import dump_json, log, out, run_as_the_service, table
from benchmarks.queries import ANGLES, QUERIES

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
DTYPES = ("float32", "bfloat16", "float16")


def reader_queries(subjects: Path) -> list[str]:
    typed = [json.loads(line)["query"] for line in subjects.read_text().splitlines() if line]
    return typed + list(QUERIES)


def exactness(searcher: Any, indexes: dict[str, Any], queries: list[str]) -> dict[str, Any]:
    """Per dtype: top 10s that differ from float32's, the largest relative weight error over
    the books both rank in one place, the largest entropy difference, the keys' bytes."""
    from service.engine.tickets import SearchOptions

    answers = {}
    for dtype, served in indexes.items():
        searcher.index = served
        answers[dtype] = searcher.search_now(queries, SearchOptions(k=10))
    rows: dict[str, dict[str, Any]] = {}
    for dtype, served in indexes.items():
        differ, weight_error, entropy_error = 0, 0.0, 0.0
        for exact, other in zip(answers["float32"], answers[dtype], strict=True):
            ids = [r.book.id for r in exact.results]
            if ids != [r.book.id for r in other.results]:
                differ += 1
            for a, b in zip(exact.results, other.results, strict=False):
                if a.book.id == b.book.id and a.weight > 0:
                    weight_error = max(weight_error, abs(b.weight - a.weight) / a.weight)
            if exact.entropy is not None and other.entropy is not None:
                entropy_error = max(entropy_error, abs(other.entropy - exact.entropy))
        keys = served.keys
        rows[dtype] = {
            "queries": len(queries),
            "top10_differ": differ,
            "max_rel_weight_error": weight_error,
            "max_entropy_error": entropy_error,
            "key_bytes": sum(k.numel() * k.element_size() for k in keys.by_field.values()),
            "single_qps": [],
            "batch_qps": [],
        }
    return rows


def measure(url: str, subjects: Path, rounds: int, batch: int) -> dict[str, Any]:
    from sqlalchemy import create_engine

    from models.device import pick_device
    from models.keys import LocalKeys
    from service.commands.threads import apply_serve_threads
    from service.config.settings import ServiceSettings
    from service.engine.reloader import freeze_long_lived
    from service.engine.served_index import ServedIndex
    from service.engine.startup import build_searcher
    from service.engine.tickets import SearchOptions

    settings = ServiceSettings(database_url=url)
    apply_serve_threads(settings)
    searcher = build_searcher(settings, engine=create_engine(url))
    freeze_long_lived()
    base = searcher.index
    host = base.keys.host()  # float32 (N, d) a field
    device = pick_device(settings.device)  # ATTEND_DEVICE: the CPU, or a GPU
    options = SearchOptions(k=10)
    queries = reader_queries(subjects)
    indexes = {}
    for dtype in DTYPES:
        served = ServedIndex.__new__(ServedIndex)
        served.__dict__.update(base.__dict__)  # the same books, BM25 and names
        served.keys = LocalKeys(host, device=device, key_dtype=dtype)
        indexes[dtype] = served
    rows = exactness(searcher, indexes, queries)
    texts = [f"{q} ({angle})" for angle in ANGLES for q in QUERIES]
    rounds = max(1, min(rounds, len(texts) // (batch * len(DTYPES))))
    for r in range(rounds):
        for i, dtype in enumerate(DTYPES):  # in turns: each dtype its own unasked queries
            start = (r * len(DTYPES) + i) * batch
            part = texts[start : start + batch]
            searcher.index = indexes[dtype]
            t0 = time.perf_counter()
            for t in part[:8]:
                searcher.search_now([f"{t}?"], options)
            rows[dtype]["single_qps"].append(8 / (time.perf_counter() - t0))
            t0 = time.perf_counter()
            searcher.search_now(part, options)
            rows[dtype]["batch_qps"].append(len(part) / (time.perf_counter() - t0))
        log(f"round {r}: " + ", ".join(f"{d} {rows[d]['batch_qps'][-1]:.1f} q/s" for d in DTYPES))
    for row in rows.values():
        row["single_qps"] = statistics.median(row["single_qps"])
        row["batch_qps"] = statistics.median(row["batch_qps"])
    searcher.index = base
    return {"books": len(base), "B": batch, "device": str(device), "dtypes": rows}


def main() -> None:
    run_as_the_service()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--subjects", type=Path, default=SHARED / "subject_queries.jsonl")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = measure(args.database_url, args.subjects, args.rounds, args.batch)
    if args.json:
        dump_json(result)
        return
    base = result["dtypes"]["float32"]
    out(
        f"{result['books']} books on {result['device']}, B = {result['B']}; top 10s and weights "
        "against float32's"
    )
    out(
        table(
            [
                "keys",
                "top 10 differs",
                "max rel. weight error",
                "max entropy error",
                "key MiB",
                "q/s B=1",
                "q/s B=32",
            ],
            [
                [
                    dtype,
                    f"{r['top10_differ']} of {r['queries']}",
                    f"{r['max_rel_weight_error']:.2e}",
                    f"{r['max_entropy_error']:.2e}",
                    f"{r['key_bytes'] / 2**20:.0f}",
                    f"{r['single_qps']:.1f} ({r['single_qps'] / base['single_qps']:.2f}x)",
                    f"{r['batch_qps']:.1f} ({r['batch_qps'] / base['batch_qps']:.2f}x)",
                ]
                for dtype, r in result["dtypes"].items()
            ],
        )
    )


if __name__ == "__main__":
    main()
