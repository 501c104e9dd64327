"""The `attend` command: index, delete, serve, search, demo and db.

Only the standard library is imported here at module level: `attend --help`, and a mistyped
option, answer before torch, the model, SQLAlchemy or FastAPI load (importing them took 1.4 s of
the 1.9 s `attend --help` took). Each command imports what it needs when it runs.

Every command takes `--database-url` (over ATTEND_DATABASE_URL) and `-v`. It prints its result
(one summary line, a table) on stdout and only warnings on stderr, INFO with -v. A command
leaves nothing behind: a SQLite file it created for a command that then failed is removed, and
so is the writer's lock file beside the database once no writer holds it.
"""

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
    from indexer.settings import IndexSettings
    from service.api.search_schemas import SearchResponse

logger = logging.getLogger("attend")

DEFAULT_DATABASE = "sqlite:///attend.db"
DATABASE_HELP = (
    "SQLAlchemy URL of the index: sqlite:///PATH or postgresql+psycopg://user:pass@host/db "
    f"(default: ATTEND_DATABASE_URL, else {DEFAULT_DATABASE}, a file in the working folder)"
)
NO_INDEX_HINT = (
    "index a catalog first: `attend index CATALOG` (or `attend demo` for the bundled one), or "
    "point --database-url or ATTEND_DATABASE_URL at an index"
)


class NoIndexError(RuntimeError):
    """The database a reading command was pointed at holds no Attend index at all."""


class RayMissingError(RuntimeError):
    pass


def _overrides(args: argparse.Namespace, names: Sequence[str]) -> dict[str, Any]:
    """The options given on the command line, as settings fields (they win over ATTEND_*)."""
    return {k: getattr(args, k) for k in names if getattr(args, k, None) is not None}


def _database_url(args: argparse.Namespace) -> str:
    from indexer.settings import StoreSettings

    return args.database_url or StoreSettings().database_url


def _sqlite_file(url: str) -> Path | None:
    """The file of a SQLite URL (None for other databases and in-memory SQLite)."""
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return None
    return Path(parsed.database)


def _shown(url: str) -> str:
    """`url` without its password, a relative SQLite path made absolute (where the file is)."""
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    file = _sqlite_file(url)
    if file is not None:
        parsed = parsed.set(database=str(file.resolve()))
    return parsed.render_as_string(hide_password=True)


def _open_index(url: str) -> Engine:
    """An engine on an existing index, never creating one: connecting to a missing SQLite file
    would leave an empty one behind, and `attend db upgrade` would only lead to "the index holds
    no books". A database at an older revision still gets the `attend db upgrade` hint."""
    from indexer import db

    file = _sqlite_file(url)
    if file is not None and not file.exists():
        raise NoIndexError(f"no index at {_shown(url)} (there is no {file}): {NO_INDEX_HINT}")
    engine = db.create_db_engine(url)
    try:
        if db.current_revision(engine) is None:
            raise NoIndexError(f"{_shown(url)} holds no Attend index: {NO_INDEX_HINT}")
        db.ensure_schema(engine, create_if_new=False)
    except BaseException:
        engine.dispose()
        raise
    return engine


@contextlib.contextmanager
def _no_lock_file_left(url: str) -> Iterator[None]:
    """On SQLite, the one-writer lock (indexer.generations.writer_lock) is an flock on
    DATABASE.index-lock, a file it creates and keeps. It is removed here after the command,
    and only while this process holds the lock itself: a writer running now keeps its file.
    (Left: a writer that opened the file just before the unlink and locks it just after holds a
    lock no later writer sees; the two steps are microseconds apart.)"""
    try:
        yield
    finally:
        file = _sqlite_file(url)
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
    from indexer.catalog import CatalogError
    from indexer.settings import IndexSettings

    options = ("database_url", "batch_size", "engine", "ray_address", "ray_workers")
    settings = IndexSettings(**_overrides(args, options))
    engine = db.create_db_engine(settings.database_url)
    try:
        with _no_lock_file_left(settings.database_url):
            report = _index(args, settings, engine)
    except CatalogError as e:
        sys.stderr.write(
            f"attend {args.command}: {e}\nnothing was written; --skip-invalid indexes the "
            "valid rows\n"
            if e.rows
            else f"attend {args.command}: {e}\n"
        )
        return 2
    finally:
        engine.dispose()
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
        f"-> {_shown(settings.database_url)}\n"
    )
    return 0


