"""The `attend` command line: its parser, every subcommand's options and help.

Only the standard library is imported here at module level, and in the commands' modules whose
functions the subcommands name (index_commands.py, serve_commands.py in this room), so that
`attend --help` and a mistyped option answer before torch, the model, SQLAlchemy or FastAPI
load. cli.py runs what it parses.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from service.commands.cli_stats import cmd_stats
from service.commands.index_commands import cmd_db, cmd_delete, cmd_index
from service.commands.serve_commands import cmd_demo, cmd_search, cmd_serve

if TYPE_CHECKING:  # what add_subparsers returns: a class private to argparse, generic in typeshed
    Commands = argparse._SubParsersAction[argparse.ArgumentParser]

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
    "(one object a line, .jsonl), a JSON array (.json), CSV (.csv) or TSV (.tsv, .txt) "
    "with a header, any of them gzipped (.gz); UTF-8 or UTF-16 with a BOM, CRLF is fine, "
    "a CSV may be `,`, `;` or tab separated. `title` required; `id` optional (without one "
    "the `isbn` or `isbn13`, else an id derived from title and authors); `description` "
    "(also `summary`, `synopsis`, `blurb`, `comments`: HTML reduced to text), `authors` "
    "(also `author`, `author_name`, `primary author`, joined with `additional authors`: a "
    "list, or names separated by `;`, ` & ` or `,`), `year` (also `original publication "
    "year`, `year published`, a date's year: `pubdate`, `date`), `language` optional; "
    "Goodreads, Calibre and LibraryThing exports read as they are; names match "
    "case-insensitively; other fields are kept as metadata, and named in a notice "
    "(--column maps one). The catalog is checked before the model loads."
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
        "ATTEND_* environment variables or .env (see docs/configuration.md); an option "
        "given here wins over its variable.",
    )
    parser.add_argument(
        "-v", "--verbose", action="count", default=0, help="log INFO lines too (-vv: DEBUG)"
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add_command in (
        _add_index,
        _add_delete,
        _add_serve,
        _add_demo,
        _add_search,
        _add_stats,
        _add_db,
    ):
        add_command(sub)
    return parser


def _add_index(sub: Commands) -> None:
    p = sub.add_parser(
        "index",
        parents=[_common_options()],
        help="index a catalog (.jsonl, .json, .csv, .tsv, .xlsx, .mrc, .xml, or .gz of one) into "
        "the database",
        description=INDEX_DESCRIPTION,
    )
    p.add_argument(
        "path",
        metavar="CATALOG",
        help="the catalog file: .jsonl, .json, .csv, .tsv, .xlsx, .mrc (MARC21), .xml (MARCXML) "
        "(or .gz)",
    )
    p.add_argument(
        "--skip-invalid",
        action="store_true",
        help="index the valid rows and list the rejected ones (default: write nothing)",
    )
    p.add_argument(
        "--column",
        action="append",
        metavar="HEADER=FIELD",
        help="read the catalog column HEADER as FIELD (id, title, description, authors, year, "
        "language, isbn; subjects or series, for those heads; or metadata: keep it out of the "
        "fields), over the names exports use and ATTEND_CATALOG_COLUMNS; repeatable, e.g. "
        "--column 'Writer=authors'",
    )
    p.add_argument(
        "--encoding",
        metavar="NAME",
        help="the catalog text's encoding where it is not UTF-8, e.g. latin-1 (default: "
        "ATTEND_CATALOG_ENCODING, else UTF-8, and a catalog that is not is read as the encoding "
        "charset-normalizer finds, named in a notice)",
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
        description="Search the index at --database-url and print the ranking. When the "
        "`attend serve` (or `attend demo`) of that same database answers (where it recorded it "
        "listens, beside the database, else at ATTEND_HOST:ATTEND_PORT, default "
        "127.0.0.1:8000; its index id and active generation must be the database's) the search "
        "is asked of it, in about a second; otherwise the model and the index are loaded here "
        "(a few seconds to half a minute), and one line on stderr says why.",
    )
    p.add_argument("query", help="what to search for (1-512 characters)")
    p.add_argument("-k", type=int, default=10, help="results to show (1-100; default 10)")
    p.add_argument(
        "--offset", type=int, default=0, help="results to skip first (0-1000; default 0)"
    )
    p.add_argument("--author", help="keep books with an author whose name contains this")
    p.add_argument("--year-min", type=int, metavar="YEAR", help="keep books from this year on")
    p.add_argument("--year-max", type=int, metavar="YEAR", help="keep books up to this year")
    p.add_argument(
        "--language",
        help="keep books in this language: a code in any ISO 639 form (fr, fre, fra, fr-CA: one)",
    )
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


def _add_stats(sub: Commands) -> None:
    p = sub.add_parser(
        "stats",
        parents=[_common_options()],
        help="what the index holds: books, generations, fields, authors and years",
        description="Say in a few lines what the index at --database-url holds: the database "
        "and the model, the active generation and the catalog it came from, the generations "
        "kept, the books with a description, authors and a year (the years' range), the "
        "fields embedded, and what to run next. Loads no model.",
    )
    p.set_defaults(func=cmd_stats)


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
