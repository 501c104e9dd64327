"""What `attend index`, `attend delete` and `attend db` do, and the database helpers every
command shares (service/cli.py parses the command line and calls these). As in the CLI, the
heavy modules are imported inside each function, when the command runs."""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import logging
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sqlalchemy import Engine

    from indexer import pipeline
    from indexer.catalog import CatalogSnapshot
    from indexer.settings import IndexSettings

logger = logging.getLogger("attend")

NO_INDEX_HINT = (
    "index a catalog first: `attend index CATALOG` (or `attend demo` for the bundled one), or "
    "point --database-url or ATTEND_DATABASE_URL at an index"
)


class NoIndexError(RuntimeError):
    """The database a reading command was pointed at holds no Attend index at all."""


class RayMissingError(RuntimeError):
    pass


def overrides(args: argparse.Namespace, names: Sequence[str]) -> dict[str, Any]:
    """The options given on the command line, as settings fields (they win over ATTEND_*)."""
    return {k: getattr(args, k) for k in names if getattr(args, k, None) is not None}


def database_url_of(args: argparse.Namespace) -> str:
    from indexer.settings import StoreSettings

    return args.database_url or StoreSettings().database_url


def sqlite_file(url: str) -> Path | None:
    """The file of a SQLite URL (None for other databases and in-memory SQLite)."""
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return None
    return Path(parsed.database)


def shown(url: str) -> str:
    """`url` without its password, a relative SQLite path made absolute (where the file is)."""
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    file = sqlite_file(url)
    if file is not None:
        parsed = parsed.set(database=str(file.resolve()))
    return parsed.render_as_string(hide_password=True)


def open_index(url: str) -> Engine:
    """An engine on an existing index, never creating one: connecting to a missing SQLite file
    would leave an empty one behind, and `attend db upgrade` would only lead to "the index holds
    no books". A database at an older revision still gets the `attend db upgrade` hint."""
    from indexer import db

    file = sqlite_file(url)
    if file is not None and not file.exists():
        raise NoIndexError(f"no index at {shown(url)} (there is no {file}): {NO_INDEX_HINT}")
    engine = db.create_db_engine(url)
    try:
        if db.current_revision(engine) is None:
            raise NoIndexError(f"{shown(url)} holds no Attend index: {NO_INDEX_HINT}")
        db.ensure_schema(engine, create_if_new=False)
    except BaseException:
        engine.dispose()
        raise
    return engine


@contextlib.contextmanager
def no_lock_file_left(url: str) -> Iterator[None]:
    """On SQLite, the one-writer lock (indexer.generations.writer_lock) is an flock on
    DATABASE.index-lock, a file it creates and keeps. It is removed here after the command,
    and only while this process holds the lock itself: a writer running now keeps its file.
    (Left: a writer that opened the file just before the unlink and locks it just after holds a
    lock no later writer sees; the two steps are microseconds apart.)"""
    try:
        yield
    finally:
        file = sqlite_file(url)
        lock = Path(f"{file}.index-lock") if file is not None else None
        if lock is not None and lock.exists():
            with lock.open("a") as f:
                try:
                    fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    pass  # another writer is running: the file is its lock
                else:
                    lock.unlink(missing_ok=True)
                    fcntl.flock(f, fcntl.LOCK_UN)


def cmd_index(args: argparse.Namespace) -> int:
    from indexer import db
    from indexer.catalog import CatalogError, CatalogHeaderError, CatalogSnapshot
    from indexer.settings import IndexSettings

    options = ("database_url", "batch_size", "engine", "ray_address", "ray_workers")
    settings = IndexSettings(**overrides(args, options))
    try:
        if getattr(args, "if_empty", False):  # demo: none
            probe = db.create_db_engine(settings.database_url)
            try:
                held = _active_generation(probe)
            finally:
                probe.dispose()
            if held is not None:
                sys.stdout.write(
                    f"the index already holds generation {held}: nothing indexed (--if-empty) "
                    f"-> {shown(settings.database_url)}\n"
                )
                return 0
        with CatalogSnapshot.take(args.path, max_row_bytes=settings.max_row_bytes) as catalog:
            # checked before the model loads and the database is touched: a bad header or bad
            # rows answer in a second, not after the encoder's seconds (or minutes) of loading
            check = catalog.check()
            for notice in check.notices:
                sys.stdout.write(f"{notice}\n")
            if check.rejected and not args.skip_invalid:
                raise CatalogError(check.rejected)
            engine = db.create_db_engine(settings.database_url)
            try:
                if engine.dialect.name != "sqlite":  # a server that does not answer: say so
                    with engine.connect():  # before the model loads
                        pass
                with no_lock_file_left(settings.database_url):
                    report = _index(args, settings, engine, catalog)
            finally:
                engine.dispose()
    except CatalogError as e:
        hint = (
            "\nnothing was written; --skip-invalid indexes the valid rows"
            if e.rows and not isinstance(e, CatalogHeaderError)
            else ""
        )
        sys.stderr.write(f"attend {args.command}: {e}{hint}\n")
        return 2
    # the rejected rows were logged as warnings, one each, as the run skipped them
    switch = (
        f"generation {report.generation} active"
        if report.activated
        else f"nothing changed, generation {report.generation} stays active"
    )
    sys.stdout.write(
        f"{report.books} books: {report.added} added, {report.updated} updated, "
        f"{report.unchanged} unchanged, {report.removed} removed, {len(report.rejected)} "
        f"rejected; {report.embedded} texts embedded in {report.seconds:.1f} s "
        f"({report.books_per_second:.1f} books/s); {switch}"
        f"{' (resumed an interrupted run)' if report.resumed else ''} "
        f"-> {shown(settings.database_url)}\n"
    )
    return 0


