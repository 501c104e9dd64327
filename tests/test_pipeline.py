"""The indexing job on real databases with a fake encoder: what it writes, skips and refuses."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from sqlalchemy import Engine, inspect
from sqlalchemy.orm import Session

from conftest import FakeEncoder, write_jsonl
from indexer import batches, db, deletion, loaded_index, pipeline, store
from indexer.catalog import CatalogError, CatalogRecord
from indexer.embedding import LazyEncoder
from indexer.settings import IndexSettings

BOOKS = [
    {
        "id": "dl",
        "title": "Deep Learning",
        "description": "Neural networks and generative models.",
        "authors": ["Ian Goodfellow"],
        "year": 2016,
        "language": "en",
    },
    {
        "id": "db",
        "title": "Database Internals",
        "description": "Storage engines and B-trees.",
        "authors": ["Alex Petrov"],
        "year": 2019,
    },
    {"id": "hp", "title": "Harry Potter", "authors": ["J.K. Rowling"], "year": 1997},
    {"id": "dune", "title": "Dune", "description": "Desert planet politics.", "year": 1965},
    {"id": "sicp", "title": "SICP", "description": "Programs as data.", "publisher": "MIT Press"},
]


def _run(
    engine: Engine, path: Path, encoder: FakeEncoder | LazyEncoder, **kwargs: object
) -> pipeline.IndexReport:
    settings = IndexSettings(
        database_url=engine.url.render_as_string(hide_password=False), batch_size=2
    )
    return pipeline.run(settings, engine=engine, encoder=encoder, path=path, **kwargs)  # type: ignore[arg-type]


def test_index_writes_books_vectors_and_metadata(
    engine: Engine, tmp_path: Path, fake_encoder: FakeEncoder
) -> None:
    report = _run(engine, write_jsonl(tmp_path / "c.jsonl", BOOKS), fake_encoder)
    assert (report.books, report.added, report.unchanged, report.rejected) == (5, 5, 0, [])
    assert (report.generation, report.activated, report.embedded) == (1, True, 9)
    assert fake_encoder.calls == 3  # batches of 2: one encoder call and one transaction each

    with Session(engine) as session:
        index = loaded_index.load_index(session=session, model=fake_encoder.name)
        assert index.ids == sorted(b["id"] for b in BOOKS)
        records = [
            CatalogRecord(id=b["id"], title=b["title"], description=b.get("description"))  # type: ignore[arg-type]
            for b in sorted(BOOKS, key=lambda b: str(b["id"]))
        ]
        for field in batches.FIELDS:
            expected = FakeEncoder().encode([batches.field_texts(r)[field] for r in records])
            assert np.allclose(index.keys[field], expected.numpy())
        assert index.values is index.keys["description"]
        meta = store.get_metadata(session=session)
        assert meta["model"] == fake_encoder.name and meta["dim"] == 64 and meta["book_count"] == 5
        sicp = store.get_book(session=session, book_id="sicp")
        assert sicp is not None and sicp.extra == {"publisher": "MIT Press"}


def test_field_texts_fall_back_to_the_title_without_a_description() -> None:
    assert batches.FIELDS == ("title", "description")
    assert batches.field_texts(CatalogRecord(id="a", title="T", description="D")) == {
        "title": "T",
        "description": "D",
    }
    assert batches.field_texts(CatalogRecord(id="a", title="T")) == {
        "title": "T",
        "description": "T",
    }


def test_rerun_embeds_only_what_changed(engine: Engine, tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "c.jsonl", BOOKS)
    _run(engine, path, FakeEncoder())
    again = FakeEncoder()
    report = _run(engine, path, again)
    assert (report.added, report.unchanged, again.texts_encoded) == (0, 5, 0)
    assert (report.generation, report.activated) == (1, False)  # nothing changed: no switch

    changed = [dict(b) for b in BOOKS[:4]]  # sicp is gone
    changed[3]["description"] = "A desert planet, spice and a messiah."
    changed[2]["year"] = 1998  # metadata only: updated without embedding
    edit = FakeEncoder()
    report = _run(engine, write_jsonl(tmp_path / "c2.jsonl", changed), edit)
    assert (report.updated, report.unchanged, report.removed) == (2, 2, 1)
    assert (report.embedded, edit.texts_encoded) == (1, 1)
    assert report.generation == 3  # ids only grow: the no-op run's 2 was discarded
    with Session(engine) as session:
        hp = store.get_book(session=session, book_id="hp")
        assert hp is not None and hp.year == 1998
        assert store.get_book(session=session, book_id="sicp") is None
        assert len(loaded_index.load_index(session=session, model=FakeEncoder.name)) == 4

    kept = _run(
        engine, write_jsonl(tmp_path / "c3.jsonl", BOOKS[:1]), FakeEncoder(), keep_missing=True
    )
    assert (kept.removed, kept.activated, kept.generation) == (0, False, 3)


class CountingFactory:
    """Builds a fake encoder each call, and keeps every one it built."""

    def __init__(self) -> None:
        self.built: list[FakeEncoder] = []

    def __call__(self) -> FakeEncoder:
        self.built.append(FakeEncoder())
        return self.built[-1]


def test_a_rerun_builds_the_encoder_only_for_a_text_to_embed(
    engine: Engine, tmp_path: Path
) -> None:
    """`attend index` hands the pipeline a LazyEncoder: a run that changes nothing never loads
    the model (and still records its width), a changed book loads it and is embedded."""
    path = write_jsonl(tmp_path / "c.jsonl", BOOKS)
    first = CountingFactory()
    report = _run(engine, path, LazyEncoder(FakeEncoder.name, first))
    assert (len(first.built), report.embedded) == (1, 9)

    idle = CountingFactory()
    report = _run(engine, path, LazyEncoder(FakeEncoder.name, idle))
    assert (report.unchanged, report.embedded, report.activated) == (5, 0, False)
    assert idle.built == []
    with Session(engine) as session:
        assert store.get_metadata(session=session)["dim"] == FakeEncoder.dim

    edited = [dict(b) for b in BOOKS]
    edited[0]["year"] = 2017  # metadata only: a new row, no text to embed
    metadata_only = CountingFactory()
    report = _run(
        engine,
        write_jsonl(tmp_path / "c2.jsonl", edited),
        LazyEncoder(FakeEncoder.name, metadata_only),
    )
    assert (report.updated, report.embedded, metadata_only.built) == (1, 0, [])

    edited[3]["description"] = "A desert planet, spice and a messiah."
    changed = CountingFactory()
    report = _run(
        engine, write_jsonl(tmp_path / "c3.jsonl", edited), LazyEncoder(FakeEncoder.name, changed)
    )
    assert (report.updated, report.embedded) == (1, 1)
    assert [e.texts_encoded for e in changed.built] == [1]
    with Session(engine) as session:
        index = loaded_index.load_index(session=session, model=FakeEncoder.name)
    expected = FakeEncoder().encode([str(edited[3]["description"])])[0].numpy()  # (d,)
    assert np.allclose(index.keys["description"][index.ids.index("dune")], expected, atol=1e-6)


def test_a_lazy_encoder_refuses_a_model_other_than_its_name() -> None:
    lazy = LazyEncoder("another-model", FakeEncoder)
    assert not lazy.loaded
    with pytest.raises(
        ValueError, match="built encoder 'fake-hashing-64', expected 'another-model'"
    ):
        lazy.encode(["text"])


def test_a_bad_row_stops_the_run_before_anything_is_written(
    database_url: str, tmp_path: Path, fake_encoder: FakeEncoder
) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(
        write_jsonl(tmp_path / "ok.jsonl", BOOKS).read_text() + '{"id": "x"}\n', encoding="utf-8"
    )
    engine = db.create_db_engine(database_url)
    try:
        with pytest.raises(CatalogError) as info:
            _run(engine, path, fake_encoder)
        assert [(r.line, r.reason) for r in info.value.rows] == [(6, "missing 'title'")]
        assert fake_encoder.calls == 0
        assert "books" not in inspect(engine).get_table_names()  # not even migrated
    finally:
        engine.dispose()


def test_skip_invalid_indexes_the_valid_rows(
    engine: Engine, tmp_path: Path, fake_encoder: FakeEncoder
) -> None:
    path = tmp_path / "bad.jsonl"
    lines = write_jsonl(tmp_path / "ok.jsonl", BOOKS).read_text().splitlines()
    lines.insert(1, '{"id": "dl", "title": "Duplicate"}')
    lines.insert(3, "{broken")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    report = _run(engine, path, fake_encoder, skip_invalid=True)
    assert report.books == 5 and report.added == 5
    assert [r.line for r in report.rejected] == [2, 4]
    assert "duplicate id 'dl'" in report.rejected[0].reason
    with Session(engine) as session:
        assert store.count_books(session=session) == 5
        dl = store.get_book(session=session, book_id="dl")
        assert dl is not None and dl.title == "Deep Learning"  # the first occurrence wins


def test_a_new_model_re_embeds_everything(engine: Engine, tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "c.jsonl", BOOKS)
    _run(engine, path, FakeEncoder())

    class OtherModel(FakeEncoder):
        name = "other-model"

    other = OtherModel()
    report = _run(engine, path, other)
    assert report.updated == 5 and other.texts_encoded == 9  # hp: its title twice, once
    with Session(engine) as session:
        assert len(loaded_index.load_index(session=session, model="other-model")) == 5
        assert len(loaded_index.load_index(session=session, model=FakeEncoder.name)) == 0


def test_delete_books_makes_a_generation_without_them(
    engine: Engine, tmp_path: Path, fake_encoder: FakeEncoder
) -> None:
    _run(engine, write_jsonl(tmp_path / "c.jsonl", BOOKS), fake_encoder)
    report = deletion.delete_books(engine=engine, book_ids=["dune", "nope", "hp"])
    assert (report.removed, report.unknown, report.generation) == (["dune", "hp"], ["nope"], 2)
    with Session(engine) as session:
        assert loaded_index.load_index(session=session, model=fake_encoder.name).ids == [
            "db",
            "dl",
            "sicp",
        ]
        assert (
            len(loaded_index.load_index(session=session, model=fake_encoder.name, generation=1))
            == 5
        )
