"""Bodies of search: its parameters, its response, and what every ranked response shares (head
info, a hit's book fields). Field descriptions show in /docs. The engine answers in plain
dataclasses (service/engine/results.py); `search_response` turns one into this schema."""

from __future__ import annotations

import functools
import re
from dataclasses import fields, is_dataclass
from typing import Annotated, Any, Literal, Self

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, model_validator
from starlette.responses import Response

from indexer.book_columns import BookFields
from indexer.filters import Filters
from models.text import is_blank, normalize_text
from service.config.head_weights import HEADS, MAX_HEADS_CHARS, parse_heads
from service.engine.facets import FACET_VALUES, FACETS, MAX_FACET_VALUES
from service.engine.results import HeadsUsed, SearchResult
from service.engine.tickets import SearchOptions

MAX_QUERY_CHARS = 512
MAX_K = 100
MAX_OFFSET = 1000
MAX_BATCH_QUERIES = 64
# A hit shows this much of a title (GET /books/{id} the whole): a catalog row may hold a
# title of up to ATTEND_MAX_ROW_BYTES (1 MiB), and k hits of 900 KB titles made responses of
# hundreds of megabytes (issue 25, finding 6).
MAX_SHOWN_TITLE_CHARS = 1_000
# and this many of its authors, the rest counted: a book crediting 10,000 names put all of them
# in every hit (a 64-query POST answered 24 MB: issue 50, finding 6)
MAX_SHOWN_AUTHORS = 20
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def shown_title(title: str) -> str:
    """`title`, or its first MAX_SHOWN_TITLE_CHARS characters and an ellipsis."""
    if len(title) <= MAX_SHOWN_TITLE_CHARS:
        return title
    return title[: MAX_SHOWN_TITLE_CHARS - 1] + "…"


def _clean_query(text: str) -> str:
    if not text.strip():
        raise ValueError("the query is empty")
    text = normalize_text(text).strip()  # as the books' terms are: NFKC, no invisible characters
    if is_blank(text):  # the Hangul fillers are letters that show as nothing
        raise ValueError(
            "the query holds only invisible characters (zero-width or format characters, "
            "combining marks, the Hangul fillers): type the words to search for"
        )
    if _CONTROL.search(text):
        raise ValueError("the query contains control characters")
    if len(text) > MAX_QUERY_CHARS:
        # NFKC can lengthen a text 18 times (U+FDFA is a phrase of 18 characters): the bound
        # holds for what is ranked and explained, not only for what was sent (issue 50)
        raise ValueError(
            f"the query is {len(text)} characters once normalised (NFKC: some characters are "
            f"written out as several); at most {MAX_QUERY_CHARS}"
        )
    return text


Query = Annotated[
    str,
    Field(
        max_length=MAX_QUERY_CHARS,
        description=f"Search text, 1 to {MAX_QUERY_CHARS} characters, as sent and once "
        "normalised (NFKC).",
    ),
    AfterValidator(_clean_query),
]


def _parsed_heads(value: str) -> str:
    parse_heads(value)  # ValueError: a 422 naming the problem
    return value


def _facet_names(value: str) -> str:
    names = value.split(",")
    if unknown := [n for n in names if n not in FACETS]:
        raise ValueError(f"no facet {unknown[0]!r}; facets: {', '.join(FACETS)}")
    if len(set(names)) < len(names):
        raise ValueError("a facet is named twice")
    return value


# `name:weight,…`, checked by parse_heads (a request's `heads`)
HeadWeights = Annotated[
    str, Field(min_length=1, max_length=MAX_HEADS_CHARS), AfterValidator(_parsed_heads)
]


