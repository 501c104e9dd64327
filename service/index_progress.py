"""How `attend index` shows a run's progress: a tqdm bar on a terminal's stderr, else a log
line every 5 s at INFO (-v)."""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from indexer.progress import ProgressSnapshot

logger = logging.getLogger("attend")


class ProgressBar:
    """tqdm on a terminal's stderr: books done, books/s, the ETA and the texts embedded."""

    def __init__(self) -> None:
        from tqdm import tqdm

        self._bar = tqdm(total=0, unit="book", desc="loading the model")

    def update(self, p: ProgressSnapshot) -> None:
        if p.state == "validating":
            self._bar.set_description("validating")
        elif p.state == "indexing":
            if self._bar.total != p.total:
                self._bar.reset(total=p.total)
                self._bar.set_description(f"generation {p.generation}")
            # the postfix first: update() redraws, and would show the last batch's count
            # (embedded=0 at 100% for a catalog of one batch)
            self._bar.set_postfix(embedded=p.embedded, refresh=False)
            self._bar.update(p.done - self._bar.n)

    def close(self) -> None:
        self._bar.close()


_last_log = [0.0]


def log_progress(p: ProgressSnapshot) -> None:
    """Without a terminal: a log line at most every 5 s."""
    recent = time.monotonic() - _last_log[0] < 5
    if p.state != "indexing" or not p.done or (recent and p.done < p.total):
        return
    _last_log[0] = time.monotonic()
    eta = f"{p.eta_s:.0f} s" if p.eta_s is not None else "?"
    logger.info(
        "generation %s: %d/%d books (%.1f books/s, ETA %s), %d texts embedded",
        p.generation,
        p.done,
        p.total,
        p.books_per_second,
        eta,
        p.embedded,
    )
