"""A generation swap after a 1% re-index, built whole (as a start builds it) and from the previous
generation (the service's swap), in turns in one process: benchmarks/growth.py's swap column,
alone and narrower.

    .venv/bin/python -m benchmarks.growth_swap --books 100000 --rounds 3
    .venv/bin/python -m benchmarks.growth_swap --folder /tmp/g100k   # reuse its index

The catalog and the stand-in encoder are benchmarks/growth_catalog.py's (the first run writes
books.jsonl, edited.jsonl and growth.db into --folder); each round builds generation 2's served
index from generation 1's both ways, as the reloader does (the diff read and applied, then
startup.build_served with and without `follows`), and checks that the two answer alike (the
BM25 scores of a few queries and books byte for byte, the works and principal authors).
"""

from __future__ import annotations

import argparse
import logging
import statistics
import tempfile
import time
from pathlib import Path

from sqlalchemy.orm import Session

from benchmarks._common import out, run_as_the_service
from benchmarks.growth import index
from benchmarks.growth_catalog import Source, changed_catalog, synthetic_books, write_catalog
from indexer import db, loaded_index
from models.defaults import DEFAULT_MODEL
from service.config.settings import ServiceSettings
from service.engine import startup

QUERIES = ["the history of rome", "a dragon and a wizard", "love in a time of war"]


def prepare(folder: Path, n: int) -> str:
    """Generation 1 of n synthetic books and generation 2 with 1% of them edited."""
    url = f"sqlite:///{folder / 'growth.db'}"
    if not (folder / "growth.db").exists():
        catalog = folder / "books.jsonl"
        write_catalog(catalog, synthetic_books(Source.read(), n))
        index(url, catalog)
        changed_catalog(catalog, folder / "edited.jsonl", 0.01)
        index(url, folder / "edited.jsonl")
    return url


def main() -> None:
    run_as_the_service()
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--books", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--folder", type=Path, help="keep (or reuse) the catalogs and index here")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.folder or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        url = prepare(folder, args.books)
        engine = db.create_db_engine(url)
        placement = startup.LocalPlacement(ServiceSettings(database_url=url, device="cpu"))
        times: dict[str, list[float]] = {"whole": [], "from the previous": []}
        with Session(engine) as session:
            first = startup.load_index(session, model=DEFAULT_MODEL, generation=1)
            previous = startup.build_served(placement, first, session)
            for r in range(args.rounds):
                built = {}
                ways = list(times) if r % 2 == 0 else list(times)[::-1]
                for way in ways:
                    # the reloader's swap (service/engine/reloader.py): the diff read and
                    # applied, then the served index made from the previous one or whole
                    t0 = time.perf_counter()
                    diff = loaded_index.load_diff(
                        session=session, model=DEFAULT_MODEL, since=1, until=2
                    )
                    host = previous.host_index()
                    order = loaded_index.diff_order(host, diff, previous.row_of)
                    moved = loaded_index.apply_diff(host, diff, order)
                    follows = (previous, diff, order) if way == "from the previous" else None
                    built[way] = startup.build_served(placement, moved, session, follows=follows)
                    times[way].append(time.perf_counter() - t0)
                whole, swapped = built["whole"], built["from the previous"]
                same = whole.lexical.scores(QUERIES).tobytes() == swapped.lexical.scores(
                    QUERIES
                ).tobytes() and whole.like_this.scores(range(0, len(whole), 997)).tobytes() == (
                    swapped.like_this.scores(range(0, len(whole), 997)).tobytes()
                )
                same = same and (
                    whole.names.principal == swapped.names.principal
                    and whole.names.works.work == swapped.names.works.work
                )
                if not same:
                    raise SystemExit("the two swaps' BM25 scores or names differ")
                del built, whole, swapped
        engine.dispose()
    before, after = (statistics.median(times[k]) for k in times)
    ratios = [a / b for a, b in zip(times["from the previous"], times["whole"], strict=True)]
    out(
        f"swap to a 1% re-index of {len(previous):,} books ({len(diff.added)} rows in, "
        f"{len(diff.removed)} out), {args.rounds} rounds in turns: built whole "
        f"{before:.2f} s, from the previous generation {after:.2f} s (median); after / before "
        f"{after / before:.2f} (rounds {min(ratios):.2f}-{max(ratios):.2f}); BM25 scores "
        "and names identical"
    )


if __name__ == "__main__":
    main()
