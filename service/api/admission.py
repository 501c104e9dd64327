"""Admission of the work that ranks with books as the query (similar books, recommend): a
budget per request and a bound on the requests at once, so a flood of them cannot fill the
thread pool every plain `def` route runs in, nor the memory.

Measured before (issue 25, finding 6): 60 clients POSTing /recommend with 100 liked, 80 disliked
and k=100 held FastAPI's 40 worker threads, so `/healthz` (then a `def` route) waited 5.7 s
against 2 ms idle, a probe `/search` 1.1 s against 14 ms, and the server grew by 0.9 GB that it
kept. Here at most `running` requests rank at once, `waiting` more wait for a turn in the event
loop (holding no thread), and the rest are answered 429 at once with Retry-After, as
Elasticsearch's bounded search pool answers 429. When the last turn ends the freed heap goes
back to the OS (`on_idle`: service.engine.reloader.return_free_heap).
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from time import perf_counter

logger = logging.getLogger(__name__)

MAX_RETRY_AFTER_S = 60
_EWMA = 0.2  # weight of the latest turn in the mean turn's length


class BusyError(Exception):
    """Every turn is taken and every place in the queue: 429, Retry-After `retry_after_s`."""

    def __init__(self, message: str, retry_after_s: int):
        self.retry_after_s = retry_after_s
        super().__init__(message)


class OverBudgetError(ValueError):
    """A request asks for more liked books × k × heads than the budget: 422."""


class Turns:
    """At most `running` holders of a turn at once and `waiting` more waiting for one; past
    those `turn()` raises BusyError. Made in the event loop that uses it (the app's lifespan):
    its semaphore belongs to that loop."""

    def __init__(
        self, what: str, *, running: int, waiting: int, on_idle: Callable[[], None] | None = None
    ):
        self.what, self.running, self.waiting = what, running, waiting
        self.on_idle = on_idle
        self._free = asyncio.Semaphore(running)
        self._held = self._queued = 0
        self._mean_s = 0.0  # the mean turn's length, for Retry-After
        self._idle_task: asyncio.Future[None] | None = None

    @property
    def held(self) -> int:
        return self._held

    @asynccontextmanager
    async def turn(self) -> AsyncIterator[None]:
        if self._held >= self.running and self._queued >= self.waiting:
            retry = self.retry_after_s()
            logger.info(
                "%s: %d at once and %d waiting, answered 429",
                self.what,
                self.running,
                self.waiting,
            )
            raise BusyError(
                f"the server is busy with {self.what} ({self.running} at once, {self.waiting} "
                f"waiting): try again in {retry} s",
                retry,
            )
        self._queued += 1
        try:
            await self._free.acquire()
        finally:
            self._queued -= 1
        self._held += 1
        t0 = perf_counter()
        try:
            yield
        finally:
            self._held -= 1
            self._free.release()
            self._mean_s += _EWMA * (perf_counter() - t0 - self._mean_s)
            if self._held == 0 and self._queued == 0:
                self._idle()

    def retry_after_s(self) -> int:
        """Whole seconds until the turns held and queued now are likely done: 1 to 60."""
        drain = self._mean_s * (self._held + self._queued) / self.running
        return max(1, min(MAX_RETRY_AFTER_S, math.ceil(drain)))

    def _idle(self) -> None:
        """`on_idle` in a worker thread (asyncio's, not the routes' pool), once at a time."""
        if self.on_idle is None or (self._idle_task is not None and not self._idle_task.done()):
            return
        self._idle_task = asyncio.get_running_loop().run_in_executor(None, self.on_idle)


def check_budget(*, liked: int, k: int, heads: int, budget: int) -> None:
    """OverBudgetError when `liked` (more than one) × `k` × `heads` passes `budget`: a
    result's `because` holds a share per liked book and head, and the ranking a head per liked
    book. One liked book always fits (a similar-books request)."""
    asked = liked * k * heads
    if liked > 1 and asked > budget:
        raise OverBudgetError(
            f"this request asks for {liked} liked books × k={k} × {heads} heads = {asked:,}, "
            f"more than the {budget:,} one request may (ATTEND_BOOK_QUERY_BUDGET): ask for "
            "fewer liked books, a smaller k or fewer heads"
        )
