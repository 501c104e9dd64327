"""Keeping a running service on the active generation.

A thread polls the active generation's id every `poll_s` seconds (one indexed query). When it
changed, only the diff is read (rows that start or end between the two generations), folded
into the served index's rows (`ServedIndex.host_index`: its own tensors on the CPU, a transient
copy on a GPU), and a new `ServedIndex` is built beside the served one; the searcher then switches
to it with one attribute assignment, so every search is answered by one whole generation, never
a mix. Between switches no second copy of the keys is kept.

Where the keys are held (service/engine/startup.py `KeyPlacement`) gives the watcher its hooks:
on a cluster's shards (service/cluster/shards/placement.py) `ready` (every shard holds the new
generation), a full load (`incremental=False`: the router holds no keys to fold a diff into) and
`on_swap` (the shards may drop the older generations).

Generation ids are only comparable within one database: each poll also reads the database's
identity (`store.index_id`, written at its creation). Another identity (a database dropped and
re-created, a SQLite file replaced) means a full load of whatever it holds, an empty index
included, whatever its generation ids say. `serving_problem` is what /readyz asks.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import gc
import logging
import threading
import time
from collections.abc import Callable

from sqlalchemy import Engine, select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from indexer import db, loaded_index, store
from indexer.schema import Generation
from models import spare_arrays
from service.engine.searcher import Searcher
from service.engine.served_index import ServedIndex

logger = logging.getLogger(__name__)


def freeze_long_lived() -> None:
    """Keep the cycle collector off every object alive now: the served index (its columns, BM25
    postings: hundreds of thousands of objects), the model, the app.

    Each full collection walked them all, holding the GIL: in 2.5 minutes of benchmarks/soak.py
    the server ran 23 of them, 194 ms each at the median (292 at most), and those stalls were
    the single GETs' p99. gc.freeze() moves these objects to a permanent generation that
    collections skip; a full collection then took 2.7 ms at the median. Reference counting still
    frees them: a retired generation is acyclic (tests/test_long_lived.py), so it goes when the
    last request answered from it does. Garbage not yet collected is frozen too: at start-up,
    what the start left, once (not worth a full collection: 180 ms over 326,000 objects, at
    every start of the app, the tests' included); at a swap, nothing, since it collects before
    it freezes the new generation (`release_freed_memory`)."""
    gc.freeze()


def release_freed_memory() -> None:
    """After a swap: collect what the load left, freeze the new generation if the service
    froze the last one (`freeze_long_lived`), and hand the freed heap back to the OS. glibc
    keeps freed pages in its arenas for reuse, so each swap (a new index's keys, filter columns
    and BM25 index beside the old ones, then the old freed) left the process larger by what the
    heap could not give back; malloc_trim(0) returns every free page. A no-op where there is no
    glibc. The batches' kept arrays (models/spare_arrays.py), sized for the last generation's
    books, are let go too: the next batches make them for the new one."""
    gc.collect()  # the frozen objects are skipped: this walks what came since the last freeze
    if gc.get_freeze_count():
        gc.freeze()
    spare_arrays.release()
    return_free_heap()


def return_free_heap() -> None:
    """malloc_trim(0): every free page of every glibc arena back to the OS. Also after a burst
    of book-as-query requests (service/api/admission.py): their rankings' arrays, freed in the
    worker threads' arenas, otherwise stayed in the process (545 MB grew to 2.2 GB and stayed).
    A no-op where there is no glibc."""
    if (trim := _malloc_trim()) is not None:
        trim(0)


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's malloc_trim, looked up once: find_library runs `ldconfig -p` in a subprocess."""
    try:
        trim: Callable[[int], int] = ctypes.CDLL(
            ctypes.util.find_library("c") or "libc.so.6"
        ).malloc_trim
    except (OSError, AttributeError):
        return None
    return trim


class GenerationWatcher:
    """Swaps the searcher's served index to each newly activated generation."""

    def __init__(
        self,
        *,
        engine: Engine,
        searcher: Searcher,
        build: Callable[..., ServedIndex],
        poll_s: float,
        ready: Callable[[int], bool] | None = None,
        incremental: bool = True,
        on_swap: Callable[[ServedIndex], None] | None = None,
    ):
        self.engine = engine
        self.searcher = searcher
        self.build = build
        self.poll_s = poll_s
        self.ready = ready  # False: not yet (asked again at the next check)
        self.incremental = incremental  # fold the diff into the served index's rows
        self.on_swap = on_swap  # called with the new index once it serves
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failing = False  # the last poll failed (logged once per outage, not each poll)
        # the identity of the database the served index was read from (just now, at start-up)
        self.index_id: str | None = None
        try:
            with Session(engine) as session:
                self.index_id = store.index_id(session=session)
        except (SQLAlchemyError, db.DatabaseGoneError) as e:
            logger.warning("could not read the index id at start: %s", e)

    @property
    def generation(self) -> int | None:
        return self.searcher.index.generation

    def start(self) -> None:
        if self.poll_s <= 0:
            return
        self._thread = threading.Thread(target=self._loop, name="attend-generations", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None

    def _loop(self) -> None:
        while not self._stop.wait(self.poll_s):
            try:
                self.check()
            except (SQLAlchemyError, db.DatabaseGoneError) as e:  # the database is down
                if not self._failing:
                    logger.warning("the database does not answer (%s); polling on", e)
                self._failing = True
            except Exception:  # a bug: every time, with its traceback; the polling goes on
                logger.exception("checking for a new index generation failed")
            else:
                if self._failing:
                    logger.info("the database answers again")
                self._failing = False

    def serving_problem(self) -> str | None:
        """Why the served index is not the database's, or None: another database (its
        identity), or a served generation the database no longer holds. A newer active
        generation is no problem: the next check swaps to it."""
        served = self.searcher.index.generation
        with Session(self.engine) as session:
            now = store.index_id(session=session)
            if now != self.index_id:
                return "the database was replaced (another index id): reloading"
            if served is None:
                return None
            state = session.scalar(select(Generation.state).where(Generation.id == served))
        if state is None:
            return f"the database no longer holds generation {served}, the one served"
        return None

    def check(self) -> bool:
        """Swap to the active generation if it is not the one served; True if it swapped."""
        with self._lock:  # a check that returns has seen the whole swap, its freeze included
            swapped = self._swap()
            if swapped:  # the old generation's last reference went with _swap's frame
                release_freed_memory()
        return swapped

    def _swap(self) -> bool:
        t0 = time.perf_counter()
        old = self.searcher.index
        with Session(self.engine) as session:
            index_id = store.index_id(session=session)
            g = store.active_generation_id(session=session)
            replaced = index_id != self.index_id
            if not replaced and (g is None or g == old.generation):
                return False
            if g is not None and self.ready is not None and not self.ready(g):
                logger.debug("generation %d is active but not ready to serve yet", g)
                return False
            if replaced:
                logger.warning(
                    "the database was replaced (index id %s, was %s): a full load",
                    index_id,
                    self.index_id,
                )
            if (
                replaced
                or g is None
                or not self.incremental
                or old.generation is None
                or g < old.generation
            ):
                index = loaded_index.load_index(session=session, model=old.model, generation=g)
                how = "full load"
                served = self.build(index, session)
            else:
                diff = loaded_index.load_diff(
                    session=session, model=old.model, since=old.generation, until=g
                )
                host = old.host_index()
                order = loaded_index.diff_order(host, diff, old.row_of)
                index = loaded_index.apply_diff(host, diff, order)
                how = f"diff: {len(diff.added)} rows in, {len(diff.removed)} out"
                served = self.build(index, session, follows=(old, diff, order))
        self.searcher.index = served  # atomic: a batch reads the attribute once
        self.index_id = index_id
        logger.info(
            "serving generation %s (%d books; %s) after %.2f s",
            g,
            len(index),
            how,
            time.perf_counter() - t0,
        )
        if self.on_swap is not None:  # after the log: it serves already (a form written, say)
            self.on_swap(served)
        return True
