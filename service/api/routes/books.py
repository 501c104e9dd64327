"""Books by id."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from fastapi import APIRouter
from sqlalchemy.exc import SQLAlchemyError

from indexer import db, store
from service.api.book_paths import BOOK
from service.api.book_schemas import BookOut
from service.api.deps import IndexDep, SessionDep
from service.engine.exceptions import BookNotFoundError, NotReadyError

router = APIRouter(tags=["books"])
DATABASE_DOWN: dict[int | str, dict[str, Any]] = {
    503: {"description": "The database does not answer or is not the index."}
}


@contextmanager
def database_answers() -> Iterator[None]:
    """A database that fails under a request (down, deleted, truncated, overwritten) is a 503
    that says so, not a 500: /readyz says the same and the orchestrator routes around it."""
    try:
        yield
    except (SQLAlchemyError, db.DatabaseGoneError) as e:
        raise NotReadyError(
            f"the database cannot be read ({type(e).__name__}); /readyz says more"
        ) from e


@router.get(
    BOOK,
    responses={404: {"description": "No book with this id."}, **DATABASE_DOWN},
)
def get_book(book_id: str, session: SessionDep, index: IndexDep) -> BookOut:
    """One book as indexed, with its description and the catalog's other fields."""
    # as of the generation the searches answer from, so a search hit always resolves
    with database_answers():
        book = store.get_book(session=session, book_id=book_id, generation=index.generation)
    if book is None:
        raise BookNotFoundError(book_id)
    return BookOut(
        id=book.id,
        title=book.title,
        description=book.description,
        authors=book.authors,
        year=book.year,
        language=book.language,
        metadata=book.extra,
    )
