"""The `attend` command: index, serve, search, demo and db."""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from functools import partial

from pydantic import ValidationError
from sqlalchemy.engine import make_url

from indexer import db, pipeline
from indexer.catalog import CatalogError
from indexer.data import DEMO_CATALOG
from indexer.generations import IndexBusyError
from indexer.settings import CommonSettings, IndexSettings
from service.errors import IndexEmptyError
from service.launch import apply_serve_threads
from service.logs import configure_logging
from service.main import build_encoder, build_searcher, create_app
from service.schemas import SearchParams, SearchResponse
from service.settings import ServiceSettings

logger = logging.getLogger("attend")


def cmd_index(args: argparse.Namespace) -> int:
    options = ("batch_size", "engine", "ray_address", "ray_workers")
    settings = IndexSettings(
        **{k: getattr(args, k) for k in options if getattr(args, k, None) is not None}
    )
    engine = db.create_db_engine(settings.database_url)
    bar = ProgressBar() if sys.stderr.isatty() else None
    try:
        encoder = build_encoder(settings)
        with _embedder(settings, encoder.name) as embedder:
            report = pipeline.run(
                settings,
                engine=engine,
                encoder=encoder,
                path=args.path,
                skip_invalid=args.skip_invalid,
                keep_missing=args.keep_missing,
                progress=pipeline.Progress(bar.update if bar else _log_progress),
                embedder=embedder,
            )
    except CatalogError as e:
        sys.stderr.write(
            f"attend index: {e}\nnothing was written; --skip-invalid indexes the valid rows\n"
            if e.rows
            else f"attend index: {e}\n"
        )
        return 2
    finally:
        if bar is not None:
            bar.close()
        engine.dispose()
    for row in report.rejected:
        sys.stderr.write(f"rejected {row}\n")
    where = make_url(settings.database_url)
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
        f"{' (resumed an interrupted run)' if report.resumed else ''} -> {where!r}\n"
    )
    return 0


@contextmanager
def _embedder(settings: IndexSettings, model: str) -> Iterator[pipeline.Embedder | None]:
    """None (embed in this process), or with the ray engine Ray Data actors on a Ray cluster
    (`settings.ray_address`, else a local Ray for the run)."""
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


class RayMissingError(RuntimeError):
    pass


class ProgressBar:
    """tqdm on a terminal's stderr: books done, books/s and the ETA."""

    def __init__(self) -> None:
        from tqdm import tqdm

        self._bar = tqdm(total=0, unit="book", desc="validating")

    def update(self, p: pipeline.ProgressSnapshot) -> None:
        if p.state == "indexing":
            if self._bar.total != p.total:
                self._bar.reset(total=p.total)
                self._bar.set_description(f"generation {p.generation}")
            self._bar.update(p.done - self._bar.n)
            self._bar.set_postfix(embedded=p.embedded, refresh=False)

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
    engine = db.create_db_engine(CommonSettings().database_url)
    try:
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
    import uvicorn

    options = ("host", "port", "engine", "shards", "shard_replicas", "ray_address")
    overrides = {k: getattr(args, k) for k in options if getattr(args, k, None) is not None}
    settings = ServiceSettings(**overrides)
    configure_logging(settings.log_level, json_lines=settings.log_json)
    engine = db.create_db_engine(settings.database_url)
    try:  # a clear message here beats a traceback from inside uvicorn's start-up
        db.ensure_schema(engine, create_if_new=False)
    finally:
        engine.dispose()
    if settings.engine == "ray":
        return _serve_on_ray(settings)
    if settings.shards > 1:
        sys.stderr.write("attend serve: --shards needs --engine ray\n")
        return 2
    apply_serve_threads(settings)
    uvicorn.run(
        create_app(settings),
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level.lower(),
        log_config=None,  # uvicorn's loggers propagate to ours (configure_logging)
        access_log=False,  # service.telemetry logs every request, without its query string
    )
    return 0


def _serve_on_ray(settings: ServiceSettings) -> int:
    try:
        from service import ray_serve
    except ImportError as e:
        sys.stderr.write(f"attend serve: the ray engine needs pip install 'attend[ray]' ({e})\n")
        return 2
    ray_serve.serve_forever(settings)
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    """Index the bundled demo catalog (a no-op when it already is), then serve it."""
    args.path, args.skip_invalid, args.batch_size = str(DEMO_CATALOG), False, None
    args.keep_missing = False
    return cmd_index(args) or cmd_serve(args)


