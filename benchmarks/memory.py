"""Peak resident memory of the service's search state (encoder + keys) for N books.

    .venv/bin/python -m benchmarks.memory --database-url sqlite:///benchmarks/results/books.db
    .venv/bin/python -m benchmarks.memory --synthetic 1000000      # builds a 1M-book SQLite file

Each measurement runs in a fresh process: RSS once the encoder is loaded (the model), then the
peak RSS while the index is read from the database into the served index and after one search.
The figure to watch is (peak − model) / raw bytes, where raw is the bytes of every field's keys
as the served index holds them (`index.keys.by_field`: N·d·4 per field in float32 on the CPU;
the served index holds no values, a search returns weights).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"


def rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def measure(url: str) -> dict[str, float | int | str]:
    """In this (fresh) process: load the encoder, then the index, then search once."""
    from indexer.db import create_db_engine
    from models.keys import LocalKeys
    from service.config.settings import ServiceSettings
    from service.engine.startup import build_encoder, build_searcher
    from service.engine.tickets import SearchOptions

    settings = ServiceSettings(database_url=url, device="cpu")
    start = rss_mib()
    encoder = build_encoder(settings)
    encoder.encode(["warm up"])
    model = rss_mib()
    engine = create_db_engine(url)
    t0 = time.perf_counter()
    searcher = build_searcher(settings, engine=engine, encoder=encoder)
    load_s = time.perf_counter() - t0
    searcher.search_now(["a book about the sea"], SearchOptions(k=10))
    index = searcher.index
    keys = index.keys
    assert isinstance(keys, LocalKeys)  # the keys in this process
    by_field = keys.by_field
    raw = sum(k.nelement() * k.element_size() for k in by_field.values()) / 2**20
    peak = peak_mib()
    return {
        "books": len(index),
        "dim": index.dim,
        "key_fields": len(by_field),
        "key_dtype": str(keys.dtype).removeprefix("torch."),
        "python_mib": start,
        "model_mib": model - start,
        "peak_mib": peak,
        "after_mib": rss_mib(),
        "raw_keys_mib": raw,
        "index_peak_over_raw_keys": (peak - model) / raw if raw else float("nan"),
        "load_s": load_s,
    }


def build_synthetic(n: int, path: Path, d: int = 384, batch: int = 20_000) -> str:
    """A SQLite index of n random unit vectors written through the store, like the indexer."""
    from sqlalchemy.orm import Session

    from indexer import batches, db, generations
    from indexer.catalog import CatalogRecord
    from indexer.schema import Generation

    url = f"sqlite:///{path}"
    if path.exists():
        return url
    engine = db.create_db_engine(url)
    db.upgrade(engine)
    rng = np.random.default_rng(0)
    with Session(engine) as session, session.begin():
        generation, _ = generations.begin(session=session, model=store_model(), catalog=None)
        g = generation.id
    for start in range(0, n, batch):
        ids = [f"s{i:08d}" for i in range(start, min(n, start + batch))]
        vecs = rng.standard_normal((len(ids), d), dtype=np.float32)
        vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
        records = [
            CatalogRecord(id=i, title=f"Synthetic {i}", year=1900 + j % 120)
            for j, i in enumerate(ids)
        ]
        with Session(engine) as session, session.begin():
            plan = batches.plan_batch(
                session=session, records=records, model=store_model(), generation=g
            )
            # one text per book (no description: the title is both keys and the value)
            vectors = dict(zip(plan.to_embed, vecs, strict=True))
            batches.write_batch(session=session, plan=plan, vectors=vectors)
    with Session(engine) as session, session.begin():
        generations.finish(session=session, generation=session.get_one(Generation, g))
    engine.dispose()
    return url


def store_model() -> str:
    from models.defaults import DEFAULT_MODEL

    return DEFAULT_MODEL


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--database-url", action="append", default=[])
    parser.add_argument(
        "--synthetic",
        type=int,
        action="append",
        default=[],
        help="also measure an index of N random vectors (built once, cached)",
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.child:
        sys.stdout.write(json.dumps(measure(args.child)) + "\n")
        return
    RESULTS.mkdir(exist_ok=True)
    urls = list(args.database_url)
    for n in args.synthetic:
        t0 = time.perf_counter()
        urls.append(build_synthetic(n, RESULTS / f"synthetic-{n}.db"))
        sys.stderr.write(f"synthetic index of {n} ready in {time.perf_counter() - t0:.0f} s\n")
    rows = []
    for url in urls:
        out = subprocess.run(
            [sys.executable, "-m", "benchmarks.memory", "--child", url],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        )
        rows.append({"database": url, **json.loads(out.stdout.strip().splitlines()[-1])})
    if args.json:
        sys.stdout.write(json.dumps(rows, indent=2) + "\n")
        return
    sys.stdout.write(
        f"{'books':>9} {'model MiB':>9} {'keys':>13} {'K raw MiB':>9} {'peak MiB':>9} "
        f"{'(peak-model)/raw':>16} {'load s':>7}\n"
    )
    for r in rows:
        keys = f"{r['key_fields']}×{r['key_dtype']}"
        sys.stdout.write(
            f"{r['books']:>9} {r['model_mib']:>9.0f} {keys:>13} {r['raw_keys_mib']:>9.0f} "
            f"{r['peak_mib']:>9.0f} {r['index_peak_over_raw_keys']:>16.2f} "
            f"{r['load_s']:>7.1f}\n"
        )


if __name__ == "__main__":
    main()
