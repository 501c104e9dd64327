"""The store on real SQLite and PostgreSQL: vectors round-trip bit for bit, upserts replace."""

from __future__ import annotations

import numpy as np
import pytest
from sqlalchemy import Engine, delete, select
from sqlalchemy.orm import Session

from indexer import store
from indexer.catalog import CatalogRecord
from indexer.schema import BookVector


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


def _write(
    engine: Engine,
    records: list[CatalogRecord],
    keys: np.ndarray,
    values: np.ndarray,
    model: str = "m",
    *,
    titles: np.ndarray | None = None,
) -> None:
    """Description keys `keys`, title keys `titles` (-keys when None), values `values`."""
    titles = -keys if titles is None else titles
    rows = [
        store.VectorRow(r.id, role, field, f"h{r.id}{role}{field}", vectors[i])
        for role, field, vectors in (
            ("key", "title", titles),
            ("key", "description", keys),
            ("value", "description", values),
        )
        for i, r in enumerate(records)
    ]
    with Session(engine) as session, session.begin():
        store.upsert_books(session=session, records=records)
        store.write_vectors(session=session, rows=rows, model=model)


def test_vectors_round_trip_exactly(engine: Engine) -> None:
    rng = np.random.default_rng(0)
    records = _records(7)
    keys = rng.standard_normal((7, 384)).astype(np.float32)
    values = rng.standard_normal((7, 384)).astype(np.float32)
    keys[0, 0] = np.float32(1e-38)  # subnormal-adjacent and extreme values survive too
    keys[1, 1] = np.float32(-3.4e38)
    _write(engine, records[::-1], keys[::-1], values[::-1])

    with Session(engine) as session:
        index = store.load_index(session=session, model="m")
        assert index.ids == [r.id for r in records]  # id order, whatever the write order
        assert set(index.keys) == {"title", "description"}
        assert np.array_equal(index.keys["description"], keys)
        assert np.array_equal(index.keys["title"], -keys)
        assert np.array_equal(index.values, values)
        for k in index.keys.values():
            assert k.dtype == np.float32 and k.flags.c_contiguous
        assert index.titles[3] == "Book 3"
        assert index.authors[3] == ["Author 3", "Co Author"]
        assert index.years[3] == 1993 and index.languages[3] == "eng"
        row = session.scalars(select(BookVector).where(BookVector.book_id == "b002")).first()
        assert row is not None
        assert (row.model, row.dim, row.dtype) == ("m", 384, "float32")
        book = store.get_book(session=session, book_id="b002")
        assert book is not None and book.extra == {"publisher": "P", "rating": 4.5, "tags": ["x"]}
        assert store.count_books(session=session) == 7


def test_upsert_replaces_books_and_vectors(engine: Engine) -> None:
    records = _records(3)
    _write(engine, records, np.ones((3, 4), np.float32), np.ones((3, 4), np.float32))
    changed = [CatalogRecord(id="b001", title="Renamed", authors=[], year=None)]
    _write(engine, changed, np.full((1, 4), 2, np.float32), np.full((1, 4), 3, np.float32))
    with Session(engine) as session:
        index = store.load_index(session=session, model="m")
        assert len(index) == 3
        assert index.titles[1] == "Renamed" and index.years[1] is None and index.authors[1] == []
        assert index.keys["description"][1].tolist() == [2, 2, 2, 2]
        assert index.keys["title"][1].tolist() == [-2, -2, -2, -2]
        assert index.values[1].tolist() == [3, 3, 3, 3]
        assert index.keys["description"][0].tolist() == [1, 1, 1, 1]