def cmd_search(args: argparse.Namespace) -> int:
    settings = ServiceSettings()
    params = SearchParams(
        q=args.query,
        k=args.k,
        offset=args.offset,
        author=args.author,
        year_min=args.year_min,
        year_max=args.year_max,
        language=args.language,
    )
    engine = db.create_db_engine(settings.database_url)
    try:
        db.ensure_schema(engine, create_if_new=False)
        searcher = build_searcher(settings, engine=engine)
    finally:
        engine.dispose()
    response = searcher.search_now([params.q], params)[0]
    sys.stdout.write(response.model_dump_json(indent=2) + "\n" if args.json else _table(response))
    return 0


def _table(response: SearchResponse) -> str:
    lines = [
        f"{response.query!r}: {response.matched} of {response.catalog_size} books matched, "
        f"scale {response.scale:g}",
        f"{'rank':>4}  {'weight':>7}  {'score':>6}  title",
    ]
    for hit in response.results:
        authors = ", ".join(hit.authors[:2]) + (" et al." if len(hit.authors) > 2 else "")
        year = f", {hit.year}" if hit.year is not None else ""
        lines.append(
            f"{hit.rank:>4}  {hit.weight:>7.4f}  {hit.score:>6.3f}  {hit.title} ({authors}{year})"
        )
    return "\n".join(lines) + "\n"


def cmd_db(args: argparse.Namespace) -> int:
    engine = db.create_db_engine(CommonSettings().database_url)
    try:
        if args.action == "upgrade":
            db.upgrade(engine, args.revision or "head")
        elif args.action == "downgrade":
            db.downgrade(engine, args.revision or "-1")
        sys.stdout.write(f"revision {db.current_revision(engine)} (head {db.head_revision()})\n")
    finally:
        engine.dispose()
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="attend",
        description="Semantic book search whose ranking is attention. "
        "Settings come from ATTEND_* environment variables or .env (see README).",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("index", help="index a catalog (.jsonl or .csv) into the database")
    p.add_argument("path")
    p.add_argument(
        "--skip-invalid",
        action="store_true",
        help="index the valid rows and list the rejected ones (default: write nothing)",
    )
    p.add_argument("--batch-size", type=int, help="books per transaction")
    p.add_argument(
        "--keep-missing",
        action="store_true",
        help="keep indexed books the catalog lacks (default: the catalog is a snapshot and "
        "they are removed)",
    )
    p.add_argument(
        "--engine", choices=["local", "ray"], help="local: this process (default); ray: Ray Data"
    )
    p.add_argument("--ray-address", help="ray engine: an existing cluster (default: local Ray)")
    p.add_argument("--ray-workers", type=int, help="ray engine: encoder actors (default: per GPU)")
    p.set_defaults(func=cmd_index)

    p = sub.add_parser("delete", help="remove books by id (a new generation without them)")
    p.add_argument("ids", nargs="+", metavar="ID")
    p.set_defaults(func=cmd_delete)

    for name, func, text in (
        ("serve", cmd_serve, "serve the REST API"),
        ("demo", cmd_demo, "index the bundled demo catalog, then serve it"),
    ):
        p = sub.add_parser(name, help=text)
        p.add_argument("--host")
        p.add_argument("--port", type=int)
        p.set_defaults(func=func)
    p = sub.choices["serve"]
    p.add_argument(
        "--engine",
        choices=["local", "ray"],
        help="local: this process (default); ray: shards on Ray Serve",
    )
    p.add_argument("--shards", type=int, help="ray engine: shards splitting the keys")
    p.add_argument("--shard-replicas", type=int, help="ray engine: replicas of every shard")
    p.add_argument("--ray-address", help="ray engine: an existing cluster (default: local Ray)")

    p = sub.add_parser("search", help="search the index and print the ranking")
    p.add_argument("query")
    p.add_argument("-k", type=int, default=10)
    p.add_argument("--offset", type=int, default=0)
    p.add_argument("--author")
    p.add_argument("--year-min", type=int)
    p.add_argument("--year-max", type=int)
    p.add_argument("--language")
    p.add_argument("--json", action="store_true", help="print the API's JSON response")
    p.set_defaults(func=cmd_search)

    p = sub.add_parser("db", help="database schema (Alembic migrations)")
    p.add_argument("action", choices=["upgrade", "downgrade", "current"])
    p.add_argument("revision", nargs="?", help="target revision (upgrade: head, downgrade: -1)")
    p.set_defaults(func=cmd_db)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        return int(args.func(args))
    except (db.SchemaError, CatalogError, ValidationError, IndexEmptyError, RayMissingError) as e:
        sys.stderr.write(f"attend {args.command}: {e}\n")
        return 2
    except IndexBusyError as e:
        sys.stderr.write(f"attend {args.command}: {e}\n")
        return 3


if __name__ == "__main__":
    sys.exit(main())
