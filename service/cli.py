"""The `attend` command: index, delete, serve, search, demo and db.

Only the standard library is imported here at module level, and in the commands' modules
(service/index_commands.py, service/serve_commands.py): `attend --help`, and a mistyped option,
answer before torch, the model, SQLAlchemy or FastAPI load (importing them took 1.4 s of the
1.9 s `attend --help` took). Each command imports what it needs when it runs.

Every command takes `--database-url` (over ATTEND_DATABASE_URL) and `-v`. It prints its result
(one summary line, a table) on stdout and only warnings on stderr, INFO with -v. A command
leaves nothing behind: a SQLite file it created for a command that then failed is removed, and
so is the writer's lock file beside the database once no writer holds it.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from service.index_commands import (
    NoIndexError,
    RayMissingError,
    cmd_db,
    cmd_delete,
    cmd_index,
    database_url_of,
    overrides,
    sqlite_file,
)
from service.serve_commands import cmd_demo, cmd_search, cmd_serve

if TYPE_CHECKING:  # what add_subparsers returns: a class private to argparse, generic in typeshed
    Commands = argparse._SubParsersAction[argparse.ArgumentParser]

logger = logging.getLogger("attend")

DEFAULT_DATABASE = "sqlite:///attend.db"
DATABASE_HELP = (
    "SQLAlchemy URL of the index: sqlite:///PATH or postgresql+psycopg://user:pass@host/db "
    f"(default: ATTEND_DATABASE_URL, else {DEFAULT_DATABASE}, a file in the working folder)"
)


VERBOSE_HELP = "log INFO lines too (-vv: DEBUG); by default only warnings and the result"
# a server's log is its lifecycle and every request, at ATTEND_LOG_LEVEL (serve_commands.py)
SERVE_VERBOSE_HELP = (
    "-vv: log DEBUG lines too; without it the server logs at ATTEND_LOG_LEVEL (default INFO: "
    "its start-up and every request)"
)
DEMO_VERBOSE_HELP = (
    "log the indexing's INFO lines too (-vv: DEBUG, the server's too); the server then logs at "
    "ATTEND_LOG_LEVEL (default INFO: its start-up and every request)"
)


INDEX_DESCRIPTION = (
    "Index a catalog into the database at --database-url (default: "
    f"ATTEND_DATABASE_URL, else {DEFAULT_DATABASE}: the file attend.db in the working "
    "folder, created and migrated when new). The catalog becomes the index's next "
    "generation; books the index holds but the catalog lacks are removed. Catalog: JSONL "
    "(one object a line) or CSV with a header (UTF-8, a BOM and CRLF are fine; `,`, `;` "
    "or tab separated); `title` "
    "required; `id` optional (without one the `isbn` or `isbn13`, else an id derived "
    "from title and authors); `description`, `authors` (also `author`, `author_name`: a "
    "list, or names separated by `;` or `,`), `year`, `language` optional; names match "
    "case-insensitively; other fields are kept as metadata, and named in a notice. The "
    "catalog is checked before the model loads."
)


def _common_options(verbose_help: str = VERBOSE_HELP) -> argparse.ArgumentParser:
    """What every subcommand takes. `-v` is SUPPRESSed here so that a subcommand's default does
    not overwrite `attend -v COMMAND`'s count."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--database-url", metavar="URL", help=DATABASE_HELP)
    common.add_argument(
        "-v", "--verbose", action="count", default=argparse.SUPPRESS, help=verbose_help
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
    for add_command in (_add_index, _add_delete, _add_serve, _add_demo, _add_search, _add_db):
        add_command(sub)
    return parser


def _add_index(sub: Commands) -> None:
    p = sub.add_parser(
        "index",
        parents=[_common_options()],
        help="index a catalog (.jsonl or .csv) into the database",
        description=INDEX_DESCRIPTION,
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
        "--allow-mass-delete",
        action="store_true",
        help="index a catalog that removes more than ATTEND_MAX_DELETE_FRACTION (default 0.5) "
        "of the indexed books (default: such a catalog, and one with no valid row, is refused "
        "and nothing is written)",
    )
    p.add_argument(
        "--if-empty",
        action="store_true",
        help="index only when the database holds no index yet (a first run: docker compose "
        "seeds the demo catalog this way); else say which generation it holds, change nothing",
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


def _add_delete(sub: Commands) -> None:
    p = sub.add_parser(
        "delete",
        parents=[_common_options()],
        help="remove books by id (a new generation without them)",
        description="Remove books by id: a new generation without them, active at once. An id "
        "that is not in the active generation is named on stderr and skipped. Exit status 0 "
        "when at least one book was removed, 1 when none of the ids was in the index (nothing "
        "removed), 3 when another indexer is writing.",
    )
    p.add_argument("ids", nargs="+", metavar="ID", help="ids of the books to remove")
    p.set_defaults(func=cmd_delete)


def _add_serve(sub: Commands) -> None:
    p = sub.add_parser(
        "serve",
        parents=[_common_options(SERVE_VERBOSE_HELP)],
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


def _add_demo(sub: Commands) -> None:
    p = sub.add_parser(
        "demo",
        parents=[_common_options(DEMO_VERBOSE_HELP)],
        help="index the bundled demo catalog (180 books), then serve it",
        description="Index the bundled demo catalog into --database-url (a no-op when it "
        "already is), then serve it as `attend serve` does.",
    )
    _add_serve_options(p)
    p.set_defaults(func=cmd_demo)


def _add_search(sub: Commands) -> None:
    p = sub.add_parser(
        "search",
        parents=[_common_options()],
        help="search the index and print the ranking",
        description="Search the index at --database-url and print the ranking. When an "
        "`attend serve` answers at ATTEND_HOST:ATTEND_PORT (default 127.0.0.1:8000) for that "
        "same database (its index id and active generation) the search is asked of it, in "
        "about a second; otherwise the model and the index are loaded here (a few seconds to "
        "half a minute). -v says which.",
    )
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
    where = p.add_mutually_exclusive_group()
    where.add_argument(
        "--url",
        metavar="URL",
        help="ask the `attend serve` at URL (e.g. http://host:8000), whatever database it "
        "serves (with --database-url: only if it serves that one); an error if it does not "
        "answer",
    )
    where.add_argument(
        "--here",
        action="store_true",
        help="never ask a server: load the model and the index in this command",
    )
    p.set_defaults(func=cmd_search)


def _add_db(sub: Commands) -> None:
    p = sub.add_parser(
        "db", parents=[_common_options()], help="database schema (Alembic migrations)"
    )
    p.add_argument(
        "action",
        choices=["upgrade", "downgrade", "current"],
        help="upgrade (creates the database when new), downgrade, or show the current revision",
    )
    p.add_argument("revision", nargs="?", help="target revision (upgrade: head, downgrade: -1)")
    p.set_defaults(func=cmd_db)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # parsed first: what follows imports SQLAlchemy, pydantic and, through indexer.settings,
    # torch
    from pydantic import ValidationError
    from sqlalchemy.exc import InterfaceError, OperationalError

    from indexer import db
    from indexer.catalog import CatalogError
    from indexer.generations import IndexBusyError
    from indexer.settings import SettingError
    from service.engine.exceptions import IndexEmptyError
    from service.logs import cli_level, configure_logging

    configure_logging(cli_level(args.verbose))
    new_file = _new_sqlite_file(args)
    status: int | None = None  # None: interrupted, or an error with its traceback
    try:
        _check_machine(args)
        status = int(args.func(args))
    except ValidationError as e:
        for line in invalid_values(e):
            sys.stderr.write(f"attend {args.command}: {line}\n")
        status = 2
    except (OperationalError, InterfaceError) as e:
        sys.stderr.write(f"attend {args.command}: {unreachable(args, e)}\n")
        status = 2
    except (
        db.SchemaError,
        SettingError,
        CatalogError,
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


def _check_machine(args: argparse.Namespace) -> None:
    """Settings and what they need of this machine (a GPU, the model's folder), checked before
    a command that loads the model does: a bad one is a line on stderr, not a traceback later."""
    if args.command not in ("index", "serve", "demo", "search"):
        return
    from indexer.settings import IndexSettings
    from service.settings import ServiceSettings

    kind = IndexSettings if args.command == "index" else ServiceSettings
    kind(**overrides(args, ("database_url", "engine"))).check_machine()


def invalid_values(e: Any) -> list[str]:
    """A pydantic ValidationError as one sentence per bad value, naming it: a setting by its
    ATTEND_* variable (the value itself is not repeated: it may be a password or a token)."""
    settings = str(getattr(e, "title", "")).endswith("Settings")
    lines = []
    for error in e.errors():
        field = ".".join(str(part) for part in error["loc"])
        message = str(error["msg"]).removeprefix("Value error, ")
        name = f"ATTEND_{field.upper()}" if settings and field else field
        lines.append(message if not name or message.startswith(name) else f"{name}: {message}")
    return lines


def unreachable(args: argparse.Namespace, e: Exception) -> str:
    """A database that does not answer, in one sentence."""
    from service.index_commands import shown

    reason = str(getattr(e, "orig", None) or e).strip().splitlines()[0]
    return (
        f"cannot reach the database at {shown(database_url_of(args))} ({reason}): check that it "
        "runs, and ATTEND_DATABASE_URL or --database-url"
    )


def _new_sqlite_file(args: argparse.Namespace) -> Path | None:
    """The SQLite file the command will use, when it does not exist yet."""
    try:
        file = sqlite_file(database_url_of(args))
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
