"""Why a book matched: word-level cross-attention between the query and the book."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from service.api.book_paths import BOOK
from service.api.book_schemas import ExplainParams, ExplainResponse, explain_response
from service.api.deps import BookQueryTurn, FrontDep

router = APIRouter(tags=["books"])


@router.get(
    f"{BOOK}/explain",
    # the book-query turns, as similar books and recommend: an explanation runs on the
    # searcher's worker too, and unbounded ones held every search behind them (issue 50)
    dependencies=[BookQueryTurn],
    responses={
        404: {"description": "No book with this id."},
        429: {"description": "Too many book queries at once: retry after `Retry-After` s."},
        503: {
            "description": "The encoder gives no token embeddings, or the database does not "
            "answer or is not the index."
        },
    },
)
async def explain_book(
    book_id: str, params: Annotated[ExplainParams, Query()], front: FrontDep
) -> ExplainResponse:
    """Each query word's attention over the book's title and description words, with offsets."""
    return explain_response(await front.explain(book_id, params.q))
