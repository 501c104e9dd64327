"""Removing books by id: a new generation without them, activated at once (`attend delete`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import Engine
from sqlalchemy.orm import Session

from indexer import batches, boilerplate_rows, generations, store
from indexer.db import ensure_schema
from models.text import normalize_id


@dataclass
class DeleteReport:
    removed: list[str]  # ids removed
    unknown: list[str]  # ids the active generation does not hold
    generation: int | None  # the active generation after the deletion


def delete_books(*, engine: Engine, book_ids: Sequence[str]) -> DeleteReport:
    """Remove books from the index: a new generation without them, activated at once."""
    ensure_schema(engine, create_if_new=False)
    book_ids = [normalize_id(b) for b in book_ids]  # as the catalog's were indexed
    with generations.writer_lock(engine), Session(engine) as session, session.begin():
        active = store.active_generation(session=session)
        if active is None:
            return DeleteReport([], list(book_ids), None)
        building = generations.building_generation(session=session)
        if building is not None:
            raise generations.IndexBusyError(
                f"generation {building.id} was left building by an interrupted `attend index`: "
                "run that again (it resumes) before deleting books",
            )
        present = {b for b in book_ids if store.get_book(session=session, book_id=b) is not None}
        generation, _ = generations.begin(session=session, model=active.model, catalog=None)
        generation.catalog = active.catalog
        batches.remove_books(session=session, generation=generation.id, book_ids=present)
        # the books gone may leave a sentence shared by fewer authors: no longer boilerplate
        boilerplate_rows.settle(session=session, generation=generation.id, previous=active.id)
        generations.finish(session=session, generation=generation)
        return DeleteReport(
            removed=[b for b in book_ids if b in present],
            unknown=[b for b in book_ids if b not in present],
            generation=store.active_generation_id(session=session),
        )
