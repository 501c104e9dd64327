"""The store on real SQLite and PostgreSQL: vectors round-trip bit for bit, generations are
snapshots (a re-index writes only what changed), diffs between generations fold into a loaded
index exactly."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session

from indexer import batches, generations, loaded_index, store, vector_format
from indexer.catalog import CatalogRecord
from indexer.schema import Book, Generation, Vector


def _records(n: int) -> list[CatalogRecord]:
    return [
        CatalogRecord(
            id=f"b{i:03d}",
            title=f"Book {i}",
            description=f"About {i}",
            authors=[f"Author {i}", "Co Author"],
            year=1990 + i,
            language="eng",
            extra={"publisher": "P", "rating": 4.5, "tags": ["x"]},
        )
        for i in range(n)
    ]


def _generation(
    engine: Engine,
    records: list[CatalogRecord],
    vectors: dict[str, np.ndarray],
    *,
    model: str = "m",
    remove_missing: bool = True,
) -> batches.BatchPlan:
    """One generation of `records`, the vector of each text taken from `vectors`."""
    with Session(engine) as session, session.begin():
        g, _ = generations.begin(session=session, model=model, catalog="c")
        plan = batches.plan_batch(session=session, records=records, model=model, generation=g.id)
        texts = {h: vectors[t] for h, t in plan.to_embed.items()}
        batches.write_batch(session=session, plan=plan, vectors=texts)
        if remove_missing:
            batches.remove_books(session=session, generation=g.id, keep={r.id for r in records})
        generations.finish(session=session, generation=g)
    return plan


def _random_vectors(records: list[CatalogRecord], d: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    texts = {t for r in records for t in batches.field_texts(r).values()}
    return {t: rng.standard_normal(d).astype(np.float32) for t in sorted(texts)}


def test_vectors_round_trip_exactly(engine: Engine) -> None:
    records = _records(7)
    vectors = _random_vectors(records, 384)
    vectors["Book 0"][0] = np.float32(1e-38)  # extreme values survive too
    vectors["About 1"][1] = np.float32(-3.4e38)
    _generation(engine, records[::-1], vectors)

    with Session(engine) as session:
        index = loaded_index.load_index(session=session, model="m")
        assert index.ids == [r.id for r in records]  # id order, whatever the write order
        assert index.generation == store.active_generation_id(session=session) == 1
        for f in ("title", "description"):
            expected = np.stack([vectors[batches.field_texts(r)[f]] for r in records])
            assert np.array_equal(index.keys[f], expected)
            # column-major: the layout the ranker streams, so it takes the array without a copy
            assert index.keys[f].dtype == np.float32 and index.keys[f].flags.f_contiguous
        assert index.values is index.keys["description"]  # V = K, one array
        assert index.books.titles[3] == "Book 3"
        assert index.books.authors[3] == ["Author 3", "Co Author"]
        assert index.books.years[3] == 1993 and index.books.languages[3] == "eng"
        vector = session.scalars(select(Vector)).first()
        assert vector is not None and (vector.model, vector.dim, vector.dtype) == (
            "m",
            384,
            "float32",
        )
        book = store.get_book(session=session, book_id="b002")
        assert book is not None and book.extra == {"publisher": "P", "rating": 4.5, "tags": ["x"]}
        assert store.count_books(session=session) == 7


def test_a_reindex_writes_only_what_changed_and_keeps_the_old_generation(engine: Engine) -> None:
    records = _records(4)
    vectors = _random_vectors(records, 8)
    first = _generation(engine, records, vectors)
    assert (first.added, first.unchanged, len(first.to_embed)) == (4, 0, 8)

    changed = list(records)
    changed[1] = replace(records[1], title="Renamed")  # a new title key
    changed[2] = replace(records[2], year=None)  # metadata only: no new vector
    del changed[3]  # removed
    vectors["Renamed"] = np.full(8, 7, np.float32)
    second = _generation(engine, changed, vectors)
    assert (second.added, second.updated, second.unchanged) == (0, 2, 1)
    assert second.to_embed == {vector_format.content_hash("m", "Renamed"): "Renamed"}

    with Session(engine) as session:
        assert session.scalar(select(func.count()).select_from(Book)) == 4 + 2
        states = {g: st for g, st in session.execute(select(Generation.id, Generation.state))}
        assert states == {1: "retired", 2: "active"}
        g2 = session.get_one(Generation, 2)
        assert (g2.books, g2.added, g2.updated, g2.removed) == (3, 0, 2, 1)
        now = loaded_index.load_index(session=session, model="m")
        assert now.ids == ["b000", "b001", "b002"] and now.generation == 2
        assert now.books.titles[1] == "Renamed" and now.books.years[2] is None
        assert np.array_equal(now.keys["title"][1], vectors["Renamed"])
        before = loaded_index.load_index(session=session, model="m", generation=1)  # still there
        assert before.ids == [r.id for r in records] and before.books.titles[1] == "Book 1"
        assert store.get_book(session=session, book_id="b003") is None
        old = store.get_book(session=session, book_id="b003", generation=1)
        assert old is not None and old.title == "Book 3"

        diff = loaded_index.load_diff(session=session, model="m", since=1, until=2)
        assert sorted(diff.removed) == ["b001", "b002", "b003"]
        assert diff.added.ids == ["b001", "b002"]
        merged = loaded_index.apply_diff(before, diff)
        assert merged.ids == now.ids and merged.books.titles == now.books.titles
        assert merged.books.years == now.books.years and merged.generation == 2
        for f in now.keys:
            assert np.array_equal(merged.keys[f], now.keys[f])
        assert merged.values is merged.keys["description"]


def test_a_generation_that_changes_nothing_is_discarded(engine: Engine) -> None:
    records = _records(3)
    vectors = _random_vectors(records, 4)
    _generation(engine, records, vectors)
    again = _generation(engine, records, vectors)
    assert (again.unchanged, again.changes, again.to_embed) == (3, [], {})
    with Session(engine) as session:
        assert session.scalars(select(Generation.id)).all() == [1]
        assert store.active_generation_id(session=session) == 1


def test_abandon_restores_the_rows_a_building_generation_closed(engine: Engine) -> None:
    records = _records(3)
    vectors = _random_vectors(records, 4)
    _generation(engine, records, vectors)
    with Session(engine) as session, session.begin():
        g, resumed = generations.begin(session=session, model="m", catalog="c", source="s")
        assert not resumed and g.id == 2
        plan = batches.plan_batch(
            session=session, records=[replace(records[0], year=1)], model="m", generation=g.id
        )
        batches.write_batch(session=session, plan=plan, vectors={})
        batches.remove_books(session=session, generation=g.id, book_ids=["b002"])
    with Session(engine) as session, session.begin():
        building, resumed = generations.begin(session=session, model="m", catalog="c", source="s")
        assert resumed and building.id == 2  # same model and source: the crashed build resumes
        assert store.count_books(session=session, generation=2) == 2
        assert loaded_index.load_index(session=session, model="m").generation == 1  # not active yet
        generations.abandon(session=session, generation=building, error="test")
    with Session(engine) as session:
        assert session.scalar(select(func.count()).select_from(Book)) == 3
        assert session.scalar(select(func.count()).where(Book.valid_to.is_not(None))) == 0
        assert session.get_one(Generation, 2).state == "failed"


@pytest.mark.parametrize("source", ["another catalog", None])
def test_a_building_generation_resumes_only_for_its_own_source(
    engine: Engine, source: str | None
) -> None:
    """A run of another catalog (or flags), or one that says nothing of its source, does not
    resume a generation a killed run left building: its rows go, and a new generation begins
    from the active one's rows alone."""
    records = _records(3)
    _generation(engine, records, _random_vectors(records, 4))
    with Session(engine) as session, session.begin():
        g, _ = generations.begin(session=session, model="m", catalog="x", source="catalog x")
        extra = replace(records[0], id="only-in-x")
        plan = batches.plan_batch(session=session, records=[extra], model="m", generation=g.id)
        batches.write_batch(session=session, plan=plan, vectors={})
    with Session(engine) as session, session.begin():
        again, resumed = generations.begin(session=session, model="m", catalog="y", source=source)
        assert not resumed and again.id == 3 and again.source == source
        assert session.get_one(Generation, 2).state == "failed"
        assert not session.scalars(select(Book).where(Book.id == "only-in-x")).all()
    with Session(engine) as session, session.begin():
        same, resumed = generations.begin(session=session, model="m", catalog="y", source=source)
        assert resumed == (source is not None) and same.id == (3 if source else 4)


