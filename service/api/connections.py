"""Counting the connections of `attend serve` (service/api/server.py): the bound in all, which
the file limit must hold, and the bound per client address, with the refusals logged sparingly.

Without the per-address bound one client held all 1,000 connections, reopening each as its
header deadline closed it, and another client got in on 3 of 71 tries (issue 25, finding 5).
"""

from __future__ import annotations

import logging
import math
import resource
import time

logger = logging.getLogger(__name__)

# File descriptors kept for everything but client sockets: the database pool, the model's files,
# log handlers, the listening socket, and headroom.
RESERVED_FDS = 256


class Refusals:
    """Connections closed at a bound, logged at most every 10 s: a flood of them must not
    flood the log too. `what` says which bound, with `%d` for it."""

    def __init__(self, limit: int, what: str):
        self.limit, self.what = limit, what
        self.count = 0
        self.logged_at = -math.inf

    def note(self) -> None:
        self.count += 1
        if (now := time.monotonic()) - self.logged_at >= 10:
            logger.warning("%s: closed %d new connection(s)", self.what % self.limit, self.count)
            self.count, self.logged_at = 0, now


class PerClient:
    """Open connections by client address: one address may hold at most `limit`."""

    def __init__(self, limit: int):
        self.limit = limit
        self.open: dict[str, int] = {}

    def admit(self, address: str) -> bool:
        if (n := self.open.get(address, 0)) >= self.limit:
            return False
        self.open[address] = n + 1
        return True

    def leave(self, address: str) -> None:
        if (n := self.open[address] - 1) > 0:
            self.open[address] = n
        else:
            del self.open[address]  # the map holds only the addresses with connections open


def connection_bound(wanted: int) -> int:
    """`wanted`, or fewer if the file limit cannot be raised to hold them; raises the soft limit
    towards the hard one as needed."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = wanted + RESERVED_FDS
    if soft != resource.RLIM_INFINITY and soft < need:
        target = need if hard == resource.RLIM_INFINITY else min(need, hard)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError) as e:
            logger.warning("could not raise the file limit to %d: %s", target, e)
    if soft != resource.RLIM_INFINITY and soft < need:
        bound = max(1, soft - RESERVED_FDS)
        logger.warning(
            "the file limit (%d) holds %d connections, not ATTEND_MAX_CONNECTIONS=%d",
            soft,
            bound,
            wanted,
        )
        return bound
    return wanted
