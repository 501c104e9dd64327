"""The mass-delete bound at its edge (issue 31, item 6: with indexer/snapshot_guard.py refusing
at `removed >= bound` instead of `>`, every snapshot-guard test still passed, none of them
removing exactly the bound). A snapshot may remove max(ATTEND_MAX_DELETE_FRACTION of the active
books, 10) books, one more is refused; on SQLite and PostgreSQL."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from conftest import FakeEncoder, write_jsonl
from indexer import pipeline, snapshot_guard, store
from indexer.settings import IndexSettings

BOOKS: list[dict[str, object]] = [
    {"id": f"b{i}", "title": f"Book {i}", "description": f"words of book {i}"} for i in range(40)
]


def _snapshot(engine: Engine, folder: Path, kept: int, fraction: float) -> pipeline.IndexReport:
    """A snapshot of the first `kept` books, as the only catalog, under `fraction`."""
    url = engine.url.render_as_string(hide_password=False)
    path = write_jsonl(folder / f"first-{kept}.jsonl", BOOKS[:kept])
    settings = IndexSettings(database_url=url, max_delete_fraction=fraction)
    return pipeline.run(settings, engine=engine, encoder=FakeEncoder(), path=path)


def _books(engine: Engine) -> int:
    with Session(engine) as session:
        return store.count_books(session=session)


def test_a_snapshot_may_remove_exactly_the_bound_and_not_one_more(
    engine: Engine, tmp_path: Path
) -> None:
    _snapshot(engine, tmp_path, 40, 0.5)
    assert _books(engine) == 40

    # fraction 0: the floor of 10 removals, 11 refused
    with pytest.raises(snapshot_guard.SnapshotRefusedError, match="would remove 11 of the "):
        _snapshot(engine, tmp_path, 29, 0.0)
    assert _books(engine) == 40
    assert _snapshot(engine, tmp_path, 30, 0.0).removed == 10
    assert _books(engine) == 30

    # fraction 0.5 of 30: 15 removals, 16 refused
    with pytest.raises(snapshot_guard.SnapshotRefusedError, match="would remove 16 of the "):
        _snapshot(engine, tmp_path, 14, 0.5)
    assert _books(engine) == 30
    assert _snapshot(engine, tmp_path, 15, 0.5).removed == 15
    assert _books(engine) == 15
