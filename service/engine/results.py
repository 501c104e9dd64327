"""What the engine answers: plain dataclasses, which the API turns into its response schemas
(service/api/search_schemas.py, book_schemas.py) field for field."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from indexer.book_columns import BookFields


@dataclass(frozen=True)
class FacetValue:
    """One value of a search's facet (service/engine/facets.py)."""

    value: str  # as shown: an author, a heading or a series as the catalog writes it, "1990s"
    filter: dict[str, str]  # the search parameters that keep only the books with it
    count: int  # relevant books with it
    weight: float  # Σ of their weights: the share of the query's attention on them


@dataclass(frozen=True)
class Facet:
    """One field's values over a search's relevant books (service/engine/facets.py)."""

    books: int  # the relevant books counted
    weight: float  # Σ of their weights
    values: list[FacetValue]  # the heaviest first, at most the size asked for
    more: int  # values left out


@dataclass(frozen=True)
class BookRecord:
    """One book as the served generation holds it, every field."""

    book: BookFields
    description: str | None
    metadata: dict[str, Any]  # the catalog's other fields, as given


@dataclass(frozen=True)
class HeadPart:
    """One head's part of a book's weight."""

    score: float  # the head's raw score: q·k for a field head, the BM25 score for lexical
    probability: float  # p_h(book): the book's weight in this head alone
    share: float  # π_h p_h(book): this head's part of the book's weight


@dataclass(frozen=True)
class HeadsUsed:
    """The heads a ranking mixed: their weights π (after abstentions), the heads asked for that
    had no evidence (π set to 0), and every head's softmax scale."""

    weights: dict[str, float]
    abstained: tuple[str, ...]
    scales: Mapping[str, float]


@dataclass(frozen=True)
class RankedBook:
    """A search's or a similar query's hit."""

    rank: int  # 1-based, in the whole ranking
    book: BookFields
    score: float  # q·k with the description key
    weight: float  # the fused weight: Σ_h π_h p_h (a mixture), or its rank fusion's
    heads: dict[str, HeadPart]
    editions: tuple[NamedBook, ...] = ()  # the work's other editions the ranking found below it
    # a similar book's place by weight alone among the results (1: the heaviest), where the
    # order is the rank fusion's (None: a search, whose order is its weights')
    relevance_rank: int | None = None


@dataclass(frozen=True)
class AuthorNamed:
    """The author a query names (against the catalog's author index), and how."""

    name: str  # as the catalog writes it
    books: int  # the catalog's books by the name (the author head's books, for "by")
    intent: str  # "by": their books; "about": books about them (their own books left out)


@dataclass(frozen=True)
class SearchResult:
    query: str
    model: str
    scale: float  # the description head's
    heads: HeadsUsed
    entropy: float | None  # nats, of the weights over every matched book
    match_strength: float
    no_strong_match: bool
    catalog_size: int
    matched: int
    k: int
    offset: int
    generation: int | None
    results: list[RankedBook]
    author: AuthorNamed | None = None
    like: NamedBook | None = None  # the book a "books like X" query names: its similar books
    lookup: str | None = None  # "isbn" or "id": the query names one book so, the results' only
    sort: str | None = None  # the order of the relevant books (service/engine/sorting.py)
    sorted_books: int | None = None  # with `sort`: the relevant books the pages run over
    facets: dict[str, Facet] | None = None  # those asked for (service/engine/facets.py)
    # the highest title or description cosine of any book the filters keep (None: neither head
    # weighed in); below the service's least one, the answer is no strong match
    nearest: float | None = None


@dataclass(frozen=True)
class SimilarBooks:
    id: str
    title: str
    scale: float
    heads: HeadsUsed
    entropy: float | None
    match_strength: float
    no_strong_match: bool
    matched: int
    results: list[RankedBook]


@dataclass(frozen=True)
class Because:
    """A liked book's part of a recommendation's weight, in all and per head. The book by id
    alone: its title is in `Recommendations.liked`, once (with it here, 100 liked books and
    k=100 repeated every title 100 times: 2 MB a response on the shared catalog)."""

    id: str
    share: float
    heads: dict[str, float]


@dataclass(frozen=True)
class NamedBook:
    """A book a request named (liked or disliked), as the index has it."""

    id: str
    title: str


@dataclass(frozen=True)
class Recommended:
    rank: int
    book: BookFields
    weight: float
    because: list[Because]  # largest share first
    editions: tuple[NamedBook, ...] = ()  # the work's other editions the ranking found below it
    relevance_rank: int | None = None  # as `RankedBook`'s


@dataclass(frozen=True)
class Recommendations:
    liked: list[NamedBook]  # in the request's order, repeats dropped
    disliked: list[NamedBook]
    scale: float
    heads: HeadsUsed
    entropy: float | None
    match_strength: float
    no_strong_match: bool
    matched: int
    results: list[Recommended]
    own_authors: int  # at most this many results by a liked book's principal author
    held_back: int  # books by them the ranking had in the top k, left out for others
