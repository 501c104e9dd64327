"""What waits for the search worker: a search request's options (`SearchOptions`), its place in
the line (`Ticket`), and torch work that is no typed search (`Call`). The searcher
(service/engine/searcher.py) makes them, the line (service/engine/batching.py) orders them;
both import them from here, and this module imports neither.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from indexer.filters import Filters

if TYPE_CHECKING:
    from service.engine.results import SearchResult
    from service.engine.served_index import ServedIndex


@dataclass(frozen=True)
class SearchOptions:
    """A search request's paging, filters (the attention mask) and head weights π (None: the
    searcher's default)."""

    k: int = 10
    offset: int = 0
    filters: Filters = field(default_factory=Filters)
    heads: dict[str, float] | None = None
    sort: str | None = None  # one of service/engine/sorting.py SORTS; None: by weight
    facets: tuple[str, ...] = ()  # service/engine/facets.py FACETS
    facet_size: int = 10  # values a facet lists at most

    @property
    def wide(self) -> bool:
        """Whether the relevant books are ranked, not only the page (a sort, facets)."""
        return self.sort is not None or bool(self.facets)


@dataclass
class Ticket:
    """One search request's place in the line: its queries, and what the worker has done with
    them (not a re-index job: those are service/engine/reindex_jobs.py's)."""

    queries: list[str]
    options: SearchOptions
    future: Future[list[SearchResult]] = field(default_factory=Future)
    taken: int = 0  # queries handed to a batch so far; they are answered in order
    responses: list[SearchResult] = field(default_factory=list)
    # the generation its first queries were answered from: a request answered over several
    # batches is answered from one generation, even if a new one is swapped in meanwhile
    index: ServedIndex | None = None

    @property
    def left(self) -> int:
        """Queries not yet in a batch."""
        return len(self.queries) - self.taken


@dataclass
class Call:
    """Torch work that is no typed search, run whole on the worker: `run()` answers `future`."""

    work: Callable[[], Any]
    future: Future[Any] = field(default_factory=Future)

    def run(self) -> None:
        if not self.future.set_running_or_notify_cancel():
            return  # the client is gone
        try:
            self.future.set_result(self.work())
        except BaseException as e:  # the request gets its error; the worker goes on
            self.future.set_exception(e)
