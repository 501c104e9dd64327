"""Bodies of the per-book endpoints: a book, its explanation, similar books, recommendations;
and the functions that turn the engine's answers into them."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from models.text import normalize_id
from service.api.search_schemas import (
    EDITIONS_TEXT,
    MAX_K,
    BookFieldsOut,
    Edition,
    HeadShare,
    HeadsInfo,
    HeadWeights,
    Query,
    shown_title,
)
from service.config.head_weights import HEADS, parse_heads
from service.engine.book_ranking import OWN_AUTHORS
from service.engine.explainer import BookExplanation
from service.engine.results import BookRecord, Recommendations, SimilarBooks

MAX_LIKED = 100
BookId = Annotated[str, Field(min_length=1, max_length=256), AfterValidator(normalize_id)]


class BookOut(BaseModel):
    id: str
    title: str
    description: str | None
    authors: list[str]
    year: int | None
    language: str | None
    metadata: dict[str, Any] = Field(description="The catalog's other fields, as given.")


def book_out(record: BookRecord) -> BookOut:
    b = record.book
    return BookOut(
        id=b.id,
        title=b.title,
        description=record.description,
        authors=b.authors,
        year=b.year,
        language=b.language,
        metadata=record.metadata,
    )


class ExplainParams(BaseModel):
    """`GET /books/{id}/explain` query parameters."""

    model_config = ConfigDict(extra="forbid")

    q: Query


class QueryWord(BaseModel):
    text: str
    start: int = Field(description="Character offset of the word in the query.")
    end: int


class BookWord(BaseModel):
    field: Literal["title", "description"]
    text: str
    start: int = Field(description="Character offset of the word in `field`'s text.")
    end: int


class Attended(BaseModel):
    word: int = Field(description="Index into `book_words`.")
    weight: float = Field(description="Share of the query word's attention on this book word.")


class QueryWordAttention(BaseModel):
    query_word: int = Field(description="Index into `query_words`.")
    top: list[Attended] = Field(description="The book words it attends to most, best first.")


class Highlight(BaseModel):
    field: Literal["title", "description"]
    start: int = Field(description="Character offset into `field`'s text.")
    end: int
    text: str
    weight: float = Field(description="The largest attention a query word gives this word.")
    query_words: list[int] = Field(description="Indices of the query words that attend to it.")


class ExplainResponse(BaseModel):
    id: str
    query: str
    title: str
    description: str | None
    explained_chars: int | None = Field(
        description="How much of the description is explained: its first `explained_chars` "
        "characters (all of it unless it is longer than 10,000; the search embedding itself "
        "reads only the first 256 word pieces). Words past this offset are not in "
        "`book_words`. null without a description."
    )
    scale: float = Field(description="Softmax scale of the token cross-attention.")
    query_words: list[QueryWord] = Field(description="The query's content words (rows).")
    book_words: list[BookWord] = Field(
        description="The title's, then the description's, content words (columns)."
    )
    weights: list[list[float]] = Field(
        description="Word × word cross-attention: row i is query word i's attention over "
        "`book_words` (each row sums to 1)."
    )
    attends: list[QueryWordAttention]
    highlights: list[Highlight] = Field(
        description="Book words to mark: each is among a query word's top words with at least "
        "0.1 of its attention. Offsets index the title or the description."
    )


_HEADS_TEXT = (
    f"Head weights, e.g. `title:0.2,description:0.2,lexical:0.6` (heads: {', '.join(HEADS)}; "
    "the book's title key, its description key, BM25 with its title and description as the "
    "query, the other books by its authors and the other books of its series, both by "
    "description key; "
    "weights ≥ 0, not all 0, normalised to sum 1; a head without evidence for the book "
    "abstains). Default: the service's ATTEND_SIMILAR_HEADS."
)


class _WithHeads(BaseModel):
    model_config = ConfigDict(extra="forbid")

    heads: HeadWeights | None = Field(None, description=_HEADS_TEXT)

    def head_weights(self) -> dict[str, float] | None:
        """The asked heads' weights π, or None for the service's default."""
        return parse_heads(self.heads) if self.heads else None


class SimilarParams(_WithHeads):
    k: int = Field(10, ge=1, le=MAX_K, description="How many books.")


class RecommendRequest(_WithHeads):
    """`POST /recommend`."""

    liked: list[BookId] = Field(
        min_length=1, max_length=MAX_LIKED, description="Ids of liked books: each one a query."
    )
    disliked: list[BookId] = Field(
        default_factory=list,
        max_length=MAX_LIKED,
        description="Ids of disliked books: candidates like them are pushed down.",
    )
    k: int = Field(10, ge=1, le=MAX_K, description="How many recommendations.")
    own_authors: int = Field(
        OWN_AUTHORS,
        ge=0,
        le=MAX_K,
        description="At most this many results by a liked book's principal author (the reader "
        "knows them already); the others are held back (`held_back`). k: no limit.",
    )


class BookHit(BookFieldsOut):
    rank: int = Field(
        description="Place in the list. The list is ordered by the heads' ranks fused "
        "(ATTEND_SIMILAR_FUSION=rank, the default: Σ_h π_h / (60 + rank_h) over each head's top "
        "1,000), one slot per work, then for variety where ATTEND_SIMILAR_DIVERSITY asks; "
        "`relevance_rank` is the place by weight alone."
    )
    weight: float = Field(
        description="Attention weight: Σ_h π_h p_h, each p_h the head's exact softmax over "
        "the whole catalog (less the asked books), so the weights of every candidate sum to 1 "
        "and a near-duplicate weighs far above a weak match."
    )
    relevance_rank: int = Field(
        description="Where `weight` alone places this result among the results (1: the "
        "heaviest; equal weights share a place)."
    )
    editions: list[Edition] = Field(default_factory=list, description=EDITIONS_TEXT)


class SimilarHit(BookHit):
    score: float = Field(description="Cosine of this book's description key with the given book's.")
    heads: dict[str, HeadShare] = Field(
        description="Per head with a weight: its score, the book's probability in that head's "
        "softmax alone, and its share of `weight` (the shares sum to `weight`)."
    )


# How strongly the best candidate matches: what a search's response says of its query.
Entropy = Annotated[
    float | None,
    Field(
        description="Entropy (nats) of the weights over all `matched` books: 0 when one book "
        "takes all the weight, ln(matched) when it is uniform; null when no head answered."
    ),
]
MatchStrength = Annotated[
    float,
    Field(
        description="log(top weight · matched) / log(matched) of the heaviest candidate: 0 when "
        "it weighs no more than under a uniform distribution (1/matched), 1 when it has all "
        "the weight."
    ),
]
NoStrongMatch = Annotated[
    bool,
    Field(description="match_strength < 0.55: nothing in the catalog stands out as like it."),
]


# a title in a response of ranked books: its first MAX_SHOWN_TITLE_CHARS characters at most
ShownTitle = Annotated[str, AfterValidator(shown_title)]


class SimilarResponse(BaseModel):
    id: str
    title: ShownTitle
    scale: float = Field(description="Softmax scale of the description head.")
    heads: HeadsInfo = Field(
        description="The heads mixed, with their weights π and scales (a lexical head whose "
        "query has no term in another book abstains)."
    )
    entropy: Entropy
    match_strength: MatchStrength
    no_strong_match: NoStrongMatch
    matched: int = Field(
        description="Candidates: the catalog less the book itself (and its other editions)."
    )
    results: list[SimilarHit]


class BecauseOut(BaseModel):
    id: str = Field(description="A liked book (its title is in the response's `liked`).")
    share: float = Field(
        description="Fraction of the result's weight that came from this liked book's "
        "attention; a result's shares sum to 1."
    )
    heads: dict[str, float] = Field(
        description="`share` split by head: the fraction of the result's weight that came "
        "from this liked book through each head (they sum to `share`)."
    )


class RecommendHit(BookHit):
    because: list[BecauseOut] = Field(description="Per liked book, largest share first.")


class NamedBookOut(BaseModel):
    id: str
    title: ShownTitle


class RecommendResponse(BaseModel):
    liked: list[NamedBookOut] = Field(
        description="The liked books, in the request's order (repeats once), with their "
        "titles: each result's `because` names them by id."
    )
    disliked: list[NamedBookOut]
    scale: float = Field(description="Softmax scale of the description head.")
    heads: HeadsInfo = Field(
        description="The heads mixed for every liked book, with their weights π (each liked "
        "book's heads weigh π_h / |liked|) and scales."
    )
    entropy: Entropy
    match_strength: MatchStrength
    no_strong_match: NoStrongMatch
    matched: int = Field(
        description="Candidates: the catalog less the liked and disliked books (and their other "
        "editions)."
    )
    results: list[RecommendHit]
    own_authors: int = Field(description="The request's limit on the liked authors' books.")
    held_back: int = Field(
        description="Books by the liked authors that ranked among the results and were left "
        "out for others (ask a larger `own_authors` to see them)."
    )


def explain_response(e: BookExplanation) -> ExplainResponse:
    book_words = [
        BookWord(field=w.field, text=w.text, start=w.start, end=w.end) for w in e.words.book_words
    ]
    return ExplainResponse(
        id=e.id,
        query=e.query,
        title=e.title,
        description=e.description,
        explained_chars=e.explained_chars,
        scale=e.scale,
        query_words=[QueryWord(text=w.text, start=w.start, end=w.end) for w in e.words.query_words],
        book_words=book_words,
        weights=[[round(v, 5) for v in row] for row in e.words.weights.tolist()],
        attends=[
            QueryWordAttention(query_word=i, top=[Attended(word=c, weight=v) for c, v in top])
            for i, top in enumerate(e.attends)
        ],
        highlights=[
            Highlight(
                field=book_words[c].field,
                start=book_words[c].start,
                end=book_words[c].end,
                text=book_words[c].text,
                weight=w,
                query_words=qs,
            )
            for c, w, qs in e.words.highlights
        ],
    )


def similar_response(similar: SimilarBooks) -> SimilarResponse:
    return SimilarResponse.model_validate(similar, from_attributes=True)


def recommend_response(found: Recommendations) -> RecommendResponse:
    return RecommendResponse.model_validate(found, from_attributes=True)
