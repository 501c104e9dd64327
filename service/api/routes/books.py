"""Books by id."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from service.api.book_paths import BOOK
from service.api.book_schemas import BookOut, book_out
from service.api.deps import FrontDep

router = APIRouter(tags=["books"])
DATABASE_DOWN: dict[int | str, dict[str, Any]] = {
    503: {"description": "The database does not answer or is not the index."}
}


@router.get(
    BOOK,
    responses={404: {"description": "No book with this id."}, **DATABASE_DOWN},
)
async def get_book(book_id: str, front: FrontDep) -> BookOut:
    """One book as indexed (at the generation the searches answer from, so a search hit always
    resolves), with its description and the catalog's other fields."""
    return book_out(await front.book(book_id))
