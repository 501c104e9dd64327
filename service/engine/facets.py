"""A search's facets: where its attention goes, by author, decade, language, subject heading,
series and publisher (`facets=author,year,…`).

A facet counts the relevant books (service/engine/sorting.py `relevant_hits`: the matched books
whose weight is at least SORT_FLOOR of the top book's, the first SORT_POOL by weight; a work
once, as the ranking shows it, at its best edition's weight) and weighs each value by the share
of the query's attention that falls on those of them with the value: the Σ of their weights. A
book's year (by decade) and language are one value each, so those values sum to at most the
facet's own `weight`; a book with several authors, headings, series or publishers counts under
each of them. Each value carries the query parameters that filter on it, so a page can make it
a link.
Facets read the ranked hits only, never the catalog.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from typing import Any

from indexer.languages import language_key
from service.engine.query_ranking import Hit
from service.engine.results import Facet, FacetValue
from service.engine.served_index import ServedIndex
from service.engine.sorting import relevant_hits

FACETS = ("author", "year", "language", "subjects", "series", "publisher")
# the facets whose values are folded names of the catalog's (service/engine/name_rows.py), and
# the filter that keeps a value's books
_NAMED = {"subjects": "subject", "series": "series", "publisher": "publisher"}
FACET_VALUES = 10  # values a facet lists by default, the heaviest
MAX_FACET_VALUES = 50


def facets(
    index: ServedIndex, hits: Sequence[Hit], fields: Sequence[str], size: int = FACET_VALUES
) -> dict[str, Facet]:
    """The facets `fields` (FACETS) of the ranked `hits`, best first, `size` values each."""
    pool = [hit for hit, _ in relevant_hits(hits)]
    total = sum(hit.weight for hit in pool)
    out = {}
    for field in fields:
        counts: dict[Hashable, int] = {}
        weights: dict[Hashable, float] = {}
        for hit in pool:
            for key in _keys(index, field, hit.row):
                counts[key] = counts.get(key, 0) + 1
                weights[key] = weights.get(key, 0.0) + hit.weight
        ordered = sorted(counts, key=lambda key: (-weights[key], -counts[key], str(key)))
        values = [
            FacetValue(*_shown(index, field, key), counts[key], weights[key])
            for key in ordered[:size]
        ]
        out[field] = Facet(len(pool), total, values, max(0, len(ordered) - size))
    return out


def _keys(index: ServedIndex, field: str, row: int) -> Iterable[Hashable]:
    """A book's values of `field`, each once, as keys: what the catalog's name indexes hold
    (nothing folded here: a facet reads a thousand books a query)."""
    if field == "author":
        return index.names.rows.authors[row]  # folded whole names
    if field == "year":
        year = index.books.years[row]
        return () if year is None else (year - year % 10,)  # -405 → -410: the decade holding it
    if field == "language":
        key = language_key(index.books.languages[row])
        return (key,) if key else ()
    if field == "subjects":
        return index.names.rows.subjects[row]
    if field == "series":
        return index.names.rows.series[row]
    if field == "publisher":
        return index.names.rows.publishers[row]
    raise ValueError(f"no facet {field!r}; facets: {', '.join(FACETS)}")


def _shown(index: ServedIndex, field: str, key: Any) -> tuple[str, dict[str, str]]:
    """A value as a response shows it, and the search parameters that keep its books."""
    if field == "author":
        name = index.names.written(key)  # as the first book crediting the author writes it
        return name, {"author": name}
    if field == "year":
        return f"{key}s", {"year_min": str(key), "year_max": str(key + 9)}
    if field == "language":
        return key, {"language": key}
    name = index.names.rows.written.get(key, key)  # as the catalog first writes it
    return name, {_NAMED[field]: name}
