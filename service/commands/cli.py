"""The `attend` command: index, delete, serve, search, demo and db.

Only the standard library is imported here at module level, and in the parser's and the
commands' modules (cli_parser.py, index_commands.py, serve_commands.py in this room):
`attend --help`, and a mistyped option, answer before torch, the model, SQLAlchemy or FastAPI
load (importing them took 1.4 s of the 1.9 s `attend --help` took). Each command imports what
it needs when it runs.

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
from typing import Any

from service.commands.cli_parser import build_parser
from service.commands.command_database import (
    NoIndexError,
    database_url_of,
    overrides,
    shown_url,
    sqlite_file,
)
from service.commands.index_commands import RayMissingError

logger = logging.getLogger("attend")


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
    from service.commands.logs import cli_level, configure_logging
    from service.engine.exceptions import IndexEmptyError

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
    from service.config.settings import ServiceSettings

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
    """A database that does not answer (or whose disk is full), in one sentence."""
    from service.engine.database_errors import is_disk_full

    if is_disk_full(e):  # it answers: it said so (it once read "cannot reach the database")
        return (
            f"the disk of the database at {shown_url(database_url_of(args))} is full: free space "
            "on it, then run the command again (an index run resumes where it stopped)"
        )
    reason = str(getattr(e, "orig", None) or e).strip().splitlines()[0]
    return (
        f"cannot reach the database at {shown_url(database_url_of(args))} ({reason}): check "
        "that it runs, and ATTEND_DATABASE_URL or --database-url"
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
