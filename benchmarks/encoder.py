"""The query/document encoder on the CPU: PyTorch and ONNX Runtime side by side, in one run.

    .venv/bin/python benchmarks/encoder.py
    .venv/bin/python benchmarks/encoder.py --json --cache-dir /tmp/onnx-cache

For each backend: start-up time, the latency of one short query (batch of 1; `--reps` timed
calls after a warm-up, cycling over 20 distinct queries; the two backends take turns pass by
pass, so a busy machine slows both alike), the throughput on a batch of 256 demo book texts
(title, newline, description), and the lowest cosine between the two backends' vectors over
those texts and the queries. The ONNX start-up exports the model the first time a cache folder
is used (`export` in the output) and only loads it afterwards.
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

import torch

from benchmarks.queries import QUERIES, percentile
from indexer.batches import field_texts
from indexer.catalog import read_catalog
from indexer.data import DEMO_CATALOG
from models.defaults import DEFAULT_MODEL, default_onnx_cache_dir
from models.encoder import Backend, SentenceTransformerEncoder
from models.onnx_encoder import model_slug

BACKENDS: tuple[Backend, ...] = ("torch", "onnx")


def book_texts(n: int) -> list[str]:
    """`n` demo book descriptions as the indexer embeds them (the longer of a book's two texts),
    cycling over the catalog if it is smaller."""
    texts = [field_texts(record)["description"] for record in read_catalog(DEMO_CATALOG)]
    return [texts[i % len(texts)] for i in range(n)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--cache-dir", type=Path, default=default_onnx_cache_dir())
    parser.add_argument("--reps", type=int, default=200, help="timed one-query calls per backend")
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--batch", type=int, default=256, help="book texts in the batch")
    parser.add_argument("--batch-runs", type=int, default=3, help="timed batches per backend")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    onnx_file = args.cache_dir / model_slug(args.model) / "model.onnx"
    exported = not onnx_file.exists()
    encoders: dict[Backend, SentenceTransformerEncoder] = {}
    results: dict[Backend, dict[str, float]] = {}
    for backend in BACKENDS:
        t0 = time.perf_counter()
        encoders[backend] = SentenceTransformerEncoder(
            args.model, device="cpu", backend=backend, cache_dir=args.cache_dir, batch_size=64
        )
        results[backend] = {"start_s": time.perf_counter() - t0}

    # One query at a time, the backends taking turns every pass over the queries (not every
    # call: each runtime's worker threads spin a little after a call and would slow the other).
    for i in range(args.warmup):
        for enc in encoders.values():
            enc.encode([QUERIES[i % len(QUERIES)]])
    times: dict[Backend, list[float]] = {b: [] for b in BACKENDS}
    for start in range(0, args.reps, len(QUERIES)):
        for backend, enc in encoders.items():
            for i in range(start, min(start + len(QUERIES), args.reps)):
                t0 = time.perf_counter()
                enc.encode([QUERIES[i % len(QUERIES)]])
                times[backend].append((time.perf_counter() - t0) * 1000)

    texts = book_texts(args.batch)
    vectors: dict[Backend, torch.Tensor] = {}
    for backend, enc in encoders.items():
        vectors[backend] = enc.encode(texts[:64])  # warm-up at batch shapes
    batch_s: dict[Backend, list[float]] = {b: [] for b in BACKENDS}
    for _ in range(args.batch_runs):
        for backend, enc in encoders.items():
            t0 = time.perf_counter()
            vectors[backend] = enc.encode(texts)
            batch_s[backend].append(time.perf_counter() - t0)

    for backend in BACKENDS:
        results[backend] |= {
            "query_median_ms": statistics.median(times[backend]),
            "query_p95_ms": percentile(times[backend], 95),
            "batch_texts_per_s": args.batch / statistics.median(batch_s[backend]),
        }
    query_vecs = {b: enc.encode(QUERIES) for b, enc in encoders.items()}
    cos_books = (vectors["torch"] * vectors["onnx"]).sum(dim=1)
    cos_queries = (query_vecs["torch"] * query_vecs["onnx"]).sum(dim=1)
    min_cosine = float(torch.cat([cos_books, cos_queries]).min())

    out = {
        "model": args.model,
        "onnx_cache": str(onnx_file.parent),
        "onnx_exported_in_this_run": exported,
        "reps": args.reps,
        "batch": args.batch,
        "torch_threads": torch.get_num_threads(),
        "cpus": os.cpu_count(),
        "backends": results,
        "min_cosine": min_cosine,
        "query_speedup": results["torch"]["query_median_ms"] / results["onnx"]["query_median_ms"],
    }
    if args.json:
        sys.stdout.write(json.dumps(out, indent=2) + "\n")
        return
    header = ("backend", "start s", "query p50 ms", "query p95 ms", f"batch {args.batch} texts/s")
    rows = [
        (
            backend,
            f"{r['start_s']:.1f}" + (" (export)" if backend == "onnx" and exported else ""),
            f"{r['query_median_ms']:.2f}",
            f"{r['query_p95_ms']:.2f}",
            f"{r['batch_texts_per_s']:.0f}",
        )
        for backend, r in results.items()
    ]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)))
    print(
        f"min cosine torch vs onnx: {min_cosine:.7f} over {len(texts) + len(QUERIES)} texts; "
        f"one-query speed-up {out['query_speedup']:.1f}x; "
        f"{out['cpus']} CPUs, torch threads {out['torch_threads']}; cache {out['onnx_cache']}"
    )


if __name__ == "__main__":
    main()