def test_load_index_only_takes_the_asked_model(engine: Engine) -> None:
    records = _records(4)
    _write(engine, records, np.ones((4, 4), np.float32), np.ones((4, 4), np.float32), model="a")
    _write(engine, records[:1], np.ones((1, 8), np.float32), np.ones((1, 8), np.float32), model="b")
    with Session(engine) as session:
        assert store.load_index(session=session, model="a").ids == ["b001", "b002", "b003"]
        b = store.load_index(session=session, model="b")
        assert b.ids == ["b000"] and b.keys["title"].shape == (1, 8)
        empty = store.load_index(session=session, model="c")
        assert len(empty) == 0 and empty.keys["description"].shape == (0, 0)


def test_vector_hashes_and_delete_cascades(engine: Engine) -> None:
    records = _records(3)
    _write(engine, records, np.ones((3, 4), np.float32), np.ones((3, 4), np.float32))
    with Session(engine) as session, session.begin():
        hashes = store.vector_hashes(session=session, book_ids=["b000", "b002", "nope"])
        assert hashes[("b000", "key", "title")] == "hb000keytitle"
        assert hashes[("b002", "value", "description")] == "hb002valuedescription"
        assert {book_id for book_id, _, _ in hashes} == {"b000", "b002"} and len(hashes) == 6
        assert store.delete_books(session=session, book_ids=["b000"]) == 1
    with Session(engine) as session:
        left = session.scalars(select(BookVector.book_id).distinct()).all()
        assert sorted(left) == ["b001", "b002"]


def test_metadata_round_trip(engine: Engine) -> None:
    with Session(engine) as session, session.begin():
        store.set_metadata(session=session, values={"model": "m", "dim": 384, "book_count": 2})
    with Session(engine) as session, session.begin():
        store.set_metadata(session=session, values={"book_count": 3})
    with Session(engine) as session:
        assert store.get_metadata(session=session) == {"model": "m", "dim": 384, "book_count": 3}


def test_stored_bytes_are_little_endian_float32() -> None:
    v = np.array([1.0, -2.5, 3.25], dtype=np.float32)
    data = store.to_bytes(v)
    assert data == np.array([1.0, -2.5, 3.25], dtype="<f4").tobytes()
    assert np.array_equal(store.from_bytes(data, 3), v)
    with pytest.raises(ValueError, match="dim=4"):
        store.from_bytes(data, 4)


def test_content_hash_depends_on_model_and_text() -> None:
    h = store.content_hash("m", "text")
    assert h == store.content_hash("m", "text") and len(h) == 64
    assert h != store.content_hash("m2", "text")
    assert h != store.content_hash("m", "text ")


def test_values_equal_to_keys_are_loaded_once(engine: Engine) -> None:
    records = _records(3)
    vectors = np.arange(12, dtype=np.float32).reshape(3, 4)
    _write(engine, records, vectors, vectors.copy())
    with Session(engine) as session:
        index = store.load_index(session=session, model="m")
        assert index.values is index.keys["description"]
        assert np.array_equal(index.keys["description"], vectors)
    _write(engine, records[:1], vectors[:1], vectors[:1] + 1)
    with Session(engine) as session:
        index = store.load_index(session=session, model="m")
        assert index.values is not index.keys
        assert np.array_equal(index.values[0], vectors[0] + 1)


def test_a_book_missing_a_field_is_not_loaded_and_old_fields_are_dropped(engine: Engine) -> None:
    records = _records(2)
    vectors = np.ones((2, 4), np.float32)
    _write(engine, records, vectors, vectors)
    with Session(engine) as session, session.begin():
        old = store.VectorRow("b000", "key", "text", "h", vectors[0])
        store.write_vectors(session=session, rows=[old], model="m")
        session.execute(
            delete(BookVector).where(BookVector.book_id == "b001", BookVector.field == "title")
        )
    with Session(engine) as session, session.begin():
        assert store.load_index(session=session, model="m").ids == ["b000"]
        store.delete_other_fields(session=session, book_ids=["b000"], fields=store.KEY_FIELDS)
    with Session(engine) as session:
        hashes = store.vector_hashes(session=session, book_ids=["b000"])
        assert ("b000", "key", "text") not in hashes and len(hashes) == 3