class PageAndFilters(BaseModel):
    """Paging and filters. Filters are the attention mask: the softmax runs over matching books."""

    model_config = ConfigDict(extra="forbid")

    k: int = Field(10, ge=1, le=MAX_K, description="Results per page.")
    offset: int = Field(0, ge=0, le=MAX_OFFSET, description="Results to skip (paging).")
    author: str | None = Field(
        None,
        min_length=1,
        max_length=200,
        description="Keep books with an author whose name contains this (case aside), or "
        "holds its words (accents and punctuation aside: `J.R.R. Tolkien` keeps `J. R. R. "
        "Tolkien`).",
    )
    year_min: int | None = Field(
        None, ge=-5000, le=5000, description="Keep books from this year on."
    )
    year_max: int | None = Field(None, ge=-5000, le=5000, description="Keep books up to this year.")
    language: str | None = Field(
        None,
        min_length=1,
        max_length=64,
        description="Keep books in this language: a code in any ISO 639 form, matched as the "
        "language it names (fr, fre, fra and fr-CA are one).",
    )
    subject: str | None = Field(
        None,
        min_length=1,
        max_length=200,
        description="Keep books filed under this subject heading, whole (case, accents and "
        "punctuation aside): a `subjects` facet value, or a heading as the catalog writes it.",
    )
    series: str | None = Field(
        None,
        min_length=1,
        max_length=200,
        description="Keep books of this series, whole (case, accents and punctuation aside): "
        'a `series` facet value, the series of a title\'s "(Discworld, #4)" marker or of a '
        "catalog's series column.",
    )
    publisher: str | None = Field(
        None,
        min_length=1,
        max_length=200,
        description="Keep books of this publisher, whole (case, accents and punctuation aside): "
        "a `publisher` facet value, or a publisher as the catalog's `publisher` or "
        "`publishers` field writes it.",
    )
    facets: Annotated[str, AfterValidator(_facet_names)] | None = Field(
        None,
        max_length=200,
        description=f"Facets to return, comma-separated: {', '.join(FACETS)} (years by decade). "
        "Each lists its values over the relevant books (as `sort` defines them) with their "
        "`count` and `weight`, the share of the query's attention on the books with the value "
        "(Σ of their weights), the heaviest first, and the parameters that filter on it.",
    )
    facet_size: int = Field(
        FACET_VALUES, ge=1, le=MAX_FACET_VALUES, description="Values per facet at most."
    )
    sort: Literal["year", "-year", "title", "-title", "rating", "-rating"] | None = Field(
        None,
        description="Order the relevant books by this instead of their weights (`-`: "
        "descending): the matched books whose weight is at least 1% of the top book's, the "
        "first 1,000 by weight, ordered by their year, their title (its leading article, case "
        "and accents aside) or their readers' average rating (the catalog's `average_rating`); "
        "books without it come after those with one, equal ones in their order by weight. Each "
        "keeps its weight and its place by weight (`relevance_rank`); `sorted_books` says how "
        "many the pages run over. Default: by weight.",
    )
    heads: HeadWeights | None = Field(
        None,
        description=f"Head weights, e.g. `title:0.2,description:0.5,lexical:0.3` (heads: "
        f"{', '.join(HEADS)}; weights ≥ 0, not all 0, normalised to sum 1; a head left out "
        "gets 0). Default: the service's ATTEND_HEADS.",
    )

    @model_validator(mode="after")
    def _years_in_order(self) -> Self:
        if (
            self.year_min is not None
            and self.year_max is not None
            and self.year_min > self.year_max
        ):
            raise ValueError(f"year_min ({self.year_min}) is after year_max ({self.year_max})")
        return self

    def options(self) -> SearchOptions:
        """The engine's search options of this request."""
        return SearchOptions(
            k=self.k,
            offset=self.offset,
            filters=Filters(
                self.author,
                self.year_min,
                self.year_max,
                self.language,
                subject=self.subject,
                series=self.series,
                publisher=self.publisher,
            ),
            heads=parse_heads(self.heads) if self.heads else None,
            sort=self.sort,
            facets=tuple(self.facets.split(",")) if self.facets else (),
            facet_size=self.facet_size,
        )


class SearchParams(PageAndFilters):
    """`GET /search` query parameters."""

    q: Query


class SearchRequest(PageAndFilters):
    """`POST /search`: several queries answered in one batch."""

    queries: list[Query] = Field(min_length=1, max_length=MAX_BATCH_QUERIES)


class HeadShare(BaseModel):
    score: float = Field(
        description="The head's raw score: q·k with the field's key (title, description, and "
        "the description key for author and series), or the BM25 score (lexical); 0 for a book "
        "the head leaves out (its probability is 0)."
    )
    probability: float = Field(description="p_h: the book's weight in this head's softmax alone.")
    share: float = Field(description="π_h · p_h: this head's part of the book's weight.")


class HeadInfo(BaseModel):
    weight: float = Field(description="π_h, the head's mixture weight (the heads' sum to 1).")
    scale: float = Field(description="The head's softmax scale: logits = scale · score.")
    abstained: bool = Field(
        False,
        description="True for a head asked for that has no evidence for this query: a lexical "
        "head whose query has no term among the books the filters keep, an author head for a "
        "query that names no author (or a book no other book of whose authors is kept), a "
        "series head for a typed query or a book of no series. Its weight is 0 and the others "
        "are renormalised.",
    )


