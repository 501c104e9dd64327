"""The life of a generation, and the one-writer lock.

`begin` opens a building generation, or resumes the one a crashed run left (its committed
batches stay; their vectors are found by hash and not embedded again). `finish` is the switch:
one transaction retires the active generation and activates the building one, or discards it
when nothing changed. `abandon` undoes a building generation that cannot be resumed. Only one
writer at a time: `writer_lock` is a PostgreSQL advisory lock or, on SQLite, an OS lock on a
file beside the database, both released by the operating system if the writer dies.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import Engine, delete, func, select, text, update
from sqlalchemy.orm import Session, aliased

from indexer import store
from indexer.schema import ACTIVE, BUILDING, FAILED, RETIRED, Book, Generation

logger = logging.getLogger(__name__)

_ADVISORY_KEY = 0x41_74_74_65_6E_64  # "Attend"
# PostgreSQL channel a switch notifies (service/engine/notify.py listens): delivered on commit only,
# so a replica never hears of a generation it could not yet read.
NOTIFY_CHANNEL = "attend_generations"


class IndexBusyError(RuntimeError):
    """Another writer (an `attend index`, `attend delete` or an admin re-index) is running. The
    message names no database: an admin job shows it to a client, and a URL's user, host, port
    and database name are not a client's to read (issue 50)."""

    def __init__(self, message: str | None = None):
        super().__init__(
            message
            or "another indexer is writing to this index (an `attend index`, `attend delete` "
            "or an admin re-index): wait until it has finished, then run this again"
        )


@contextlib.contextmanager
def writer_lock(engine: Engine) -> Iterator[None]:
    """Hold the database's one-writer lock, or raise `IndexBusyError` at once."""
    if engine.dialect.name == "postgresql":
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            got = conn.scalar(text("SELECT pg_try_advisory_lock(:k)"), {"k": _ADVISORY_KEY})
            if not got:
                raise IndexBusyError()
            try:
                yield
            finally:
                conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": _ADVISORY_KEY})
        return
    database = engine.url.database
    if not database or database == ":memory:":
        yield
        return
    with Path(f"{database}.index-lock").open("a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise IndexBusyError() from None
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def building_generation(*, session: Session) -> Generation | None:
    return session.scalars(select(Generation).where(Generation.state == BUILDING)).first()


def begin(
    *, session: Session, model: str, catalog: str | None, source: str | None = None
) -> tuple[Generation, bool]:
    """The generation to build: the building one a crashed run left, when it is for the same
    model and built from the same `source` (the catalog's name, its bytes' digest, the run's
    flags; True: resumed), else a new one. A run of another catalog does not resume it: with
    `--keep-missing` it would keep the killed run's rows, books of a catalog never completed."""
    building = building_generation(session=session)
    if building is not None and building.model == model and resumable(building, source):
        logger.info("resuming generation %d, left building by an earlier run", building.id)
        building.catalog = catalog
        return building, True
    if building is not None:
        why = (
            f"a run with model {model!r}"
            if building.model != model
            else f"a run of another catalog or other flags ({catalog!r})"
        )
        logger.warning(
            "generation %d was left building by an interrupted run of %r; not resumed by %s: "
            "its rows are discarded and a new generation begins",
            building.id,
            building.catalog,
            why,
        )
        abandon(session=session, generation=building, error=f"superseded by {why}")
    generation = Generation(
        state=BUILDING,
        model=model,
        catalog=catalog,
        source=source,
        books=0,
        added=0,
        updated=0,
        removed=0,
        rejected=0,
    )
    session.add(generation)
    session.flush()
    return generation, False


def resumable(building: Generation, source: str | None) -> bool:
    """Whether a run from `source` may resume `building`: the same source, known (a generation
    an older version left building has none, and a run with none, the deletions, resumes
    nothing)."""
    return source is not None and building.source == source


@dataclass(frozen=True)
class Counts:
    books: int
    added: int
    updated: int
    removed: int

    @property
    def changed(self) -> bool:
        return bool(self.added or self.updated or self.removed)


def count_changes(*, session: Session, generation: int) -> Counts:
    """What `generation` changes against the rows before it."""
    new = session.scalar(select(func.count()).where(Book.valid_from == generation)) or 0
    closed = session.scalar(select(func.count()).where(Book.valid_to == generation)) or 0
    old = aliased(Book)
    updated = (
        session.scalar(
            select(func.count())
            .select_from(Book)
            .join(old, (old.id == Book.id) & (old.valid_to == generation))
            .where(Book.valid_from == generation)
        )
        or 0
    )
    books = store.count_books(session=session, generation=generation)
    return Counts(books, new - updated, updated, closed - updated)


def finish(*, session: Session, generation: Generation, rejected: int = 0) -> Counts:
    """The switch: activate `generation` and retire the active one, in the caller's one
    transaction; a generation that changes nothing is discarded instead."""
    counts = count_changes(session=session, generation=generation.id)
    if not counts.changed:
        session.delete(generation)
        return counts
    session.execute(update(Generation).where(Generation.state == ACTIVE).values(state=RETIRED))
    generation.state = ACTIVE
    generation.books = counts.books
    generation.added, generation.updated = counts.added, counts.updated
    generation.removed, generation.rejected = counts.removed, rejected
    generation.finished_at = datetime.now(UTC)
    if session.get_bind().dialect.name == "postgresql":
        session.execute(
            text("SELECT pg_notify(:channel, :generation)"),
            {"channel": NOTIFY_CHANNEL, "generation": str(generation.id)},
        )
    return counts


def abandon(*, session: Session, generation: Generation, error: str) -> None:
    """Undo a building generation: its rows go, the rows it closed are open again."""
    g = generation.id
    session.execute(delete(Book).where(Book.valid_from == g))
    session.execute(update(Book).where(Book.valid_to == g).values(valid_to=None))
    generation.state, generation.error = FAILED, error
    generation.finished_at = datetime.now(UTC)
    logger.warning("generation %d failed: %s", g, error)
