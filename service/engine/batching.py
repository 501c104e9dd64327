"""Which queries the search worker answers next: the line of waiting requests, and its policy.

Requests that queue up while a batch is being answered form the next batch; once load is seen
(the last batch had company) a batch also waits up to `window` for more, so a lone request on an
idle service never waits. A batch takes the waiting requests' queries in turn, one each per
round, up to `max_batch`: a request of 64 queries is answered over several batches beside the
others, so it cannot make a single query wait behind it (twenty of them once kept one GET
waiting 19 s in arrival order), and batches stay full.

While small requests (a few queries) are about, batches alternate: the small requests alone,
then a batch whose big part is cut to `batch_budget_s` of worker time (by the measured cost per
query of such batches), the small requests that came meanwhile on top. And a batch with big
work is encoded a few queries at a time (`encode_chunk`); between those calls the worker
answers the small requests that arrived (`small_batch`), so a single query waits for one
encoder call of big work, not for a whole batch: the encoder's cost is linear in the batch, so
a small request batched with big work paid for all of it.

Work that is no typed search (a book as the query, an explanation: a `Call`) waits in a line of
its own and takes turns with the batches: one call, then one batch, while both wait.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from dataclasses import dataclass

from service.engine.tickets import Call, Ticket

SMALL_REQUEST = 4  # queries: a request this small is interactive, and goes first in a batch
SMALL_SEEN_S = 1.0  # small requests count as about this long after the last one arrived
# Fewest queries in a batch the budget cuts: where a batch's fixed cost alone passes the budget
# (a loaded machine), budget / cost per query would shrink batches to 1 and throughput with them;
# 8 queries cost 4.2 ms each here against 3.7 in batches of 64. 4: the encoder's cost is linear
# in the batch (about 7 ms a query at 1, 8 or 64 on a loaded 2-core machine), and a small request
# waits for the batch before it (benchmarks/soak.py).
BUDGET_FLOOR = 4
# Queries per encoder call of a batch with big work while small requests are about. One query
# alone costs 3.0 ms here, 4 in one call 2.1 ms each, 16 1.9, 64 1.9 (benchmarks/soak.py's
# machine, idle): 4 is 11% dearer than one call for all. Without small requests about, 16: the
# first one to come waits for 16 queries' encoding, not a whole batch's.
ENCODE_CHUNK = 4


@dataclass
class Slice:
    """Queries [start, stop) of one ticket, answered in one batch."""

    ticket: Ticket
    start: int
    stop: int

    @property
    def queries(self) -> list[str]:
        return self.ticket.queries[self.start : self.stop]

    @property
    def big(self) -> bool:
        """Part of more work than a small request (its queries and those after it)."""
        return len(self.ticket.queries) - self.start > SMALL_REQUEST


class WaitingLine:
    """The tickets with queries not yet in a batch, in turn; thread-safe."""

    def __init__(self, *, max_batch: int, window_s: float, batch_budget_s: float):
        self.max_batch = max_batch
        self.window = window_s
        self.batch_budget_s = batch_budget_s  # 0: batches sized by max_batch alone
        self.small_seen_s = SMALL_SEEN_S
        self._waiting: deque[Ticket] = deque()
        self._calls: deque[Call] = deque()
        self._call_next = False  # the last thing handed out was a batch: a waiting call next
        self._cost: float | None = None  # seconds per query of recent big batches (EWMA)
        self._small_seen = -math.inf  # when the last small request arrived (monotonic)
        self._small_next = False  # the last batch held big work: small requests alone next
        self._changed = threading.Condition()  # a ticket arrived, or stop() was called
        self._stopping = False

    def add(self, ticket: Ticket) -> None:
        with self._changed:
            self._waiting.append(ticket)
            if len(ticket.queries) <= SMALL_REQUEST:
                self._small_seen = time.monotonic()
            self._changed.notify()

    def call(self, call: Call) -> None:
        with self._changed:
            self._calls.append(call)
            self._changed.notify()

    def open(self) -> None:
        self._stopping = False

    def stop(self) -> None:
        """Wake the worker waiting in `next_batch`, which then returns None."""
        with self._changed:
            self._stopping = True
            self._changed.notify()

    def pending(self) -> bool:
        return bool(self._waiting or self._calls)

    def drop(self, tickets: set[int]) -> None:
        """Forget the tickets whose ids are in `tickets` (failed: the rest is not answered)."""
        with self._changed:
            self._waiting = deque(ticket for ticket in self._waiting if id(ticket) not in tickets)

    def next_batch(self, *, wait: bool) -> list[Slice] | Call | None:
        """The next batch, once a ticket waits (None once stop() is called): when `wait`, after
        up to `window` for more to arrive, unless the waiting tickets fill a batch already. Or a
        waiting call: in turn with the batches, and whenever no ticket waits."""
        with self._changed:
            while not self._waiting and not self._calls and not self._stopping:
                self._changed.wait()
            if self._stopping:
                return None
            if self._calls and (self._call_next or not self._waiting):
                self._call_next = False
                return self._calls.popleft()
            self._call_next = True
            deadline = time.monotonic() + (self.window if wait else 0.0)
            while (left := deadline - time.monotonic()) > 0 and self._unbatched() < self.max_batch:
                self._changed.wait(timeout=left)
                if self._stopping:
                    return None
            return self._take()

    def small_batch(self) -> list[Slice]:
        """The waiting small requests, whole, in turn, up to `max_batch` queries: to answer
        between the encoder calls of a batch with big work. Small from the start, untouched:
        the last queries of a big request may be in the very batch this one interrupts, and a
        request's answers are in its order."""
        with self._changed:
            self._drop_cancelled()
            batch: list[Slice] = []
            size = 0
            for ticket in self._waiting:
                n = len(ticket.queries)
                if ticket.taken == 0 and n <= SMALL_REQUEST and size + n <= self.max_batch:
                    batch.append(Slice(ticket, 0, n))
                    size += n
                    ticket.taken = n
            if batch:
                self._waiting = deque(ticket for ticket in self._waiting if ticket.left > 0)
            return batch

    def encode_chunk(self) -> int:
        """Queries per encoder call of a batch with big work."""
        return ENCODE_CHUNK if self._small_about() else 4 * ENCODE_CHUNK

    def _small_about(self) -> bool:
        """Whether a small request arrived within the last `small_seen_s`."""
        return time.monotonic() - self._small_seen <= self.small_seen_s

    def measure(self, seconds: float, queries: int) -> None:
        """Fold a big batch's time into the running cost per query (an EWMA). Per query, not
        per batch: the size it gives, budget / cost, settles where a batch takes the budget,
        since a smaller batch's fixed cost raises its cost per query."""
        cost = seconds / max(queries, 1)
        self._cost = cost if self._cost is None else 0.8 * self._cost + 0.2 * cost

    def _limit(self) -> int:
        """Most queries in the next batch: `max_batch`, or while small requests are about and
        a big one waits too, what fits `batch_budget_s` at the measured cost (at least
        BUDGET_FLOOR)."""
        if self.batch_budget_s <= 0 or self._cost is None:
            return self.max_batch
        if not self._small_about():
            return self.max_batch
        if all(ticket.left <= SMALL_REQUEST for ticket in self._waiting):
            return self.max_batch  # small requests only: a full batch serves them best
        fits = int(self.batch_budget_s / self._cost)
        return min(self.max_batch, max(BUDGET_FLOOR, fits))

    def _drop_cancelled(self) -> None:
        """Forget the tickets whose clients are gone. Called under the lock."""
        self._waiting = deque(ticket for ticket in self._waiting if not ticket.future.cancelled())

    def _unbatched(self) -> int:
        return sum(ticket.left for ticket in self._waiting)

    def _take(self) -> list[Slice]:
        """Up to `_limit()` queries from the waiting tickets, one from each in turn, small
        requests first; a ticket with queries left over goes to the back of the line. Called
        under the lock."""
        self._drop_cancelled()
        small = [ticket for ticket in self._waiting if ticket.left <= SMALL_REQUEST]
        # after a batch that held big work, small requests alone (a batch of a few queries,
        # short), then big work again with the small requests that came meanwhile in front
        alone = self._small_next and self.batch_budget_s > 0 and 0 < len(small) < len(self._waiting)
        limit = self.max_batch if alone else self._limit()
        if not alone and limit < self.max_batch:  # the budget is the big work's: small ones
            limit = min(self.max_batch, limit + sum(ticket.left for ticket in small))  # come on top
        # the smallest requests first in each round (a stable sort: in turn among equals)
        turn = small if alone else sorted(self._waiting, key=lambda j: j.left > SMALL_REQUEST)
        counts: dict[int, int] = {}
        order: list[Ticket] = []
        size, progressed = 0, True
        while size < limit and progressed:
            progressed = False
            for ticket in turn:
                if size == limit:
                    break
                if ticket.taken + counts.get(id(ticket), 0) < len(ticket.queries):
                    if id(ticket) not in counts:
                        order.append(ticket)
                    counts[id(ticket)] = counts.get(id(ticket), 0) + 1
                    size += 1
                    progressed = True
        batch = []
        for ticket in order:
            batch.append(Slice(ticket, ticket.taken, ticket.taken + counts[id(ticket)]))
            ticket.taken += counts[id(ticket)]
        self._small_next = any(piece.big for piece in batch)
        unfinished = [ticket for ticket in order if ticket.taken < len(ticket.queries)]
        untouched = [ticket for ticket in self._waiting if id(ticket) not in counts]
        self._waiting = deque(untouched + unfinished)
        return batch