def test_load_index_only_takes_the_asked_model(engine: Engine) -> None:
    records = _records(2)
    _generation(engine, records, _random_vectors(records, 4), model="a")
    with Session(engine) as session:
        assert len(loaded_index.load_index(session=session, model="a")) == 2
        empty = loaded_index.load_index(session=session, model="b")
        assert len(empty) == 0 and empty.keys["description"].shape[0] == 0


def test_an_empty_database_loads_an_empty_index(engine: Engine) -> None:
    with Session(engine) as session:
        index = loaded_index.load_index(session=session, model="m")
        assert len(index) == 0 and index.generation is None
        assert store.get_book(session=session, book_id="x") is None


def test_one_writer_at_a_time(engine: Engine) -> None:
    with (
        generations.writer_lock(engine),
        pytest.raises(generations.IndexBusyError, match="another indexer"),
        generations.writer_lock(engine),
    ):
        pass
    with generations.writer_lock(engine):  # released
        pass


def test_metadata_round_trip(engine: Engine) -> None:
    with Session(engine) as session, session.begin():
        store.set_metadata(session=session, values={"model": "m", "dim": 384, "book_count": 2})
    with Session(engine) as session, session.begin():
        store.set_metadata(session=session, values={"book_count": 3})
    with Session(engine) as session:
        meta = store.get_metadata(session=session)
        assert meta.pop(store.INDEX_ID_KEY) == store.index_id(session=session)  # migration 0003's
        assert meta == {"model": "m", "dim": 384, "book_count": 3}


def test_stored_bytes_are_little_endian_float32() -> None:
    v = np.array([1.0, -2.5, 3.25], dtype=np.float32)
    data = vector_format.to_bytes(v)
    assert data == np.array([1.0, -2.5, 3.25], dtype="<f4").tobytes()
    assert np.array_equal(vector_format.from_bytes(data, 3), v)
    with pytest.raises(ValueError, match="dim=4"):
        vector_format.from_bytes(data, 4)


def test_content_and_record_hashes_depend_on_model_and_content() -> None:
    h = vector_format.content_hash("m", "text")
    assert h == vector_format.content_hash("m", "text") and len(h) == 64
    assert h != vector_format.content_hash("m2", "text")
    assert h != vector_format.content_hash("m", "text ")
    r = _records(1)[0]
    assert batches.record_hash("m", r) != batches.record_hash("m2", r)
    assert batches.record_hash("m", r) != batches.record_hash("m", replace(r, year=1))
    assert batches.record_hash("m", r) == batches.record_hash("m", replace(r, line=99))
