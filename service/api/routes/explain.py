"""Why a book matched: word-level cross-attention between the query and the book."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from indexer import store
from service.api.book_paths import BOOK
from service.api.book_schemas import ExplainParams, ExplainResponse, explain_response
from service.api.deps import ExplainerDep, SessionDep
from service.api.routes.books import database_answers
from service.engine.exceptions import BookNotFoundError

router = APIRouter(tags=["books"])


@router.get(
    f"{BOOK}/explain",
    responses={
        404: {"description": "No book with this id."},
        503: {
            "description": "The encoder gives no token embeddings, or the database does not "
            "answer or is not the index."
        },
    },
)
def explain_book(
    book_id: str,
    params: Annotated[ExplainParams, Query()],
    session: SessionDep,
    explainer: ExplainerDep,
) -> ExplainResponse:
    """Each query word's attention over the book's title and description words, with offsets."""
    with database_answers():
        book = store.get_book(session=session, book_id=book_id)
    if book is None:
        raise BookNotFoundError(book_id)
    explanation = explainer.explain(
        book_id=book.id, query=params.q, title=book.title, description=book.description
    )
    return explain_response(explanation)
