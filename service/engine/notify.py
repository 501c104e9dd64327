"""Generation switches pushed to every replica: PostgreSQL LISTEN/NOTIFY.

`indexer.generations.finish` notifies the channel in the switch's own transaction, so the
notification arrives when the new generation is committed and readable. Each replica listens on
its own connection and asks its `GenerationWatcher` to check at once; polling
(`ATTEND_GENERATION_POLL_S`) stays the fallback (a dropped connection, a missed notification)
and is the only path on SQLite, which has no notifications.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import psycopg
from sqlalchemy import Engine
from sqlalchemy.engine import URL

from indexer.generations import NOTIFY_CHANNEL
from service.engine.reloader import GenerationWatcher

logger = logging.getLogger(__name__)


class GenerationListener:
    """A thread that calls `on_switch` whenever a generation switch is notified."""

    def __init__(self, url: URL, on_switch: Callable[[], object], *, retry_s: float = 2.0):
        # libpq's own URI: the SQLAlchemy URL without the +psycopg driver suffix
        self.conninfo = url.set(drivername="postgresql").render_as_string(hide_password=False)
        self.on_switch = on_switch
        self.retry_s = retry_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.listening = threading.Event()  # set while LISTEN is in effect

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="attend-listen", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self._listen()
            except Exception:  # the server went away: polling covers the gap, then retry
                logger.warning("LISTEN %s failed; retrying in %.0f s", NOTIFY_CHANNEL, self.retry_s)
            self.listening.clear()
            self._stop.wait(self.retry_s)

    def _listen(self) -> None:
        with psycopg.connect(self.conninfo, autocommit=True) as conn:
            conn.execute(f"LISTEN {NOTIFY_CHANNEL}")
            self.listening.set()
            logger.info("listening for generation switches on %s", NOTIFY_CHANNEL)
            while not self._stop.is_set():
                for note in conn.notifies(timeout=1.0):
                    logger.info("generation %s activated (notified)", note.payload)
                    self.on_switch()


def follow_generations(engine: Engine, watcher: GenerationWatcher | None) -> Callable[[], None]:
    """Start `watcher` (polling) and, on PostgreSQL, a listener that makes it check at each
    notified switch; returns what stops both."""
    if watcher is None:
        return lambda: None
    listener = GenerationListener(engine.url, watcher.check)
    watcher.start()
    if engine.dialect.name == "postgresql":
        listener.start()

    def stop() -> None:
        listener.close()
        watcher.close()

    return stop
