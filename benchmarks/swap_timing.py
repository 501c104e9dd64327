"""The reloader's swap (service/engine/reloader.py: the diff read, applied, and the served index
made from the previous one) timed in this process, phase by phase, from generation 1 of
benchmarks/growth_swap.py's catalog (served from its served form, written on the first run) to
generation 2 (1% of the descriptions edited).

    .venv/bin/python -m benchmarks.swap_timing --folder /tmp/g1m --books 1000000 --rounds 3

It runs on the code before `diff_order` too, for a side-by-side on one index: copy this file
into a worktree of the older code (`git worktree add DIR REV`) and run it there with
`PYTHONPATH=DIR`, the same `--folder` (each code writes its own served form beside it).
"""

from __future__ import annotations

import argparse
import gc
import logging
import statistics
import time
from pathlib import Path

from sqlalchemy.orm import Session

from benchmarks._common import out, run_as_the_service
from benchmarks.growth_swap import prepare
from indexer import db, loaded_index
from models.defaults import DEFAULT_MODEL
from service.config.settings import ServiceSettings
from service.engine import startup


class FirstGeneration(startup.LocalPlacement):
    """Serves generation 1 (the database's active one is 2)."""

    def first(self, active: int | None) -> int | None:
        return 1


def main() -> None:
    run_as_the_service()
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--folder", type=Path, required=True, help="the index, made if missing")
    parser.add_argument("--books", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tag", default="this", help="the served form's folder's suffix")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    args.folder.mkdir(parents=True, exist_ok=True)
    url = prepare(args.folder, args.books)
    engine = db.create_db_engine(url)
    placement = FirstGeneration(ServiceSettings(database_url=url, device="cpu"))
    moved_in_order = hasattr(loaded_index, "diff_order")  # the code before had none
    with Session(engine) as session:
        t0 = time.perf_counter()
        forms = args.folder / f"forms-{args.tag}"
        previous = startup.load_served(placement, session, model=DEFAULT_MODEL, forms=forms)
        out(f"generation 1 of {len(previous):,} books ready in {time.perf_counter() - t0:.1f} s")
        times = []
        for _ in range(args.rounds):
            gc.collect()
            t0 = time.perf_counter()
            diff = loaded_index.load_diff(session=session, model=DEFAULT_MODEL, since=1, until=2)
            t1 = time.perf_counter()
            host = previous.host_index()
            if moved_in_order:
                order = loaded_index.diff_order(host, diff, previous.row_of)
                index = loaded_index.apply_diff(host, diff, order)
                follows: tuple[object, ...] = (previous, diff, order)
            else:
                index = loaded_index.apply_diff(host, diff)
                follows = (previous, diff)
            t2 = time.perf_counter()
            startup.build_served(placement, index, session, follows=follows)  # type: ignore[arg-type]
            t3 = time.perf_counter()
            times.append(t3 - t0)
            out(
                f"swap {t3 - t0:.2f} s: diff read {t1 - t0:.2f}, applied {t2 - t1:.2f}, "
                f"served index {t3 - t2:.2f} ({len(diff.added)} rows in, {len(diff.removed)} out)"
            )
            del index, diff, follows
    engine.dispose()
    out(f"median swap {statistics.median(times):.2f} s over {args.rounds} rounds")


if __name__ == "__main__":
    main()
