"""Whether the database is the index the keys came from, and the keys' shards answer, asked on
a thread of its own.

/readyz asks it: the database answers, at this service's schema, is the one the keys were loaded
from and still holds the generation served. Its checks block on the database, so they run in
a thread; in the routes' shared thread pool they queued behind whatever filled it: under 60
clients of big /recommend requests /readyz took 5.3 s at the median against 8 ms idle (issue 25,
finding 6), and compose's healthcheck gives up after 3 s. Here they have one thread, and the
probes that arrive while a check runs share its answer rather than queue behind it.
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor

from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError

from indexer import db
from service.engine.database_errors import Reporter
from service.engine.reloader import GenerationWatcher
from service.engine.served_index import KeyStore

logger = logging.getLogger(__name__)


def database_problem(
    engine: Engine, watcher: GenerationWatcher | None, report: Reporter | None = None
) -> str | None:
    """Why the database is not the served index's (a sentence, and a log reference where the
    database failed: the driver's text is in the log, never in the answer), or None. Blocks
    on it."""
    try:
        db.check_sqlite_file(engine)  # a truncated file: pooled connections answer from cache
        revision, head = db.current_revision(engine), db.head_revision()
        if revision != head:  # a truncated or foreign file has no (or another) schema
            where = "has no Attend schema" if revision is None else f"is at revision {revision}"
            return f"the database {where}, this service needs {head}"
        return watcher.serving_problem() if watcher is not None else None
    except (SQLAlchemyError, db.DatabaseGoneError) as e:
        return (report or Reporter("the readiness check"))(e)


class Readiness:
    """`database_problem` on its own thread, one check at a time. Made in the event loop that
    awaits it (the app's lifespan)."""

    def __init__(self) -> None:
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="attend-readiness")
        self._running: asyncio.Future[str | None] | None = None
        # the running check's engine, watcher and keys
        self._asked: tuple[Engine, GenerationWatcher | None, KeyStore | None] | None = None
        self._report = Reporter("the readiness check")

    async def problem(
        self, engine: Engine, watcher: GenerationWatcher | None, keys: KeyStore | None = None
    ) -> str | None:
        """The answer of the check of `engine` (and of `keys`: a shard that does not answer)
        running now, or of a new one if none is."""
        asked = (engine, watcher, keys)
        if self._running is None or self._running.done() or self._asked != asked:
            loop = asyncio.get_running_loop()
            self._running = loop.run_in_executor(self._thread, self._check, *asked)
            self._asked = asked
        # shielded: a probe that hangs up must not cancel the answer the others wait for
        return await asyncio.shield(self._running)

    def _check(
        self, engine: Engine, watcher: GenerationWatcher | None, keys: KeyStore | None
    ) -> str | None:
        problem = database_problem(engine, watcher, self._report)
        return problem if problem is not None or keys is None else keys.unanswered()

    def close(self) -> None:
        """Waits for a check under way: it uses the engine, which is disposed of next."""
        self._thread.shutdown(wait=True, cancel_futures=True)