def _index(args: argparse.Namespace, settings: IndexSettings, engine: Engine) -> Any:
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
            path=args.path,
            skip_invalid=args.skip_invalid,
            keep_missing=args.keep_missing,
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

    url = _database_url(args)
    engine = _open_index(url)
    try:
        with _no_lock_file_left(url):
            report = pipeline.delete_books(engine=engine, book_ids=args.ids)
    finally:
        engine.dispose()
    for book_id in report.unknown:
        sys.stderr.write(f"attend delete: no book with id {book_id!r} in the active generation\n")
    if report.removed:
        sys.stdout.write(
            f"removed {len(report.removed)} book(s); generation {report.generation} active\n"
        )
    return 0 if not report.unknown else 1


def cmd_serve(args: argparse.Namespace) -> int:
    from service.api.main import create_app
    from service.launch import apply_serve_threads
    from service.logs import configure_logging
    from service.settings import ServiceSettings

    options = ("database_url", "host", "port", "engine", "shards", "shard_replicas")
    settings = ServiceSettings(**_overrides(args, (*options, "ray_address")))
    # a server's log is its lifecycle and its requests: ATTEND_LOG_LEVEL (INFO), DEBUG at -vv
    level = "DEBUG" if args.verbose > 1 else settings.log_level
    configure_logging(level, json_lines=settings.log_json)
    # a clear message here beats a traceback from inside uvicorn's start-up
    _open_index(settings.database_url).dispose()
    if settings.engine == "ray":
        return _serve_on_ray(settings)
    if settings.shards > 1:
        sys.stderr.write("attend serve: --shards needs --engine ray\n")
        return 2
    from service.api import server

    apply_serve_threads(settings)
    # an admin re-index (POST /admin/reindex) takes the writer's lock too
    with _no_lock_file_left(settings.database_url):
        server.serve(create_app(settings), settings)  # uvicorn + h11 within bounds (server.py)
    return 0


def _serve_on_ray(settings: Any) -> int:
    try:
        from service.cluster import ray_serve
    except ImportError as e:
        sys.stderr.write(f"attend serve: the ray engine needs pip install 'attend[ray]' ({e})\n")
        return 2
    ray_serve.serve_forever(settings)
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    """Index the bundled demo catalog (a no-op when it already is), then serve it."""
    from indexer.data import DEMO_CATALOG

    args.path, args.skip_invalid, args.batch_size = str(DEMO_CATALOG), False, None
    args.keep_missing = False
    return cmd_index(args) or cmd_serve(args)


def cmd_search(args: argparse.Namespace) -> int:
    from service.api.search_schemas import SearchParams, search_response
    from service.engine.startup import build_searcher
    from service.settings import ServiceSettings

    settings = ServiceSettings(**_overrides(args, ("database_url",)))
    params = SearchParams(
        q=args.query,
        k=args.k,
        offset=args.offset,
        author=args.author,
        year_min=args.year_min,
        year_max=args.year_max,
        language=args.language,
        heads=args.heads,
    )
    engine = _open_index(settings.database_url)
    try:
        searcher = build_searcher(settings, engine=engine)
    finally:
        engine.dispose()
    (result,) = searcher.search_now([params.q], params.options())
    response = search_response(result)
    sys.stdout.write(response.model_dump_json(indent=2) + "\n" if args.json else table(response))
    return 0


def table(response: SearchResponse) -> str:
    """The ranking as `attend search` prints it: a header with what the API's response says of
    the whole query (matched, heads, match strength), then one line per result."""
    heads = ",".join(
        f"{name}:{head.weight:.3g}{' (abstained)' if getattr(head, 'abstained', False) else ''}"
        for name, head in response.heads.items()
    )
    lines = [
        f"{response.query!r}: {response.matched} of {response.catalog_size} books matched; "
        f"heads {heads}; match strength {response.match_strength:.2f}",
    ]
    if response.no_strong_match:
        lines.append(
            "no strong match: the best book weighs little more than under a uniform weight "
            "(match strength under 0.55), so these are weak answers"
        )
    lines.append(f"{'rank':>4}  {'weight':>7}  {'score':>6}  title")
    for hit in response.results:
        authors = ", ".join(hit.authors[:2]) + (" et al." if len(hit.authors) > 2 else "")
        year = f", {hit.year}" if hit.year is not None else ""
        lines.append(
            f"{hit.rank:>4}  {hit.weight:>7.4f}  {hit.score:>6.3f}  {hit.title} ({authors}{year})"
        )
    return "\n".join(lines) + "\n"


