"""The snapshot guard: a catalog that would empty the index, or remove most of it, is refused
before anything is written (a truncated file, a header-only CSV or a file of the wrong format
does that by mistake). An index of the bundled demo catalog is no one's data: a catalog of
one's own replaces it, as the README's first steps do, without the guard's flag."""

from __future__ import annotations

import hashlib
import json
import logging
from functools import lru_cache
from pathlib import Path

from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from indexer import store
from indexer.catalog import CatalogError, CatalogSnapshot, InvalidRow
from indexer.data import DEMO_CATALOG
from indexer.schema import Book, Generation
from indexer.settings import IndexSettings

logger = logging.getLogger(__name__)

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
        "must match its suffix: .jsonl, .json, .csv, .tsv, .xlsx, .mrc or .xml, or .gz of one), or "
        "remove books with "
        "`attend delete ID …`"
    )


def check_removals(settings: IndexSettings, engine: Engine, catalog: CatalogSnapshot) -> None:
    """Refuse a snapshot that removes more than `max_delete_fraction` of the active books,
    unless they are the demo catalog's."""
    with Session(engine) as session:
        generation = store.active_generation(session=session)
        if generation is None:
            return
        if holds_the_demo(generation):
            logger.info("the index holds the demo catalog: %s replaces it", catalog.name)
            return
        active = generation.id
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


def holds_the_demo(generation: Generation) -> bool:
    """Whether `generation` was indexed from the bundled demo catalog as it is (the digest its
    run recorded), or is a deletion from such a generation (which records no run)."""
    if generation.source is None:
        return generation.catalog == str(DEMO_CATALOG)
    try:
        digest = json.loads(generation.source).get("digest")
    except (ValueError, AttributeError):
        return False
    return isinstance(digest, str) and digest == _demo_digest()


@lru_cache(maxsize=1)
def _demo_digest() -> str:
    """The demo catalog's digest as a run records it (CatalogSnapshot.digest: UTF-8 bytes as
    they are)."""
    return hashlib.blake2b(DEMO_CATALOG.read_bytes(), digest_size=16).hexdigest()
