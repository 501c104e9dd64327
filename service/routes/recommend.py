"""Books like a book, and books for a reader's likes and dislikes."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query

from service import recommender
from service.deps import RankerDep, SettingsDep
from service.schemas_books import (
    RecommendRequest,
    RecommendResponse,
    SimilarParams,
    SimilarResponse,
)

router = APIRouter(tags=["recommendations"])
_NOT_FOUND: dict[int | str, dict[str, Any]] = {
    404: {"description": "An id is not in the index."},
    501: {"description": "The sharded engine keeps the keys in its shards."},
}


@router.get("/books/{book_id:path}/similar", responses=_NOT_FOUND)
def similar_books(
    book_id: str,
    params: Annotated[SimilarParams, Query()],
    ranker: RankerDep,
    settings: SettingsDep,
) -> SimilarResponse:
    """The books whose keys attend most to this book's key (the book itself left out)."""
    return recommender.similar(ranker, book_id, k=params.k, scale=settings.scale)


@router.post("/recommend", responses=_NOT_FOUND)
def recommend(
    body: RecommendRequest, ranker: RankerDep, settings: SettingsDep
) -> RecommendResponse:
    """Books ranked by the attention they receive from the liked books; each result says how
    much of its weight came from each liked book."""
    return recommender.recommend(ranker, body.liked, body.disliked, k=body.k, scale=settings.scale)
