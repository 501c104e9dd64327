"""Re-index throughput against the encoder alone, and the cost of a re-index that changes nothing.

    .venv/bin/python -m benchmarks.reindex                        # the shared catalog, SQLite
    .venv/bin/python -m benchmarks.reindex --limit 1000 --json
    .venv/bin/python -m benchmarks.reindex --database-url postgresql+psycopg://…/db  # empty db
    .venv/bin/python -m benchmarks.reindex --noop-versus /tmp/attend-before \
        --database-url sqlite:////tmp/books.db          # an indexed db: `attend index`, no-op

In one process, one after the other, on the same texts: (1) the encoder alone embeds every text
a from-scratch index embeds, in the same batches (the distinct texts of each `--batch-size`
books); (2) `pipeline.run` indexes the catalog into an empty database (reading, hashing,
planning, embedding, writing, committing, the switch); (3) `pipeline.run` again, which finds
nothing to do. The figure of merit is (2)'s books/s over (1)'s, with the time the run itself spent
inside the encoder beside it (the same ratio measured within the one run, immune to the machine
getting busier between (1) and (2)).

With `--noop-versus DIR` (a checkout of other code, e.g. `git worktree add /tmp/attend-before
REV`) and `--database-url` of a database that already holds the catalog: the whole command
`attend index CATALOG` that finds nothing to change, this code's and DIR's (its packages first on
PYTHONPATH, the same venv) in turns, `--rounds` each, on a pseudo-terminal (`script`) so the
progress bar is drawn as on an operator's; their wall times, medians and ratio.
"""

from __future__ import annotations

import argparse
import logging
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from sqlalchemy.engine import make_url

from benchmarks._common import dump_json, environment, log, out, table
from indexer import batches, db, pipeline, vector_format
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
    out = []
    for start in range(0, len(records), batch_size):
        texts: dict[str, str] = {}
        for r in records[start : start + batch_size]:
            for text in batches.field_texts(r).values():
                h = vector_format.content_hash(model, text)
                if h not in seen:
                    texts[h] = text
        seen.update(texts)
        out.append(list(texts.values()))
    return out


def noop_command(catalog: Path, url: str, root: Path | None) -> tuple[float, str]:
    """The wall time and output of `attend index catalog` on a pseudo-terminal, with the code
    at `root` first on the path (None: this code)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    if root is not None:
        env["PYTHONPATH"] = str(root.resolve())
    # in its own folder: `python -c` puts the working folder first on the path, before PYTHONPATH
    folder = (root or ROOT).resolve()
    # `attend` is service.launch:main; run as a script, it takes the path's packages first
    launcher = "import sys; from service.launch import main; sys.argv[0] = 'attend'; "
    launcher += "sys.exit(main())"
    argv = [sys.executable, "-c", launcher, "index", str(catalog), "--database-url", url]
    t0 = time.perf_counter()
    done = subprocess.run(
        ["script", "-qec", f"stty cols 120 rows 40; {shlex.join(argv)}", "/dev/null"],
        env=env,
        cwd=folder,
        capture_output=True,
        text=True,
        check=False,
    )
    seconds = time.perf_counter() - t0
    if done.returncode != 0 or "nothing changed" not in done.stdout:
        raise RuntimeError(f"attend index did not find the index unchanged: {done.stdout}")
    return seconds, done.stdout


def noop_versus(catalog: Path, url: str, versus: Path, rounds: int) -> dict[str, Any]:
    """This code's no-op `attend index` against `versus`'s, in turns."""
    times: dict[str, list[float]] = {"this": [], "versus": []}
    bar = False
    for i in range(rounds):
        for name, root in (("this", None), ("versus", versus))[:: 1 if i % 2 else -1]:
            seconds, output = noop_command(catalog, url, root)
            times[name].append(seconds)
            bar = bar or (name == "this" and "%|" in output and "book/s" in output)
            log(f"round {i + 1}: {name} {seconds:.2f} s")
    this, before = statistics.median(times["this"]), statistics.median(times["versus"])
    ratios = sorted(a / b for a, b in zip(times["this"], times["versus"], strict=True))
    return {
        "catalog": str(catalog),
        "versus": str(versus),
        "rounds": rounds,
        "this_s": times["this"],
        "versus_s": times["versus"],
        "median_ratio": this / before,
        "ratio_range": [ratios[0], ratios[-1]],
        "progress_bar_drawn": bar,
    }


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--catalog", type=Path, default=SHARED if SHARED.exists() else DEMO_CATALOG)
    parser.add_argument("--limit", type=int, help="only the first N books of the catalog")
    parser.add_argument("--database-url", help="an EMPTY database (default: a new SQLite file)")
    parser.add_argument("--batch-size", type=int, default=IndexSettings().batch_size)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--noop-versus", type=Path, metavar="DIR", help="a no-op `attend index`: this code / DIR's"
    )
    parser.add_argument("--rounds", type=int, default=5, help="--noop-versus: runs of each")
    args = parser.parse_args()
    if args.noop_versus is not None and args.database_url is None:
        parser.error("--noop-versus needs --database-url of an indexed database")
    return args


def main() -> None:
    args = parse_args()
    logging.basicConfig(level=logging.WARNING)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if args.noop_versus is not None:
        report_noop(
            noop_versus(args.catalog, args.database_url, args.noop_versus, args.rounds), args.json
        )
        return

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


def report_noop(result: dict[str, Any], as_json: bool) -> None:
    if as_json:
        dump_json(result)
        return
    out(
        f"no-op `attend index` of {result['catalog']}, {result['rounds']} runs each in turns: "
        f"this {statistics.median(result['this_s']):.2f} s (median), "
        f"{result['versus']} {statistics.median(result['versus_s']):.2f} s; "
        f"this / that {result['median_ratio']:.3f} (per round "
        f"{result['ratio_range'][0]:.3f}-{result['ratio_range'][1]:.3f}); "
        f"progress bar drawn: {result['progress_bar_drawn']}"
    )


if __name__ == "__main__":
    main()
