"""The snapshot guard: a catalog that would empty the index, or remove most of it, is refused
before anything is written (a truncated file, a header-only CSV or a file of the wrong format
does that by mistake)."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from indexer import store
from indexer.catalog import CatalogError, CatalogSnapshot, InvalidRow
from indexer.schema import Book
from indexer.settings import IndexSettings

FEW_REMOVALS = 10  # a snapshot may always remove this many books: a mistake that small is cheap


class SnapshotRefusedError(CatalogError):
    """A catalog that, as a snapshot, would empty the index or remove most of it: a truncated
    file, a header-only CSV or a file of the wrong format does that by mistake, so the run
    refuses before writing anything (rsync's --max-delete, in the same spirit)."""

    def __init__(self, message: str):
        super().__init__([], message)


def empty_message(path: str | Path, rejected: list[InvalidRow]) -> str:
    why = (
        f"all {len(rejected)} of its rows were rejected (the first: {rejected[0]})"
        if rejected
        else "it is empty, or a CSV with a header only"
    )
    return (
        f"{path} holds no valid book: {why}. As a snapshot it would remove every book of the "
        "index, so nothing was written; check that it is the catalog you meant (its format "
        "must match its suffix: .jsonl, .json, .csv or .tsv, or .gz of one), or remove books with "
        "`attend delete ID …`"
    )


def check_removals(settings: IndexSettings, engine: Engine, catalog: CatalogSnapshot) -> None:
    """Refuse a snapshot that removes more than `max_delete_fraction` of the active books."""
    with Session(engine) as session:
        active = store.active_generation_id(session=session)
        if active is None:
            return
        indexed = set(session.scalars(select(Book.id).where(store.visible_at(active))))
    if not indexed:
        return
    kept = len(indexed & catalog.check().ids)  # the ids of the check's read: no second read
    removed = len(indexed) - kept
    if removed > max(settings.max_delete_fraction * len(indexed), FEW_REMOVALS):
        raise SnapshotRefusedError(
            f"{catalog.name} would remove {removed} of the index's {len(indexed)} books "
            f"(it holds {kept} of them), more than ATTEND_MAX_DELETE_FRACTION="
            f"{settings.max_delete_fraction:g} allows; nothing was written. If that is what "
            "you mean, run it again with --allow-mass-delete (admin API: "
            '"allow_mass_delete": true), or with --keep-missing to keep them'
        )
