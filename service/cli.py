"""The `attend` command: index, serve, search, demo and db."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from pydantic import ValidationError
from sqlalchemy.engine import make_url

from indexer import db, pipeline
from indexer.catalog import CatalogError
from indexer.data import DEMO_CATALOG
from indexer.settings import CommonSettings, IndexSettings
from service.errors import IndexEmptyError
from service.logs import configure_logging
from service.main import build_encoder, build_searcher, create_app
from service.schemas import SearchParams, SearchResponse
from service.settings import ServiceSettings

logger = logging.getLogger("attend")


def cmd_index(args: argparse.Namespace) -> int:
    settings = (
        IndexSettings() if args.batch_size is None else IndexSettings(batch_size=args.batch_size)
    )
    engine = db.create_db_engine(settings.database_url)
    try:
        report = pipeline.run(
            settings,
            engine=engine,
            encoder=build_encoder(settings),
            path=args.path,
            skip_invalid=args.skip_invalid,
        )
    except CatalogError as e:
        sys.stderr.write(
            f"attend index: {e}\nnothing was written; --skip-invalid indexes the valid rows\n"
            if e.rows
            else f"attend index: {e}\n"
        )
        return 2
    finally:
        engine.dispose()
    for row in report.rejected:
        sys.stderr.write(f"rejected {row}\n")
    sys.stdout.write(
        f"{report.books} books: {report.embedded} embedded, {report.unchanged} unchanged, "
        f"{len(report.rejected)} rejected, in {report.seconds:.1f} s "
        f"({report.books_per_second:.1f} books/s) -> {make_url(settings.database_url)!r}\n"
    )
    return 0


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
    p.set_defaults(func=cmd_index)

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
    except (db.SchemaError, CatalogError, ValidationError, IndexEmptyError) as e:
        sys.stderr.write(f"attend {args.command}: {e}\n")
        return 2


if __name__ == "__main__":
    sys.exit(main())
