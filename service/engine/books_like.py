"""A typed query that names a book of the catalog: by its ISBN or id (service/engine/
isbn_lookup.py), answered by that book alone (`lookup_result`); or asking for books like it,
"books like Dune", "similar to the hobbit", "novels like The Secret History?", answered by that
book's similar books (service/engine/book_ranking.py), which know what the book is; ranked as a
search, the query finds the book itself and its title's words.

The book is found by its title as the query writes it: the title head's nearest title keys to
the named text's embedding (exact, over the whole catalog), then the first of them whose title
reads the same folded (case, accents and punctuation aside, a closing "(Series #n)" dropped, a
leading article optional, with or without its subtitle after a colon). A query whose named text
is no title of the catalog is searched as typed: "books like the sea" is about the sea.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence

from torch import Tensor

from indexer.filters import Filters
from service.config.head_weights import BookHeads
from service.engine.book_ranking import similar
from service.engine.name_rows import ARTICLES, title_words
from service.engine.results import HeadsUsed, NamedBook, RankedBook, SearchResult
from service.engine.served_index import ServedIndex
from service.engine.tickets import SearchOptions

# "books like X", "a novel similar to X", "more like X", "read-alikes for X": the phrase, then X
_LIKE = re.compile(
    r"^\s*(?:(?:some|any|other|good|great|a|an)\s+)?"
    r"(?:(?:books?|novels?|stories|reads?|titles?|something|anything|more)\s+"
    r"(?:just\s+)?(?:like|similar\s+to)"
    r"|similar\s+to|read-?alikes?\s+(?:for|of|to))"
    r"\s+(?P<title>\S.*?)[\s?.!]*$",
    re.IGNORECASE,
)
TITLE = "title"  # the title keys' field (indexer.batches.FIELDS)
NEAREST = 8  # title keys read for the named title: its editions and look-alikes


def named_text(query: str) -> str | None:
    """The X of "books like X" (as typed), or None for a query that asks no such thing."""
    m = _LIKE.match(query)
    return m.group("title") if m else None


def _forms(words: Sequence[str]) -> set[tuple[str, ...]]:
    """A title's folded words with and without a leading article."""
    words = tuple(words)
    return {words, words[1:]} if words[:1] and words[0] in ARTICLES else {words}


def _title_forms(title: str) -> set[tuple[str, ...]]:
    """What a reader may type for `title`: all of it, or what comes before its subtitle."""
    forms = _forms(title_words(title))
    if ":" in title:
        forms |= _forms(title_words(title.split(":", 1)[0]))
    return {f for f in forms if f}


def books_named(
    index: ServedIndex, queries: Sequence[str], encode: Callable[[list[str]], Tensor]
) -> list[int | None]:
    """Per query, the row of the catalog book it asks for books like (None: it asks for none,
    or names no title of the catalog). `encode` embeds texts (the search's encoder, cached).
    The book is found whatever a query's filters (they apply to its similar books)."""
    named = [named_text(q) for q in queries]
    asking = [i for i, x in enumerate(named) if x is not None and _forms(title_words(x)) != {()}]
    found: list[int | None] = [None] * len(queries)
    if not asking or len(index) == 0:
        return found
    # each named text, then each whole query: "Something Like Summer" may be a title itself
    texts = [named[i] or "" for i in asking] + [queries[i] for i in asking]
    rows = _titled(index, texts, encode(texts))
    for a, i in enumerate(asking):
        if rows[len(asking) + a] is None:
            found[i] = rows[a]
    return found


def _titled(index: ServedIndex, texts: list[str], q: Tensor) -> list[int | None]:
    """Per text, the row of a book it is the title of (None: none), among the NEAREST books by
    title key to its embedding q (T, d)."""
    q = q.to(index.device)
    nearest = index.keys.dense_heads(q, [(TITLE, 1.0)], filters=[Filters()] * len(q), mask=None)
    ((rows, _, _),) = nearest.top(min(NEAREST, len(index)))[0]  # (T, NEAREST)
    titles = index.books.titles
    out: list[int | None] = []
    for text, near in zip(texts, rows.tolist(), strict=True):
        wanted = _forms(title_words(text))
        out.append(next((r for r in near if r >= 0 and wanted & _title_forms(titles[r])), None))
    return out


def like_result(
    index: ServedIndex, text: str, options: SearchOptions, row: int, heads: BookHeads
) -> SearchResult:
    """The search response of `text`, which asks for books like catalog row `row`: the book's
    similar books (a book query's heads, not the search's; the search's filters and page)."""
    end = options.offset + options.k
    found = similar(index, index.books.ids[row], k=end, heads=heads, filters=options.filters)
    return SearchResult(
        query=text,
        model=index.model,
        scale=found.scale,
        heads=found.heads,
        entropy=found.entropy,
        match_strength=found.match_strength,
        no_strong_match=found.no_strong_match,
        catalog_size=len(index),
        matched=found.matched,
        k=options.k,
        offset=options.offset,
        generation=index.generation,
        results=found.results[options.offset : end],  # ranks and relevance ranks of all `end`
        like=NamedBook(index.books.ids[row], index.books.titles[row]),
    )


def lookup_result(
    index: ServedIndex,
    text: str,
    options: SearchOptions,
    found: tuple[int, str],
    *,
    scales: Mapping[str, float],
    scale: float,
) -> SearchResult:
    """The search response of `text`, which names catalog row `found[0]` by `found[1]`: that
    book alone, all the weight on it (an identifier names one book), where the query's filters
    keep it; on the first page only. `scales`: every head's, `scale`: the description head's
    (what a search response shows)."""
    row, by = found
    mask = index.filters.mask(options.filters)
    kept = mask is None or bool(mask[row])
    hits = [RankedBook(1, index.books.row(row), 1.0, 1.0, {}, relevance_rank=1)]
    return SearchResult(
        query=text,
        model=index.model,
        scale=scale,
        heads=HeadsUsed({}, (), scales),
        entropy=0.0,
        match_strength=1.0 if kept else 0.0,
        no_strong_match=not kept,
        catalog_size=len(index),
        matched=int(kept),
        k=options.k,
        offset=options.offset,
        generation=index.generation,
        results=hits if kept and options.offset == 0 else [],
        lookup=by,
    )
