"""The API's request and response bodies. Field descriptions show in /docs."""

from __future__ import annotations

import re
from typing import Annotated, Any, Self

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

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


class SearchHit(BaseModel):
    rank: int = Field(description="1-based position in the whole ranking (offset included).")
    id: str
    title: str
    authors: list[str]
    year: int | None
    language: str | None
    score: float = Field(
        description="Raw dot product q·k of the query and the book's key "
        "(cosine similarity: both have unit length)."
    )
    weight: float = Field(
        description="The book's attention weight softmax(scale·q·Kᵀ) over all `matched` books. "
        "Weights of all matched books sum to 1; "
        "weight_i / weight_j = exp(scale·(score_i − score_j))."
    )


class SearchResponse(BaseModel):
    query: str
    model: str = Field(description="Encoder that embedded the query and the keys.")
    scale: float = Field(description="Softmax scale (inverse temperature) applied to the scores.")
    catalog_size: int = Field(description="Books in the index.")
    matched: int = Field(description="Books left by the filters: the softmax runs over these.")
    k: int
    offset: int
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


class Ready(BaseModel):
    status: str = Field(description="`ready`.")
    catalog_size: int = Field(description="Books whose keys are loaded.")
