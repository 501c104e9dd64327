"""How `attend index` shows a run's progress: a tqdm bar on a terminal's stderr, else (a log
file, CI, a pipe) a line on stderr every 5 s of the indexing, and a last one at its end once
one was written: a run of a few seconds writes none."""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from indexer.progress import ProgressSnapshot


class ProgressBar:
    """tqdm on a terminal's stderr: books done, books/s, the ETA and the texts embedded."""

    def __init__(self) -> None:
        from tqdm import tqdm

        self._bar = tqdm(total=0, unit="book", desc="starting")

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


LINE_EVERY_S = 5.0


class _Lines:
    """The run whose lines are being written (its start) and when the last was."""

    started = 0.0
    last = 0.0
    written = False


def log_progress(p: ProgressSnapshot) -> None:
    """Without a terminal: a line on stderr every LINE_EVERY_S of the indexing (not only at -v:
    a run of minutes is otherwise silent until its summary)."""
    if p.state != "indexing" or not p.done:
        return
    now = time.monotonic()
    if _Lines.started != p.started:  # a new run
        _Lines.started, _Lines.last, _Lines.written = p.started, now, False
    end = p.done >= p.total
    if not (now - _Lines.last >= LINE_EVERY_S or (end and _Lines.written)):
        return
    _Lines.last, _Lines.written = now, not end
    eta = f", ETA {p.eta_s:.0f} s" if p.eta_s is not None and not end else ""
    sys.stderr.write(
        f"attend index: generation {p.generation}: {p.done:,}/{p.total:,} books "
        f"({p.books_per_second:.1f} books/s{eta}), {p.embedded:,} texts embedded\n"
    )
    sys.stderr.flush()
