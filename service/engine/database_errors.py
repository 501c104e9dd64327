"""A database's failure in one sentence a client may read: what is wrong, and what to do.

Drivers' messages name the driver, the SQL being run, and the server's host and port
(`(psycopg.OperationalError) consuming input failed … [SQL: SELECT pg_catalog.pg_class.relname
…]`, `sqlite3.OperationalError … Background on this error at: …`); /readyz and admin job errors
carried them to any client, and a full disk read as "cannot reach the database" (issue 32,
finding 3). Here the exception, its `orig` (SQLAlchemy's wrapped driver error) and its causes
are searched for what they mean; the full text goes to the log only, under a reference the
client's sentence names.
"""

from __future__ import annotations

import errno
import logging
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterator

from sqlalchemy.exc import InterfaceError, OperationalError, SQLAlchemyError

from indexer import db

logger = logging.getLogger(__name__)

DISK_FULL = "the disk is full: free space on it, then retry"
_SQLITE_FULL, _SQLITE_READONLY, _SQLITE_CANTOPEN = 13, 8, 14  # sqlite3's primary result codes
_PG_DISK_FULL, _PG_TOO_MANY_CONNECTIONS = "53100", "53300"  # SQLSTATE


def _chain(e: BaseException) -> Iterator[BaseException]:
    """`e`, the driver error SQLAlchemy wrapped in it, and what caused either, once each."""
    seen: set[int] = set()
    stack: list[BaseException | None] = [e]
    while stack:
        x = stack.pop()
        if x is None or id(x) in seen:
            continue
        seen.add(id(x))
        yield x
        orig = getattr(x, "orig", None)
        stack += [orig if isinstance(orig, BaseException) else None, x.__cause__, x.__context__]


def is_disk_full(e: BaseException) -> bool:
    """SQLite's "database or disk is full", an OSError ENOSPC (or a quota), PostgreSQL's
    DiskFull (SQLSTATE 53100), anywhere in `e`'s chain."""
    for x in _chain(e):
        if isinstance(x, OSError) and x.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        if isinstance(x, sqlite3.Error) and (
            getattr(x, "sqlite_errorcode", None) == _SQLITE_FULL
            or "database or disk is full" in str(x)
        ):
            return True
        if getattr(x, "sqlstate", None) == _PG_DISK_FULL:
            return True
    return False


def is_database_error(e: BaseException) -> bool:
    """Whether `e` is the database (or the disk) failing, not bad input: what `describe`
    is for."""
    return is_disk_full(e) or any(
        isinstance(x, SQLAlchemyError | db.DatabaseGoneError | sqlite3.Error) for x in _chain(e)
    )


def _in_database(e: BaseException) -> bool:
    return any(isinstance(x, SQLAlchemyError | sqlite3.Error) for x in _chain(e))


def describe(e: BaseException) -> str:
    """What is wrong with the database, in one sentence with no driver, SQL, path, host or
    port in it."""
    if is_disk_full(e):
        return (
            DISK_FULL.replace("the disk", "the database's disk") if _in_database(e) else DISK_FULL
        )
    for x in _chain(e):
        if (sentence := _what(x)) is not None:
            return sentence
    if any(isinstance(x, OperationalError | InterfaceError) for x in _chain(e)):
        return "the database does not answer: check that it runs and ATTEND_DATABASE_URL"
    return "the database refused the request"


def _what(x: BaseException) -> str | None:
    """The sentence for one error of the chain that says what it is, or None."""
    if isinstance(x, db.DatabaseGoneError):
        if "gone" in str(x):
            return "the database file is gone (deleted): restore it, or index the catalog again"
        return (
            "the database file is no longer a database (truncated or overwritten): restore it, "
            "or index the catalog again"
        )
    if getattr(x, "sqlstate", None) == _PG_TOO_MANY_CONNECTIONS:
        return "the database refuses more connections (its max_connections are in use)"
    if getattr(x, "sqlite_errorcode", None) in (_SQLITE_READONLY, _SQLITE_CANTOPEN) or (
        isinstance(x, OSError) and x.errno in (errno.EACCES, errno.EPERM, errno.EROFS)
    ):
        return "the database file cannot be opened or written: check its permissions"
    return None


class Reporter:
    """`describe(e)` with a reference, under which the full text of `e` (driver, SQL, host)
    is logged as a warning. The same sentence again within `quiet_s` keeps its reference and
    is not logged again: an unauthenticated client polling /readyz through an outage must not
    fill the log."""

    def __init__(self, what: str, quiet_s: float = 60.0) -> None:
        self.what = what  # what failed: "the readiness check", "re-index job …"
        self.quiet_s = quiet_s
        self._lock = threading.Lock()
        self._last: tuple[str, str, float] | None = None  # (sentence, reference, when logged)

    def __call__(self, e: BaseException) -> str:
        sentence, now = describe(e), time.monotonic()
        with self._lock:
            last = self._last
            if last is not None and last[0] == sentence and now - last[2] < self.quiet_s:
                return f"{sentence} (log reference {last[1]})"
            reference = uuid.uuid4().hex[:12]
            self._last = (sentence, reference, now)
        logger.warning("%s failed [ref %s]: %s: %s", self.what, reference, type(e).__name__, e)
        return f"{sentence} (log reference {reference})"