def head_info(used: object) -> object:
    """The `heads` of a response from the engine's `HeadsUsed`: the heads that weighed in, then
    those that abstained (anything else is validated as it is)."""
    if not isinstance(used, HeadsUsed):
        return used
    info = {h: HeadInfo(weight=w, scale=used.scales[h]) for h, w in used.weights.items()}
    info.update(
        {h: HeadInfo(weight=0.0, scale=used.scales[h], abstained=True) for h in used.abstained}
    )
    return info


# a response's `heads`, given as the engine's HeadsUsed
HeadsInfo = Annotated[dict[str, HeadInfo], BeforeValidator(head_info)]


class BookFieldsOut(BaseModel):
    """A hit's book (its description and other fields: `GET /books/{id}`). Validated from an
    engine hit, whose book's fields are under `book`, they are the hit's own here."""

    id: str
    title: str = Field(
        description=f"The book's title, its first {MAX_SHOWN_TITLE_CHARS:,} characters at most "
        "(cut with …; `GET /books/{id}` has the whole)."
    )
    authors: list[str] = Field(
        description=f"The book's authors, its first {MAX_SHOWN_AUTHORS} at most "
        "(`GET /books/{id}` has them all)."
    )
    more_authors: int = Field(0, description="The authors left out of `authors`.")
    year: int | None
    language: str | None

    @model_validator(mode="before")
    @classmethod
    def _book_fields_inline(cls, hit: Any) -> Any:
        book = getattr(hit, "book", None)
        if not isinstance(book, BookFields) or not is_dataclass(hit):
            return hit
        # shallow, by names read once: dataclasses.asdict deep-copies every book's authors,
        # which was two thirds of building a 64-query response (11 of 17 ms)
        kind: type = type(hit)
        found = {name: getattr(hit, name) for name in _field_names(kind) if name != "book"}
        own = {name: getattr(book, name) for name in _field_names(BookFields)}
        authors = book.authors
        return {
            **own,
            "title": shown_title(book.title),
            "authors": authors[:MAX_SHOWN_AUTHORS],
            "more_authors": max(0, len(authors) - MAX_SHOWN_AUTHORS),
            **found,
        }


@functools.cache
def _field_names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in fields(cls))


class Edition(BaseModel):
    """Another edition of a result's work: the same title (or description) by the same
    principal author. A ranking gives a work one slot, its best-ranked edition."""

    id: str
    title: str


EDITIONS_TEXT = (
    "The work's other editions that ranked below this one, best first: a work takes one slot."
)


class SearchHit(BookFieldsOut):
    rank: int = Field(description="1-based position in the whole ranking (offset included).")
    score: float = Field(
        description="Raw dot product q·k of the query and the book's description key "
        "(cosine similarity: both have unit length)."
    )
    weight: float = Field(
        description="The book's attention weight: Σ_h π_h · p_h, the mixture of the heads' "
        "softmax distributions over all `matched` books. Weights of all matched books sum to 1."
    )
    relevance_rank: int = Field(
        description="1-based place by `weight` alone (offset included): `rank` for a typed "
        "search, whose order is its weights', unless it asks for a `sort`; a `like` query's "
        "order is its similar books'."
    )
    heads: dict[str, HeadShare] = Field(
        description="Per head with a weight: its score, the book's weight in that head alone, "
        "and its share of `weight` (the shares sum to `weight`)."
    )
    editions: list[Edition] = Field(default_factory=list, description=EDITIONS_TEXT)


class LikeOut(BaseModel):
    id: str
    title: Annotated[str, AfterValidator(shown_title)]


class AuthorNamedOut(BaseModel):
    name: str = Field(description="The author, as the catalog writes the name.")
    books: int = Field(description="The catalog's books by this author.")
    intent: Literal["by", "about"] = Field(
        description="`by`: the query asks for the author's books, which the author head "
        'attends over; `about`: for books about the author ("a biography of …"), so the '
        "author head abstains and the author's own books are left out, as by a filter."
    )


class FacetValueOut(BaseModel):
    value: str = Field(
        description="An author as the catalog writes the name, a decade (`1990s`), a language "
        "code, or a subject heading, a series or a publisher as the catalog first writes it."
    )
    count: int = Field(description="The relevant books with this value.")
    weight: float = Field(
        description="Σ of their weights: the share of the query's attention on them."
    )
    filter: dict[str, str] = Field(
        description="The search parameters that keep only the books with this value."
    )


