"""Re-index throughput against the encoder alone, and the cost of a re-index that changes nothing.

    .venv/bin/python -m benchmarks.reindex                        # the shared catalog, SQLite
    .venv/bin/python -m benchmarks.reindex --limit 1000 --json
    .venv/bin/python -m benchmarks.reindex --database-url postgresql+psycopg://…/db  # empty db

In one process, one after the other, on the same texts: (1) the encoder alone embeds every text
a from-scratch index embeds, in the same batches (the distinct texts of each `--batch-size`
books); (2) `pipeline.run` indexes the catalog into an empty database (reading, hashing,
planning, embedding, writing, committing, the switch); (3) `pipeline.run` again, which finds
nothing to do. The figure of merit is (2)'s books/s over (1)'s, with the time the run itself spent
inside the encoder beside it (the same ratio measured within the one run, immune to the machine
getting busier between (1) and (2)).
"""

from __future__ import annotations

import argparse
import logging
import os
import tempfile
import time
from pathlib import Path

import torch
from sqlalchemy.engine import make_url

from benchmarks._common import dump_json, environment, log, out, table
from indexer import db, pipeline, vector_format
from indexer.catalog import CatalogRecord, read_catalog
from indexer.data import DEMO_CATALOG
from indexer.settings import IndexSettings
from models.device import pick_device
from models.encoder import Encoder
from service.engine.startup import build_encoder

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data" / "books.jsonl"


class TimedEncoder:
    """The encoder, with the time spent in it counted."""

    def __init__(self, encoder: Encoder):
        self.inner = encoder
        self.name, self.dim = encoder.name, encoder.dim
        self.seconds = 0.0
        self.texts = 0

    def encode(self, texts: list[str]) -> torch.Tensor:
        t0 = time.perf_counter()
        vectors = self.inner.encode(texts)
        self.seconds += time.perf_counter() - t0
        self.texts += len(texts)
        return vectors


def batch_texts(records: list[CatalogRecord], batch_size: int, model: str) -> list[list[str]]:
    """What a from-scratch index embeds, batch by batch: the distinct texts of each batch that
    no earlier batch embedded."""
    seen: set[str] = set()
    batches = []
    for start in range(0, len(records), batch_size):
        texts: dict[str, str] = {}
        for r in records[start : start + batch_size]:
            for text in batches.field_texts(r).values():
                h = vector_format.content_hash(model, text)
                if h not in seen:
                    texts[h] = text
        seen.update(texts)
        batches.append(list(texts.values()))
    return batches


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--catalog", type=Path, default=SHARED if SHARED.exists() else DEMO_CATALOG)
    parser.add_argument("--limit", type=int, help="only the first N books of the catalog")
    parser.add_argument("--database-url", help="an EMPTY database (default: a new SQLite file)")
    parser.add_argument("--batch-size", type=int, default=IndexSettings().batch_size)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    with tempfile.TemporaryDirectory() as tmp:
        catalog = args.catalog
        records = list(read_catalog(catalog))
        if args.limit is not None:
            records = records[: args.limit]
            catalog = Path(tmp) / f"catalog{args.catalog.suffix}"
            with (
                catalog.open("w", encoding="utf-8") as f,
                args.catalog.open(encoding="utf-8") as src,
            ):
                for _, line in zip(range(args.limit), src, strict=False):
                    f.write(line)
        url = args.database_url or f"sqlite:///{Path(tmp) / 'reindex.db'}"
        settings = IndexSettings(database_url=url, batch_size=args.batch_size)
        encoder = build_encoder(settings)  # as `attend index` builds it
        encoder.encode(["warm up"] * 8)
        texts = batch_texts(records, args.batch_size, encoder.name)
        n_texts = sum(map(len, texts))
        log(f"{len(records)} books, {n_texts} texts; encoder alone …")

        t0 = time.perf_counter()
        for batch in texts:
            if batch:
                encoder.encode(batch)
        alone_s = time.perf_counter() - t0

        log("from-scratch index …")
        timed = TimedEncoder(encoder)
        engine = db.create_db_engine(url)
        try:
            first = pipeline.run(settings, engine=engine, encoder=timed, path=catalog)
            log("no-op re-index …")
            noop = pipeline.run(settings, engine=engine, encoder=timed, path=catalog)
        finally:
            engine.dispose()
    assert first.embedded == n_texts, (first.embedded, n_texts)
    assert noop.embedded == 0 and not noop.activated

    books = len(records)
    result = {
        "books": books,
        "texts": n_texts,
        "batch_size": args.batch_size,
        "database": make_url(url).get_backend_name(),
        "encoder_alone_s": alone_s,
        "encoder_alone_books_per_s": books / alone_s,
        "index_s": first.seconds,
        "index_books_per_s": first.books_per_second,
        "index_over_encoder": (books / first.seconds) / (books / alone_s),
        "encoder_share_of_index_run": timed.seconds / first.seconds,
        "noop_reindex_s": noop.seconds,
        "environment": environment(
            {"device": str(pick_device(settings.device)), "backend": settings.encoder_backend}
        ),
    }
    if args.json:
        dump_json(result)
        return
    out(
        table(
            ["run", "seconds", "books/s", "texts/s"],
            [
                [
                    "encoder alone",
                    f"{alone_s:.1f}",
                    f"{books / alone_s:.1f}",
                    f"{n_texts / alone_s:.1f}",
                ],
                [
                    "from-scratch index",
                    f"{first.seconds:.1f}",
                    f"{first.books_per_second:.1f}",
                    f"{n_texts / first.seconds:.1f}",
                ],
                ["no-op re-index", f"{noop.seconds:.2f}", f"{books / noop.seconds:.0f}", "-"],
            ],
        )
    )
    out(
        f"\nindex / encoder alone: {result['index_over_encoder']:.3f}; "
        f"time in the encoder during the index run: {result['encoder_share_of_index_run']:.3f}"
    )
    device = pick_device(settings.device)
    out(
        f"{books} books, {n_texts} texts, batches of {args.batch_size} books, "
        f"{result['database']}, encoder {settings.encoder_backend} on {device}"
    )


if __name__ == "__main__":
    main()