def cmd_db(args: argparse.Namespace) -> int:
    from indexer import db

    url = _database_url(args)
    file = _sqlite_file(url)
    if args.action != "upgrade" and file is not None and not file.exists():
        if args.action == "current":  # nothing to look at, and nothing to create
            sys.stdout.write(f"revision None (head {db.head_revision()}); no file {file}\n")
            return 0
        raise NoIndexError(f"no database at {_shown(url)} (there is no {file})")
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


def _common_options() -> argparse.ArgumentParser:
    """What every subcommand takes. `-v` is SUPPRESSed here so that a subcommand's default does
    not overwrite `attend -v COMMAND`'s count."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--database-url", metavar="URL", help=DATABASE_HELP)
    common.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=argparse.SUPPRESS,
        help="log INFO lines too (-vv: DEBUG); by default only warnings and the result",
    )
    return common


def _add_serve_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--host", help="interface to listen on (default: ATTEND_HOST, else 127.0.0.1)")
    p.add_argument(
        "--port", type=int, help="TCP port to listen on (default: ATTEND_PORT, else 8000)"
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="attend",
        description="Semantic book search whose ranking is attention. Settings come from "
        "ATTEND_* environment variables or .env (see the README's Configuration); an option "
        "given here wins over its variable.",
    )
    parser.add_argument(
        "-v", "--verbose", action="count", default=0, help="log INFO lines too (-vv: DEBUG)"
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    common = [_common_options()]

    p = sub.add_parser(
        "index",
        parents=common,
        help="index a catalog (.jsonl or .csv) into the database",
        description="Index a catalog into the database at --database-url (default: "
        f"ATTEND_DATABASE_URL, else {DEFAULT_DATABASE}: the file attend.db in the working "
        "folder, created and migrated when new). The catalog becomes the index's next "
        "generation; books the index holds but the catalog lacks are removed. Catalog: JSONL "
        "(one object a line) or CSV with a header; `id` and `title` required; `description`, "
        "`authors` (a list; in CSV `;`-separated), `year`, `language` optional; other fields "
        "are kept as metadata.",
    )
    p.add_argument("path", metavar="CATALOG", help="the catalog file, .jsonl or .csv")
    p.add_argument(
        "--skip-invalid",
        action="store_true",
        help="index the valid rows and list the rejected ones (default: write nothing)",
    )
    p.add_argument(
        "--batch-size",
        type=int,
        metavar="N",
        help="books per transaction (default: ATTEND_BATCH_SIZE, else 256)",
    )
    p.add_argument(
        "--keep-missing",
        action="store_true",
        help="keep indexed books the catalog lacks (default: the catalog is a snapshot and "
        "they are removed)",
    )
    p.add_argument(
        "--engine", choices=["local", "ray"], help="local: this process (default); ray: Ray Data"
    )
    p.add_argument(
        "--ray-address",
        metavar="ADDRESS",
        help="ray engine: an existing cluster (default: local Ray)",
    )
    p.add_argument(
        "--ray-workers", type=int, metavar="N", help="ray engine: encoder actors (default: per GPU)"
    )
    p.set_defaults(func=cmd_index)

    p = sub.add_parser(
        "delete", parents=common, help="remove books by id (a new generation without them)"
    )
    p.add_argument("ids", nargs="+", metavar="ID", help="ids of the books to remove")
    p.set_defaults(func=cmd_delete)

    p = sub.add_parser(
        "serve",
        parents=common,
        help="serve the REST API of an index",
        description="Serve the REST API (and /docs, the web page at /) of the index at "
        "--database-url.",
    )
    _add_serve_options(p)
    p.add_argument(
        "--engine",
        choices=["local", "ray"],
        help="local: this process (default); ray: shards on Ray Serve",
    )
    p.add_argument("--shards", type=int, metavar="S", help="ray engine: shards splitting the keys")
    p.add_argument(
        "--shard-replicas", type=int, metavar="R", help="ray engine: replicas of every shard"
    )
    p.add_argument(
        "--ray-address",
        metavar="ADDRESS",
        help="ray engine: an existing cluster (default: local Ray)",
    )
    p.set_defaults(func=cmd_serve)

    p = sub.add_parser(
        "demo",
        parents=common,
        help="index the bundled demo catalog (180 books), then serve it",
        description="Index the bundled demo catalog into --database-url (a no-op when it "
        "already is), then serve it as `attend serve` does.",
    )
    _add_serve_options(p)
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser("search", parents=common, help="search the index and print the ranking")
    p.add_argument("query", help="what to search for (1-512 characters)")
    p.add_argument("-k", type=int, default=10, help="results to show (1-100; default 10)")
    p.add_argument(
        "--offset", type=int, default=0, help="results to skip first (0-1000; default 0)"
    )
    p.add_argument("--author", help="keep books with an author whose name contains this")
    p.add_argument("--year-min", type=int, metavar="YEAR", help="keep books from this year on")
    p.add_argument("--year-max", type=int, metavar="YEAR", help="keep books up to this year")
    p.add_argument("--language", help="keep books in this language (the catalog's code)")
    p.add_argument(
        "--heads",
        metavar="WEIGHTS",
        help="head weights, e.g. title:0.3,description:0.4,lexical:0.3 (default: ATTEND_HEADS)",
    )
    p.add_argument("--json", action="store_true", help="print the API's JSON response")
    p.set_defaults(func=cmd_search)

    p = sub.add_parser("db", parents=common, help="database schema (Alembic migrations)")
    p.add_argument(
        "action",
        choices=["upgrade", "downgrade", "current"],
        help="upgrade (creates the database when new), downgrade, or show the current revision",
    )
    p.add_argument("revision", nargs="?", help="target revision (upgrade: head, downgrade: -1)")
    p.set_defaults(func=cmd_db)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # parsed first: what follows imports SQLAlchemy, pydantic and, through indexer.settings,
    # torch
    from pydantic import ValidationError

    from indexer import db
    from indexer.catalog import CatalogError
    from indexer.generations import IndexBusyError
    from service.engine.exceptions import IndexEmptyError
    from service.logs import cli_level, configure_logging

    configure_logging(cli_level(args.verbose))
    new_file = _new_sqlite_file(args)
    status: int | None = None  # None: interrupted, or an error with its traceback
    try:
        status = int(args.func(args))
    except (
        db.SchemaError,
        CatalogError,
        ValidationError,
        IndexEmptyError,
        RayMissingError,
        NoIndexError,
    ) as e:
        sys.stderr.write(f"attend {args.command}: {e}\n")
        status = 2
    except IndexBusyError as e:
        sys.stderr.write(f"attend {args.command}: {e}\n")
        status = 3
    finally:
        # an interrupted index run keeps its file, whatever it holds: the next run resumes it
        if status is not None and status != 0 and new_file is not None:
            _remove_if_empty(new_file)
    return status


def _new_sqlite_file(args: argparse.Namespace) -> Path | None:
    """The SQLite file the command will use, when it does not exist yet."""
    try:
        file = _sqlite_file(_database_url(args))
    except Exception:  # a bad setting fails the command itself, with its own message
        return None
    return file if file is not None and not file.exists() else None


def _remove_if_empty(file: Path) -> None:
    """Remove the SQLite file a failed command created, unless it holds a generation (`attend
    demo` indexed it, then could not serve)."""
    import sqlite3

    if file.exists():
        try:
            with contextlib.closing(sqlite3.connect(f"file:{file}?mode=ro", uri=True)) as conn:
                if conn.execute("SELECT count(*) FROM generations").fetchone()[0]:
                    return
        except sqlite3.Error:
            pass  # no generations table: no index
    for part in (file, Path(f"{file}-wal"), Path(f"{file}-shm"), Path(f"{file}.index-lock")):
        part.unlink(missing_ok=True)


if __name__ == "__main__":
    sys.exit(main())
