"""What an index holds, for `attend stats`: its active generation and where it came from, the
generations kept, and how much of the book fields a search works with are filled (descriptions,
authors, years, languages), short of opening the database by hand (issue 33).

One pass over the active generation's rows, reading only the columns counted (authors are JSON,
so their distinct names are counted here rather than in SQL); a keyword-only `session=`
function, as indexer/store.py's.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from indexer import boilerplate_rows, store
from indexer.boilerplate import Boilerplate
from indexer.languages import language_key
from indexer.schema import Book, Generation


@dataclass(frozen=True)
class IndexStats:
    """The active generation's books and how they were indexed."""

    generation: int | None  # None: the database holds no active generation
    catalog: str | None = None
    model: str | None = None
    finished_at: datetime | None = None
    states: dict[str, int] = field(default_factory=dict)  # generations by state
    books: int = 0
    with_description: int = 0
    with_authors: int = 0
    authors: int = 0  # distinct names
    with_year: int = 0
    year_min: int | None = None
    year_max: int | None = None
    languages: dict[str, int] = field(default_factory=dict)  # the most common first
    metadata: dict[str, Any] = field(default_factory=dict)  # what the last run recorded
    boilerplate: Boilerplate | None = None  # the active generation's (None: it kept none)


def index_stats(*, session: Session) -> IndexStats:
    states = dict(
        session.execute(select(Generation.state, func.count()).group_by(Generation.state)).all()
    )
    active = store.active_generation(session=session)
    if active is None:
        return IndexStats(None, states=states)
    books = with_description = with_authors = with_year = 0
    names: set[str] = set()
    languages: Counter[str] = Counter()
    years: list[int] = []
    rows = session.execute(
        select(Book.description, Book.authors, Book.year, Book.language)
        .where(store.visible_at(active.id))
        .execution_options(yield_per=2000)
    )
    for description, authors, year, language in rows:
        books += 1
        with_description += bool(description)
        with_authors += bool(authors)
        names.update(authors or ())
        if year is not None:
            with_year += 1
            years.append(year)
        if language:
            languages[language_key(language)] += 1
    return IndexStats(
        active.id,
        catalog=active.catalog,
        model=active.model,
        finished_at=active.finished_at,
        states=states,
        books=books,
        with_description=with_description,
        with_authors=with_authors,
        authors=len(names),
        with_year=with_year,
        year_min=min(years, default=None),
        year_max=max(years, default=None),
        languages=dict(languages.most_common()),
        metadata=store.get_metadata(session=session),
        boilerplate=boilerplate_rows.kept(session=session, generation=active.id),
    )
