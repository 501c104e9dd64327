"""Books like a book, and books for a reader's likes and dislikes."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query

from service.api.book_paths import BOOK
from service.api.book_schemas import (
    RecommendRequest,
    RecommendResponse,
    SimilarParams,
    SimilarResponse,
    recommend_response,
    similar_response,
)
from service.api.deps import BookQueryTurn, FrontDep, RecommendBudget

router = APIRouter(tags=["recommendations"])
_NOT_FOUND: dict[int | str, dict[str, Any]] = {
    404: {"description": "An id is not in the index."},
}
_BUSY: dict[int | str, dict[str, Any]] = {
    429: {
        "description": "Busy: ATTEND_BOOK_QUERY_CONCURRENCY requests rank now and "
        "ATTEND_BOOK_QUERY_QUEUE wait; Retry-After says when to try again."
    },
}


@router.get(f"{BOOK}/similar", responses={**_NOT_FOUND, **_BUSY}, dependencies=[BookQueryTurn])
async def similar_books(
    book_id: str, params: Annotated[SimilarParams, Query()], front: FrontDep
) -> SimilarResponse:
    """The books this book's heads attend to most (the book itself left out): its title and
    description keys, BM25 with its title and description as the query, and its author,
    series and subject mates."""
    found = await front.similar(book_id, k=params.k, heads=params.head_weights())
    return similar_response(found)


@router.post(
    "/recommend",
    responses={**_NOT_FOUND, **_BUSY},
    dependencies=[RecommendBudget, BookQueryTurn],
)
async def recommend(body: RecommendRequest, front: FrontDep) -> RecommendResponse:
    """Books ranked by the attention they receive from the liked books' heads; each result says
    how much of its weight came from each liked book, and through which head."""
    found = await front.recommend(
        body.liked,
        body.disliked,
        k=body.k,
        heads=body.head_weights(),
        own_authors=body.own_authors,
    )
    return recommend_response(found)