def _active_generation(engine: Engine) -> int | None:
    """The active generation of the index at `engine`, or None where there is none yet (a new
    database, one without the schema, one never indexed). Before the model loads."""
    from sqlalchemy.orm import Session

    from indexer import db, store

    if db.current_revision(engine) is None:
        return None
    with Session(engine) as session:
        return store.active_generation_id(session=session)


def _index(
    args: argparse.Namespace, settings: IndexSettings, engine: Engine, catalog: CatalogSnapshot
) -> Any:
    """pipeline.run with a progress bar on a terminal (log lines are written above it, not
    through it), else a log line every 5 s at INFO (-v)."""
    from tqdm.contrib.logging import logging_redirect_tqdm

    from indexer import pipeline
    from service.engine.startup import build_encoder

    bar = ProgressBar() if sys.stderr.isatty() else None
    with contextlib.ExitStack() as stack:
        if bar is not None:
            stack.enter_context(logging_redirect_tqdm())
            stack.callback(bar.close)
        encoder = build_encoder(settings)
        embedder = stack.enter_context(_embedder(settings, encoder.name))
        return pipeline.run(
            settings,
            engine=engine,
            encoder=encoder,
            path=catalog,
            skip_invalid=args.skip_invalid,
            keep_missing=args.keep_missing,
            allow_mass_delete=getattr(args, "allow_mass_delete", False),  # demo: none
            progress=pipeline.Progress(bar.update if bar else _log_progress),
            embedder=embedder,
        )


@contextlib.contextmanager
def _embedder(settings: IndexSettings, model: str) -> Iterator[pipeline.Embedder | None]:
    """None (embed in this process), or with the ray engine Ray Data actors on a Ray cluster
    (`settings.ray_address`, else a local Ray for the run)."""
    from functools import partial

    if settings.engine != "ray":
        yield None
        return
    try:
        from indexer import ray_embed
    except ImportError as e:
        raise RayMissingError(f"the ray engine needs pip install 'attend[ray]' ({e})") from e
    with ray_embed.ray_session(settings.ray_address):
        yield partial(
            ray_embed.embed_plans, settings=settings, model=model, workers=settings.ray_workers
        )


class ProgressBar:
    """tqdm on a terminal's stderr: books done, books/s, the ETA and the texts embedded."""

    def __init__(self) -> None:
        from tqdm import tqdm

        self._bar = tqdm(total=0, unit="book", desc="loading the model")

    def update(self, p: pipeline.ProgressSnapshot) -> None:
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


def _log_progress(p: pipeline.ProgressSnapshot) -> None:
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


def cmd_delete(args: argparse.Namespace) -> int:
    from indexer import pipeline

    url = database_url_of(args)
    engine = open_index(url)
    try:
        with no_lock_file_left(url):
            report = pipeline.delete_books(engine=engine, book_ids=args.ids)
    finally:
        engine.dispose()
    # a partial success is a success (exit 0): the books asked for are gone from the index,
    # and the ids that were not in it are named; 1 only when none was, so nothing was removed
    for book_id in report.unknown:
        sys.stderr.write(
            f"attend delete: no book with id {book_id!r} in the active generation (not removed)\n"
        )
    if not report.removed:
        sys.stderr.write("attend delete: nothing removed\n")
        return 1
    asked = len(report.removed) + len(report.unknown)
    not_found = f" ({len(report.unknown)} not found)" if report.unknown else ""
    sys.stdout.write(
        f"removed {len(report.removed)} of {asked} book(s){not_found}; generation "
        f"{report.generation} active\n"
    )
    return 0


def cmd_db(args: argparse.Namespace) -> int:
    from indexer import db

    url = database_url_of(args)
    file = sqlite_file(url)
    if args.action != "upgrade" and file is not None and not file.exists():
        if args.action == "current":  # nothing to look at, and nothing to create
            sys.stdout.write(f"revision None (head {db.head_revision()}); no file {file}\n")
            return 0
        raise NoIndexError(f"no database at {shown(url)} (there is no {file})")
    engine = db.create_db_engine(url)
    try:
        if args.action == "upgrade":
            db.upgrade(engine, args.revision or "head")
        elif args.action == "downgrade":
            db.downgrade(engine, args.revision or "-1")
        sys.stdout.write(f"revision {db.current_revision(engine)} (head {db.head_revision()})\n")
    finally:
        engine.dispose()
    return 0
