"""Books by id."""

from __future__ import annotations

from fastapi import APIRouter

from indexer import store
from service.deps import RankerDep, SessionDep
from service.errors import BookNotFoundError
from service.schemas import BookOut

router = APIRouter(tags=["books"])


@router.get("/books/{book_id:path}", responses={404: {"description": "No book with this id."}})
def get_book(book_id: str, session: SessionDep, ranker: RankerDep) -> BookOut:
    """One book as indexed, with its description and the catalog's other fields."""
    # as of the generation the searches answer from, so a search hit always resolves
    book = store.get_book(session=session, book_id=book_id, generation=ranker.generation)
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
