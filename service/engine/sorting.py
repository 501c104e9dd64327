"""A search's relevant books in another order than their weights (`sort=year`, `-year`, `title`,
`-title`, `rating`, `-rating`), as a catalog's reader sorts a result list.

The relevant books are the matched books whose weight is at least SORT_FLOOR of the top book's,
the first SORT_POOL of them by weight: the rest of a softmax over a whole catalog is its tail,
and sorting the tail by year would put noise first. They are ordered by the key (a title
without its leading article, case and accents aside; the year; the readers' average rating),
`-` descending; books without the key (no year, no rating) come after those with one; equal
keys keep their order by weight. Each keeps its weight and its place by weight
(`relevance_rank`), so the weights still say how relevant each is.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from service.engine.name_rows import ARTICLES, title_words
from service.engine.query_ranking import Hit
from service.engine.served_index import ServedIndex

SORTS = ("year", "-year", "title", "-title", "rating", "-rating")
SORT_POOL = 1000  # relevant books at most: the first by weight
SORT_FLOOR = 0.01  # of the top weight: a lighter book is not among the relevant ones


def relevant_hits(hits: Sequence[Hit]) -> list[tuple[Hit, int]]:
    """The relevant ones of `hits` (best first), each with its 1-based place by weight: a
    weight of SORT_FLOOR of the top's at least, the first SORT_POOL (what a sort orders and a
    facet counts, service/engine/facets.py)."""
    if not hits:
        return []
    floor = SORT_FLOOR * hits[0].weight
    return [(h, place) for place, h in enumerate(hits[:SORT_POOL], start=1) if h.weight >= floor]


def sorted_hits(index: ServedIndex, hits: list[Hit], sort: str) -> list[tuple[Hit, int]]:
    """The relevant ones of `hits` (best first) in `sort`'s order, each with its 1-based place
    by weight."""
    pool = relevant_hits(hits)
    key = _key(index, sort.lstrip("-"))
    known = [(h, p) for h, p in pool if key(h.row) is not None]
    unknown = [(h, p) for h, p in pool if key(h.row) is None]
    known.sort(key=lambda hp: key(hp[0].row), reverse=sort.startswith("-"))  # stable both ways
    return known + unknown


def _key(index: ServedIndex, field: str) -> Callable[[int], Any]:
    """A row's sort key (one field's: all str, or all numbers), None where it has none."""
    if field == "year":
        return lambda row: index.books.years[row]
    if field == "rating":

        def rating(row: int) -> float | None:
            value = float(index.ratings[row])
            return None if math.isnan(value) else value

        return rating

    def title(row: int) -> str:
        words = title_words(index.books.titles[row])
        return " ".join(words[1:] if len(words) > 1 and words[0] in ARTICLES else words)

    return title
