"""The mass-delete bound at its edge (issue 31, item 6: with indexer/snapshot_guard.py refusing
at `removed >= bound` instead of `>`, every snapshot-guard test still passed, none of them
removing exactly the bound). A snapshot may remove max(ATTEND_MAX_DELETE_FRACTION of the active
books, 10) books, one more is refused; on SQLite and PostgreSQL."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from conftest import FakeEncoder, index_demo_catalog, write_jsonl
from indexer import pipeline, snapshot_guard, store
from indexer.data import DEMO_CATALOG
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


def test_a_catalog_of_ones_own_replaces_the_demo_but_not_an_edited_one(
    engine: Engine, tmp_path: Path
) -> None:
    """The README's first hour: `make demo`, then `attend index books.jsonl` of three books
    replaces the demo's 180 (the guard's 0.5 would refuse it); once the index holds anything
    else, even the demo catalog with one line changed, the guard holds again."""
    url = engine.url.render_as_string(hide_password=False)
    index_demo_catalog(url)
    assert _books(engine) == 180
    report = _snapshot(engine, tmp_path, 3, 0.5)
    assert (report.added, report.removed, _books(engine)) == (3, 180, 3)
    edited = tmp_path / "demo_books.jsonl"
    lines = DEMO_CATALOG.read_text(encoding="utf-8").splitlines(keepends=True)
    edited.write_text("".join(lines[1:]), encoding="utf-8")  # one book fewer
    settings = IndexSettings(database_url=url, max_delete_fraction=1.0)
    pipeline.run(settings, engine=engine, encoder=FakeEncoder(), path=edited)
    with pytest.raises(snapshot_guard.SnapshotRefusedError, match="would remove 179 of"):
        _snapshot(engine, tmp_path, 3, 0.5)
