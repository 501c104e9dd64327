"""The API's request and response bodies. Field descriptions show in /docs."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Annotated, Any, Self

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from service.heads import HEADS, MAX_HEADS_CHARS, parse_heads

MAX_QUERY_CHARS = 512
MAX_K = 100
MAX_OFFSET = 1000
MAX_BATCH_QUERIES = 64
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def _clean_query(text: str) -> str:
    text = text.strip()
    if not text:
        raise ValueError("the query is empty")
    if _CONTROL.search(text):
        raise ValueError("the query contains control characters")
    return text


Query = Annotated[
    str,
    Field(
        max_length=MAX_QUERY_CHARS, description=f"Search text, 1 to {MAX_QUERY_CHARS} characters."
    ),
    AfterValidator(_clean_query),
]


def _parsed_heads(value: str) -> str:
    parse_heads(value)  # ValueError: a 422 naming the problem
    return value


# `name:weight,…`, checked by parse_heads (a request's `heads`)
HeadWeights = Annotated[
    str, Field(min_length=1, max_length=MAX_HEADS_CHARS), AfterValidator(_parsed_heads)
]


class SearchOptions(BaseModel):
    """Paging and filters. Filters are the attention mask: the softmax runs over matching books."""

    model_config = ConfigDict(extra="forbid")

    k: int = Field(10, ge=1, le=MAX_K, description="Results per page.")
    offset: int = Field(0, ge=0, le=MAX_OFFSET, description="Results to skip (paging).")
    author: str | None = Field(
        None,
        min_length=1,
        max_length=200,
        description="Keep books with an author whose name contains this.",
    )
    year_min: int | None = Field(
        None, ge=-5000, le=5000, description="Keep books from this year on."
    )
    year_max: int | None = Field(None, ge=-5000, le=5000, description="Keep books up to this year.")
    language: str | None = Field(
        None,
        min_length=1,
        max_length=64,
        description="Keep books in this language code (as in the catalog).",
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


class SearchParams(SearchOptions):
    """`GET /search` query parameters."""

    q: Query


class SearchRequest(SearchOptions):
    """`POST /search`: several queries answered in one batch."""

    queries: list[Query] = Field(min_length=1, max_length=MAX_BATCH_QUERIES)


class HeadShare(BaseModel):
    score: float = Field(
        description="The head's raw score: q·k with the field's key (title, description), or "
        "the BM25 score (lexical)."
    )
    probability: float = Field(description="p_h: the book's weight in this head's softmax alone.")
    share: float = Field(description="π_h · p_h: this head's part of the book's weight.")


class HeadInfo(BaseModel):
    weight: float = Field(description="π_h, the head's mixture weight (the heads' sum to 1).")
    scale: float = Field(description="The head's softmax scale: logits = scale · score.")
    abstained: bool = Field(
        False,
        description="True for a lexical head asked for whose query has no term in the catalog "
        "(among the books the filters keep): its weight is 0 and the others are renormalised.",
    )


def head_info(
    weights: Mapping[str, float], abstained: Iterable[str], scales: Mapping[str, float]
) -> dict[str, HeadInfo]:
    """The `heads` of a response: the heads that weighed in, then those that abstained."""
    info = {h: HeadInfo(weight=w, scale=scales[h]) for h, w in weights.items()}
    info.update({h: HeadInfo(weight=0.0, scale=scales[h], abstained=True) for h in abstained})
    return info


class SearchHit(BaseModel):
    rank: int = Field(description="1-based position in the whole ranking (offset included).")
    id: str
    title: str
    authors: list[str]
    year: int | None
    language: str | None
    score: float = Field(
        description="Raw dot product q·k of the query and the book's description key "
        "(cosine similarity: both have unit length)."
    )
    weight: float = Field(
        description="The book's attention weight: Σ_h π_h · p_h, the mixture of the heads' "
        "softmax distributions over all `matched` books. Weights of all matched books sum to 1."
    )
    heads: dict[str, HeadShare] = Field(
        description="Per head with a weight: its score, the book's weight in that head alone, "
        "and its share of `weight` (the shares sum to `weight`)."
    )


class SearchResponse(BaseModel):
    query: str
    model: str = Field(description="Encoder that embedded the query and the keys.")
    scale: float = Field(
        description="Softmax scale (inverse temperature) of the description head, whose q·k is "
        "each result's `score`."
    )
    heads: dict[str, HeadInfo] = Field(
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
        "under matched^-0.45: nothing stands out), or no word of the query occurs in any book."
    )
    catalog_size: int = Field(description="Books in the index.")
    matched: int = Field(description="Books left by the filters: the softmax runs over these.")
    k: int
    offset: int
    generation: int | None = Field(
        None, description="The index generation (snapshot of the catalog) that answered."
    )
    results: list[SearchHit]


class SearchBatchResponse(BaseModel):
    responses: list[SearchResponse] = Field(description="One per query, in the request's order.")


class BookOut(BaseModel):
    id: str
    title: str
    description: str | None
    authors: list[str]
    year: int | None
    language: str | None
    metadata: dict[str, Any] = Field(description="The catalog's other fields, as given.")


class Health(BaseModel):
    status: str
    catalog_size: int
    model: str
    device: str
    generation: int | None = Field(None, description="The index generation being served.")


class Ready(BaseModel):
    status: str = Field(description="`ready`.")
    catalog_size: int = Field(description="Books whose keys are loaded.")


class ReindexRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    catalog: str = Field(
        min_length=1,
        description="Path of a .jsonl or .csv catalog on the server (or upload one as the "
        "multipart/form-data file field `catalog`).",
    )
    keep_missing: bool = Field(
        False, description="Keep books the catalog lacks (default: the catalog is a snapshot)."
    )
    skip_invalid: bool = Field(
        False, description="Index the valid rows of a catalog with bad ones (default: refuse)."
    )


class JobProgress(BaseModel):
    total: int = Field(description="Valid books in the catalog.")
    done: int = Field(description="Books processed so far.")
    embedded: int = Field(description="Texts embedded so far.")
    books_per_second: float
    eta_s: float | None
    generation: int | None = Field(description="The generation being built.")


class JobReport(BaseModel):
    added: int
    updated: int
    unchanged: int
    removed: int
    rejected: int
    embedded: int
    generation: int | None = Field(description="The active generation after the job.")
    seconds: float


class JobOut(BaseModel):
    id: str
    state: str = Field(description="queued, running, succeeded or failed.")
    catalog: str
    created_at: datetime
    finished_at: datetime | None
    progress: JobProgress
    report: JobReport | None = Field(description="The summary, once the job succeeded.")
    error: str | None
