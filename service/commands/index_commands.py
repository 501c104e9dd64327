"""What `attend index`, `attend delete` and `attend db` do (cli_parser.py parses the command
line, cli.py calls these). As in the CLI, the heavy modules are imported inside each function,
when the command runs."""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from service.commands.command_database import (
    NoIndexError,
    database_url_of,
    no_lock_file_left,
    open_index,
    overrides,
    shown_url,
    sqlite_file,
)
from service.commands.index_progress import ProgressBar, log_progress
from service.commands.interrupts import Interrupted, stopping_on_signals

if TYPE_CHECKING:
    from sqlalchemy import Engine

    from indexer.catalog import CatalogSnapshot
    from indexer.embedding import Embedder
    from indexer.pipeline import IndexReport
    from indexer.settings import IndexSettings
    from models.encoder import Encoder


class RayMissingError(RuntimeError):
    pass


def cmd_index(args: argparse.Namespace) -> int:
    """`attend index`, which Ctrl-C or SIGTERM end with one line, the lock file removed and the
    generation being built left building for the same command to resume (interrupts.py)."""
    with stopping_on_signals():
        try:
            return _index_command(args)
        except Interrupted as e:
            sys.stderr.write(
                f"attend {args.command}: stopped by {e.signal_name}; the batches written are "
                "kept, and the same command resumes the run\n"
            )
            return e.exit_status


def _index_command(args: argparse.Namespace) -> int:
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
                    f"-> {shown_url(settings.database_url)}\n"
                )
                return 0
        columns = {**settings.catalog_columns, **column_options(getattr(args, "column", None))}
        encoding = getattr(args, "encoding", None) or settings.catalog_encoding
        with CatalogSnapshot.take(
            args.path, max_row_bytes=settings.max_row_bytes, columns=columns, encoding=encoding
        ) as catalog:
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
        f"-> {shown_url(settings.database_url)}\n"
    )
    if report.activated:
        sys.stdout.write(_boilerplate_line(report))
    if args.command == "index":  # `attend demo` serves next itself
        from service.commands.cli_stats import next_step

        sys.stdout.write(f"next: {next_step(settings.database_url)}\n")
    return 0


def _boilerplate_line(report: IndexReport) -> str:
    """What the new generation's descriptions repeat across authors, which the lexical heads
    and the explanations leave out (indexer/boilerplate.py)."""
    renewed = f" ({report.renewed} of the updated books renewed for it)" if report.renewed else ""
    return f"boilerplate{renewed}: {report.boilerplate.summary()}\n"


def column_options(given: list[str] | None) -> dict[str, str]:
    """`--column HEADER=FIELD` options as a mapping; CatalogError for one without its `=`."""
    from indexer.catalog import CatalogError

    mapping = {}
    for option in given or []:
        header, sep, field = option.rpartition("=")
        if not sep or not header.strip():
            raise CatalogError(
                [], f"--column {option!r}: write it HEADER=FIELD, e.g. --column Writer=authors"
            )
        mapping[header.strip()] = field.strip()
    return mapping


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
    from indexer.progress import Progress

    bar = ProgressBar() if sys.stderr.isatty() else None
    with contextlib.ExitStack() as stack:
        if bar is not None:
            stack.enter_context(logging_redirect_tqdm())
            stack.callback(bar.close)
        encoder = index_encoder(settings)
        embedder = stack.enter_context(_embedder(settings, encoder.name))
        return pipeline.run(
            settings,
            engine=engine,
            encoder=encoder,
            path=catalog,
            skip_invalid=args.skip_invalid,
            keep_missing=args.keep_missing,
            allow_mass_delete=getattr(args, "allow_mass_delete", False),  # demo: none
            progress=Progress(bar.update if bar else log_progress),
            embedder=embedder,
        )


def index_encoder(settings: IndexSettings) -> Encoder:
    """The run's encoder, `startup.build_encoder`'s model built at the first text to embed: a
    run that changes nothing never loads it, nor imports torch (a no-op re-index of the shared
    catalog took 6.9 s, now 1.3 s: benchmarks/reindex.py --noop-versus)."""
    from indexer.embedding import LazyEncoder

    def build() -> Encoder:
        from service.engine import startup

        return startup.build_encoder(settings)

    return LazyEncoder(settings.model, build)


@contextlib.contextmanager
def _embedder(settings: IndexSettings, model: str) -> Iterator[Embedder | None]:
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


def cmd_delete(args: argparse.Namespace) -> int:
    from indexer.deletion import delete_books

    url = database_url_of(args)
    engine = open_index(url)
    try:
        with no_lock_file_left(url):
            report = delete_books(engine=engine, book_ids=args.ids)
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
        raise NoIndexError(f"no database at {shown_url(url)} (there is no {file})")
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
