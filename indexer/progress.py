"""A run's progress: where it stands (`ProgressSnapshot`), written by the run and read from any
thread (a progress bar, the admin API's job status)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace


@dataclass(frozen=True)
class ProgressSnapshot:
    """Where a run stands. `state`: idle, validating, indexing, finishing, done or failed."""

    state: str = "idle"
    total: int = 0  # valid books in the catalog
    done: int = 0  # books processed (written or found unchanged)
    embedded: int = 0  # texts embedded so far
    generation: int | None = None  # the generation being built
    started: float = 0.0  # time.monotonic() at the start
    finished: float | None = None

    @property
    def elapsed_s(self) -> float:
        if not self.started:
            return 0.0
        return (self.finished or time.monotonic()) - self.started

    @property
    def books_per_second(self) -> float:
        return self.done / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def eta_s(self) -> float | None:
        rate = self.books_per_second
        return (self.total - self.done) / rate if rate > 0 and self.state == "indexing" else None


class Progress:
    """A run's progress, written by the run and read from any thread (`snapshot()`); each
    change is also handed to `listener` (a progress bar)."""

    def __init__(self, listener: Callable[[ProgressSnapshot], None] | None = None):
        self._lock = threading.Lock()
        self._now = ProgressSnapshot()
        self.listener = listener

    def snapshot(self) -> ProgressSnapshot:
        with self._lock:
            return self._now

    def update(self, **changes: object) -> None:
        with self._lock:
            self._now = replace(self._now, **changes)  # type: ignore[arg-type]
            now = self._now
        if self.listener is not None:
            self.listener(now)