class FacetOut(BaseModel):
    books: int = Field(description="The relevant books the facet counts.")
    weight: float = Field(
        description="Σ of their weights. A book's decade and language are one value each, so "
        "their values' weights sum to this at most; a book with several authors, headings, "
        "series or publishers counts under each."
    )
    values: list[FacetValueOut] = Field(description="The heaviest first, `facet_size` at most.")
    more: int = Field(description="Values left out.")


class SearchResponse(BaseModel):
    query: str
    model: str = Field(description="Encoder that embedded the query and the keys.")
    scale: float = Field(
        description="Softmax scale (inverse temperature) of the description head, whose q·k is "
        "each result's `score`."
    )
    heads: HeadsInfo = Field(
        description="The heads mixed for this query, with their weights π and scales. A lexical "
        "head asked for but with no query term in the catalog abstains: it is listed with "
        "weight 0 and `abstained: true`, and the others are renormalised."
    )
    entropy: float | None = Field(
        description="Entropy (nats) of the weight distribution over all `matched` books: "
        "0 when one book takes all the weight, ln(matched) when it is uniform (the sharded "
        "engine computes it too, over every shard's books)."
    )
    match_strength: float = Field(
        description="log(top weight · matched) / log(matched): 0 when the best book weighs no "
        "more than under a uniform distribution (1/matched), 1 when it has all the weight."
    )
    no_strong_match: bool = Field(
        description="match_strength < 0.55 (the top weight is close to uniform on a log scale, "
        "under matched^-0.45: nothing stands out), or no word of the query occurs in any book, "
        "or the query names no author of the catalog and `nearest` is below "
        "ATTEND_MIN_MATCH_COSINE (0.4): its words may occur in books with nothing about them."
    )
    nearest: float | None = Field(
        None,
        description="The highest title or description cosine of any book the filters keep, "
        "whatever k: how close the nearest book is to the query (null when neither head "
        "weighed in).",
    )
    catalog_size: int = Field(description="Books in the index.")
    matched: int = Field(description="Books left by the filters: the softmax runs over these.")
    k: int
    offset: int
    generation: int | None = Field(
        None, description="The index generation (snapshot of the catalog) that answered."
    )
    author: AuthorNamedOut | None = Field(
        None,
        description="The author the query names, recognised against the catalog's own author "
        "index (a whole name, a surname the catalog uses as a name, a word one letter off); "
        "null when it names none.",
    )
    sort: str | None = Field(
        None, description="The `sort` asked for: the results' order; null: by weight."
    )
    sorted_books: int | None = Field(
        None,
        description="With `sort`: the relevant books sorted (weight at least 1% of the top's, "
        "1,000 at most), which the pages run over; null without.",
    )
    facets: dict[str, FacetOut] | None = Field(
        None,
        description="The facets asked for, by name, over the relevant books (weight at least "
        "1% of the top's, 1,000 at most, a work once at its best edition's weight); null "
        "without `facets`, and for a `like` or `lookup` query.",
    )
    lookup: Literal["isbn", "id"] | None = Field(
        None,
        description="How the query names one book, where it does: `isbn` for an ISBN-10 or "
        "ISBN-13 of a book (hyphens, spaces and check digit as readers type them; the book's "
        "id or its metadata's `isbn`, `isbn13`, `isbns` fields), `id` for a book's id (a "
        "query of one token, five characters or more, with a digit). The results are that "
        "book alone, all the weight on it (`score` 1.0), where the filters keep it. null "
        "for any other query.",
    )
    like: LikeOut | None = Field(
        None,
        description='The book a query such as "books like Dune" or "similar to the hobbit" '
        "names, found by its title: the results are its similar books (`GET "
        "/books/{id}/similar`: a book query's heads and scales, the query's filters and page). "
        "null when the query names no title of the catalog so: it is searched as typed.",
    )
    results: list[SearchHit]


class SearchBatchResponse(BaseModel):
    responses: list[SearchResponse] = Field(description="One per query, in the request's order.")


def search_response(result: SearchResult) -> SearchResponse:
    return SearchResponse.model_validate(result, from_attributes=True)


class ModelJSON(Response):
    """A response whose body is a schema already validated, rendered by pydantic-core.

    A route that returns its schema makes FastAPI validate it a second time and serialise it
    through Python dicts and json.dumps, all on the event loop, while every other request
    waits: for a 64-query POST /search, 19 ms and 8 ms, where model_dump_json takes 1.3 ms.
    The route names its schema in `response_model=`, for /docs."""

    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        if not isinstance(content, BaseModel):
            raise TypeError(f"ModelJSON renders a schema, not {type(content).__name__}")
        return content.model_dump_json().encode()
