"""`attend stats`: what the index at --database-url holds, in a few lines (issue 33: there was no
way to see what was indexed short of `sqlite3 attend.db`). As every command module of the CLI,
only the standard library at module level (service/commands/cli.py).

    index sqlite:////home/me/attend.db, model sentence-transformers/all-MiniLM-L6-v2 (d=384)
    generation 2 active (2026-12-02 17:31 UTC) from /home/me/goodreads.csv; 2 generations kept
    30 books: 28 with a description, 30 with authors (41 names), 29 with a year (1937-2016)
    embedded: title and description keys for every book (2 without a description: their title)
    next: attend serve, then open http://127.0.0.1:8000
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from service.commands.command_database import database_url_of, open_index, shown_url

if TYPE_CHECKING:
    from indexer.boilerplate import Boilerplate
    from indexer.index_stats import IndexStats


def cmd_stats(args: argparse.Namespace) -> int:
    from sqlalchemy.orm import Session

    from indexer.index_stats import index_stats

    url = database_url_of(args)
    engine = open_index(url)
    try:
        with Session(engine) as session:
            stats = index_stats(session=session)
    finally:
        engine.dispose()
    lines = stats_lines(stats, shown_url(url), next_step(url))
    sys.stdout.write("".join(f"{line}\n" for line in lines))
    return 0


def stats_lines(stats: IndexStats, database: str, next_step: str) -> list[str]:
    """The lines `attend stats` prints; `next_step`: what to run then."""
    meta = stats.metadata
    dim = f" (d={meta['dim']})" if meta.get("dim") else ""
    lines = [f"index {database}, model {stats.model or meta.get('model', '?')}{dim}"]
    kept = ", ".join(f"{n} {state}" for state, n in sorted(stats.states.items())) or "none"
    if stats.generation is None:
        lines.append(f"no active generation (generations: {kept}): index a catalog first")
        return lines
    when = f" ({stats.finished_at:%Y-%m-%d %H:%M} UTC)" if stats.finished_at else ""
    lines.append(
        f"generation {stats.generation} active{when} from {stats.catalog or '?'}; "
        f"generations: {kept}"
    )
    years = f" ({stats.year_min}-{stats.year_max})" if stats.year_min is not None else ""
    languages = ", ".join(f"{code} {n}" for code, n in list(stats.languages.items())[:5])
    more = " …" if len(stats.languages) > 5 else ""
    lines.append(
        f"{stats.books} books: {stats.with_description} with a description, "
        f"{stats.with_authors} with authors ({stats.authors} names), {stats.with_year} with a "
        f"year{years}" + (f"; languages {languages}{more}" if languages else "")
    )
    fields = " and ".join(meta.get("key_fields") or ["title", "description"])
    missing = stats.books - stats.with_description
    lines.append(
        f"embedded: {fields} keys for every book"
        + (f" ({missing} without a description: their title)" if missing else "")
    )
    lines.append(_boilerplate(stats.boilerplate))
    lines.append(f"next: {next_step}")
    return lines


def _boilerplate(found: Boilerplate | None) -> str:
    """What the lexical heads leave out of the active generation's descriptions."""
    if found is None:
        return "boilerplate: none kept (a generation written before it: the next index finds it)"
    return f"boilerplate: {found.summary(3)}"


def next_step(database_url: str) -> str:
    """What to run after an index: the server that serves it already, else `attend serve`."""
    from service.commands.remote_search import server_url
    from service.commands.server_record import recorded_url
    from service.config.settings import ServiceSettings

    if (url := recorded_url(database_url)) is not None:
        return f"the running attend serve at {url} follows the new generation; search it there"
    settings = ServiceSettings(database_url=database_url)
    return f"attend serve, then open {server_url(settings.host, settings.port)}"
