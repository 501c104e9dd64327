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
from service.api.deps import IndexDep, SettingsDep
from service.engine import book_ranking
from service.engine.head_weights import BookHeads, parse_heads
from service.settings import ServiceSettings

router = APIRouter(tags=["recommendations"])
_NOT_FOUND: dict[int | str, dict[str, Any]] = {
    404: {"description": "An id is not in the index."},
}


def _heads(settings: ServiceSettings, heads: str | None) -> BookHeads:
    """The request's head weights (default: ATTEND_SIMILAR_HEADS) with the service's scales."""
    default = settings.similar
    return BookHeads(parse_heads(heads), default.scales) if heads else default


@router.get(f"{BOOK}/similar", responses=_NOT_FOUND)
def similar_books(
    book_id: str,
    params: Annotated[SimilarParams, Query()],
    index: IndexDep,
    settings: SettingsDep,
) -> SimilarResponse:
    """The books this book's heads attend to most (the book itself left out): its title and
    description keys, and BM25 with its title and authors, mixed as a search's heads are."""
    heads = _heads(settings, params.heads)
    return similar_response(book_ranking.similar(index, book_id, k=params.k, heads=heads))


@router.post("/recommend", responses=_NOT_FOUND)
def recommend(body: RecommendRequest, index: IndexDep, settings: SettingsDep) -> RecommendResponse:
    """Books ranked by the attention they receive from the liked books' heads; each result says
    how much of its weight came from each liked book, and through which head."""
    heads = _heads(settings, body.heads)
    found = book_ranking.recommend(index, body.liked, body.disliked, k=body.k, heads=heads)
    return recommend_response(found)
