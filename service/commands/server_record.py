"""Where the `attend serve` (or `attend demo`) of a database listens, recorded for `attend
search`: a search pointed at the same database asks that server whatever ATTEND_PORT says
where it runs (a demo on port 8090 was missed by a search that looked at 8000, and loaded the
model itself: 9.3 s against 1.7 s, issue 33).

The record is a small JSON file, `{"url": "http://127.0.0.1:8090", "pid": 1234}`: beside a
SQLite database (`attend.db.server`), else in the user's cache folder under a hash of the
database's URL (its password left out). The server writes it once it has its port and removes
it when it stops; one killed leaves it behind, so a record whose process is gone is ignored,
and `attend search` checks that whatever answers serves this very index before it asks it
(service/commands/remote_search.py). Standard library only.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
from collections.abc import Iterator
from pathlib import Path

logger = logging.getLogger(__name__)


def record_file(database_url: str) -> Path:
    """The record's file for the database at `database_url`."""
    from service.commands.command_database import shown_url, sqlite_file

    file = sqlite_file(database_url)
    if file is not None:
        return file.with_name(f"{file.name}.server")
    from models.defaults import user_cache_dir

    digest = hashlib.sha256(shown_url(database_url).encode()).hexdigest()[:16]
    return user_cache_dir() / "servers" / f"{digest}.json"


@contextlib.contextmanager
def recorded(database_url: str, url: str) -> Iterator[None]:
    """The record of this process serving `database_url` at `url` while the block runs."""
    file = record_file(database_url)
    try:
        file.parent.mkdir(parents=True, exist_ok=True)
        tmp = file.with_name(f".{file.name}.{os.getpid()}")
        tmp.write_text(json.dumps({"url": url, "pid": os.getpid()}), encoding="utf-8")
        tmp.replace(file)
    except OSError as e:  # a read-only folder: searches then look at ATTEND_HOST:ATTEND_PORT
        logger.warning("could not record where this server listens in %s: %s", file, e)
        yield
        return
    try:
        yield
    finally:
        if _pid_of(file) == os.getpid():  # not a later server's record
            file.unlink(missing_ok=True)


def recorded_url(database_url: str) -> str | None:
    """The URL a live `attend serve` of `database_url` recorded, or None."""
    file = record_file(database_url)
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or not isinstance(url := data.get("url"), str):
        return None
    pid = data.get("pid")
    if not isinstance(pid, int) or not _alive(pid):
        logger.debug("the server recorded in %s (pid %s) is gone", file, pid)
        return None
    return url


def _pid_of(file: Path) -> int | None:
    try:
        pid = json.loads(file.read_text(encoding="utf-8")).get("pid")
    except (OSError, ValueError, AttributeError):
        return None
    return pid if isinstance(pid, int) else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    except OSError:
        return False
    return True
