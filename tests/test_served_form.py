"""A generation's served form (service/engine/served_form.py): a start that reads it serves what
a start from the database serves, byte for byte; a form that is not the generation's as the
database holds it (another database's, rows changed under it, a file cut short or changed) is
found, logged, built again from the database and written again; forms of older generations and
abandoned writes go. Real SQLite and PostgreSQL, the demo catalog with the fake encoder."""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient
from sqlalchemy import Engine, text
from sqlalchemy.orm import Session

from conftest import FakeEncoder, index_file, write_jsonl
from indexer import db
from indexer.data import DEMO_CATALOG
from indexer.filters import Filters
from models.keys import LocalKeys
from service.api.main import create_app
from service.config.settings import ServiceSettings
from service.engine import served_form, startup
from service.engine.served_index import ServedIndex

QUERIES = ["tolkien", "a dragon and a wizard", "python machine learning", "books by le guin"]
NAMED = ["tolkien", "books by ursula le guin", "about tolkien", "terry pratchett", "dragons"]


def _settings(engine: Engine, forms: Path | str, **more: object) -> ServiceSettings:
    url = engine.url.render_as_string(hide_password=False)
    return ServiceSettings(
        database_url=url,
        device="cpu",
        generation_poll_s=0,
        served_dir=str(forms),
        **more,  # type: ignore[arg-type]
    )


def _load(engine: Engine, forms: Path | None) -> ServedIndex:
    settings = _settings(engine, forms or "")
    with Session(engine) as session:
        return startup.load_served(
            startup.LocalPlacement(settings), session, model=FakeEncoder.name, forms=forms
        )


def _stamp(engine: Engine) -> served_form.Stamp:
    with Session(engine) as session:
        generation = startup.store.active_generation_id(session=session)
        stamp = served_form.stamp_of(session, generation=generation, model=FakeEncoder.name)
    assert stamp is not None
    return stamp


def assert_same(a: ServedIndex, b: ServedIndex) -> None:
    """Everything a served index answers with, equal."""
    assert (a.generation, a.model, len(a)) == (b.generation, b.model, len(b))
    for name, array in a.books.arrays().items():
        assert np.array_equal(array, b.books.arrays()[name]), name
    assert isinstance(a.keys, LocalKeys) and isinstance(b.keys, LocalKeys)
    for field, keys in a.keys.host().items():
        assert np.array_equal(keys, b.keys.host()[field]), field
    rows = list(range(len(a)))
    assert a.lexical.scores(QUERIES).tobytes() == b.lexical.scores(QUERIES).tobytes()
    assert a.like_this.scores(rows).tobytes() == b.like_this.scores(rows).tobytes()
    for row in rows:
        assert a.names.author_mates(row) == b.names.author_mates(row)
        assert a.names.series_mates(row) == b.names.series_mates(row)
        assert a.names.subject_mates(row) == b.names.subject_mates(row)
        assert a.names.works.editions(row) == b.names.works.editions(row)
        assert a.row_of(a.books.ids[row]) == b.row_of(a.books.ids[row]) == row
    assert a.names.principal == b.names.principal
    assert a.names.rows.publishers == b.names.rows.publishers
    assert a.names.rows.written == b.names.rows.written
    for query in NAMED:
        assert a.names.recognise(query, a.lexical.knows, a.lexical.holding) == b.names.recognise(
            query, b.lexical.knows, b.lexical.holding
        )
    for filters in (Filters(year_min=1950, language="en"), Filters(author="tolkien")):
        mask_a, mask_b = a.filters.mask(filters), b.filters.mask(filters)
        assert mask_a is not None and mask_b is not None
        assert torch.equal(mask_a, mask_b)
    assert (a.readers is None) == (b.readers is None)
    if a.readers is not None and b.readers is not None:
        assert torch.equal(a.readers, b.readers)


def test_a_start_from_the_served_form_serves_what_the_database_does(
    engine: Engine, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    index_file(engine, DEMO_CATALOG)
    forms = tmp_path / "forms"
    from_database = _load(engine, None)
    assert not forms.exists()  # no root: nothing written
    with caplog.at_level(logging.INFO, logger="service.engine"):
        first = _load(engine, forms)  # none yet: built, then written
        assert "no served form of generation" in caplog.text
        assert "wrote the served form" in caplog.text
        caplog.clear()
        second = _load(engine, forms)
    assert "served from" in caplog.text and "built the BM25" not in caplog.text
    assert isinstance(second.keys, LocalKeys)
    assert_same(from_database, first)
    assert_same(from_database, second)


def test_the_readers_prior_comes_back_from_the_form(engine: Engine, tmp_path: Path) -> None:
    books = [
        {"id": f"b{i}", "title": f"Book {i}", "authors": ["A. Writer"], "ratings_count": i * 10}
        for i in range(12)
    ]
    books[3].pop("ratings_count")  # unknown: the median of the others
    index_file(engine, write_jsonl(tmp_path / "books.jsonl", books))
    forms = tmp_path / "forms"
    built, read = _load(engine, forms), _load(engine, forms)
    assert built.readers is not None
    assert_same(built, read)


def test_the_publishers_come_back_from_the_form(engine: Engine, tmp_path: Path) -> None:
    books = [
        {"id": "a", "title": "Rivers", "authors": ["A. Writer"], "publisher": "Penguin Books"},
        {"id": "b", "title": "Lakes", "authors": ["A. Writer"], "publishers": ["Vintage", "Ácme"]},
        {"id": "c", "title": "Seas", "authors": ["A. Writer"]},
    ]
    index_file(engine, write_jsonl(tmp_path / "books.jsonl", books))
    forms = tmp_path / "forms"
    built, read = _load(engine, forms), _load(engine, forms)
    assert read.names.rows.publishers == [("penguin books",), ("vintage", "acme"), ()]
    assert_same(built, read)
    mask = read.filters.mask(Filters(publisher="ACME"))
    assert mask is not None and mask.tolist() == [False, True, False]


def test_the_app_answers_alike_from_the_form_and_from_the_database(
    engine: Engine, tmp_path: Path
) -> None:
    index_file(engine, DEMO_CATALOG)

    def answers(forms: Path | str) -> list[object]:
        with TestClient(create_app(_settings(engine, forms), encoder=FakeEncoder())) as client:
            out: list[object] = []
            for q in QUERIES:
                out.append(client.get("/search", params={"q": q}).json()["results"])
            ids = [b.id for b in client.app.state.searcher.index.named_books([0, 7, 40])]  # type: ignore[attr-defined]
            for book_id in ids:
                out.append(client.get(f"/books/{book_id}/similar").json()["results"])
            out.append(client.post("/recommend", json={"liked": ids[:2]}).json()["results"])
            return out

    database = answers("")
    assert answers(tmp_path / "forms") == database  # the start that writes it
    assert answers(tmp_path / "forms") == database  # the start that reads it


def _truncate(folder: Path, _other: Path, _engine: Engine) -> str:
    path = folder / "keys.description.npy"
    with path.open("r+b") as f:
        f.truncate(path.stat().st_size - 4)
    return "bytes, written"


def _same_size_other_dtype(folder: Path, _other: Path, _engine: Engine) -> str:
    path = folder / "lexical.lengths.npy"
    lengths = np.load(path)
    np.save(path, lengths.view(np.float32))  # one header's dtype changed, the size not
    return "holds float32"


def _parts_that_do_not_fit(folder: Path, _other: Path, _engine: Engine) -> str:
    path = folder / "lexical.indptr.npy"
    indptr = np.load(path)
    indptr[-1] += 1  # the same dtype, shape and size: what the manifest checks holds
    np.save(path, indptr)
    return "BM25 postings that do not hold together"


def _authors_past_their_names(folder: Path, _other: Path, _engine: Engine) -> str:
    path = folder / "books.author_starts.npy"
    starts = np.load(path)
    starts[-1] += 1  # the same dtype, shape and size
    np.save(path, starts)
    return "authors do not span their names"


def _a_work_that_is_no_row(folder: Path, _other: Path, _engine: Engine) -> str:
    path = folder / "names.works.npy"
    works = np.load(path)
    works[0] = len(works)  # the same dtype, shape and size
    np.save(path, works)
    return "work ids that are not rows"


def _an_array_left_out(folder: Path, _other: Path, _engine: Engine) -> str:
    manifest = json.loads((folder / served_form.MANIFEST).read_text())
    del manifest["arrays"]["like_this.scores"]  # a form of a layout without them, say
    (folder / served_form.MANIFEST).write_text(json.dumps(manifest))
    (folder / "like_this.scores.npy").unlink()
    return "KeyError: 'scores'"


def _a_name_outside_its_folder(folder: Path, _other: Path, _engine: Engine) -> str:
    manifest = json.loads((folder / served_form.MANIFEST).read_text())
    manifest["arrays"]["../../elsewhere"] = manifest["arrays"]["books.years"]
    (folder / served_form.MANIFEST).write_text(json.dumps(manifest))
    return "an array named '../../elsewhere'"


def _rows_changed_under_it(_folder: Path, _other: Path, engine: Engine) -> str:
    with engine.begin() as conn:  # a book of the generation gone (a database restored, say)
        row = conn.execute(text("SELECT max(row_id) FROM book_versions")).scalar_one()
        conn.execute(text("DELETE FROM version_vectors WHERE version_id = :r"), {"r": row})
        conn.execute(text("DELETE FROM book_versions WHERE row_id = :r"), {"r": row})
    return "another fingerprint"


def _another_databases(folder: Path, other: Path, _engine: Engine) -> str:
    shutil.rmtree(folder)
    shutil.copytree(other, folder)  # another database's form, in this one's place
    return "another index_id"


def _another_format(folder: Path, _other: Path, _engine: Engine) -> str:
    manifest = json.loads((folder / served_form.MANIFEST).read_text())
    manifest["format"] = served_form.FORMAT + 1
    (folder / served_form.MANIFEST).write_text(json.dumps(manifest))
    return f"format {served_form.FORMAT + 1}"


@pytest.mark.parametrize(
    "damage",
    [
        _truncate,
        _same_size_other_dtype,
        _parts_that_do_not_fit,
        _authors_past_their_names,
        _a_work_that_is_no_row,
        _an_array_left_out,
        _a_name_outside_its_folder,
        _rows_changed_under_it,
        _another_databases,
        _another_format,
    ],
)
def test_a_form_not_the_generations_is_built_again(
    engine: Engine,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    damage: Callable[[Path, Path, Engine], str],
) -> None:
    index_file(engine, DEMO_CATALOG)
    forms = tmp_path / "forms"
    _load(engine, forms)
    # another database of the same catalog (SQLite), with its own form
    other_engine = db.create_db_engine(f"sqlite:///{tmp_path / 'other.db'}")
    db.upgrade(other_engine)
    index_file(other_engine, DEMO_CATALOG)
    _load(other_engine, forms)
    other = forms / _stamp(other_engine).folder
    other_engine.dispose()
    why = damage(forms / _stamp(engine).folder, other, engine)
    with caplog.at_level(logging.INFO, logger="service.engine"):
        rebuilt = _load(engine, forms)
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("building it again from the database" in m and why in m for m in warned), warned
    assert "built the BM25 index" in caplog.text and "wrote the served form" in caplog.text
    assert_same(_load(engine, None), rebuilt)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="service.engine"):
        assert_same(rebuilt, _load(engine, forms))  # the form written again, and whole
    assert "served from" in caplog.text and not [
        r for r in caplog.records if r.levelno >= logging.WARNING
    ]


def test_a_swap_writes_its_form_and_the_older_goes(engine: Engine, tmp_path: Path) -> None:
    index_file(engine, DEMO_CATALOG)
    forms = tmp_path / "forms"
    settings = _settings(engine, forms)
    with TestClient(create_app(settings, encoder=FakeEncoder())) as client:
        before = forms / _stamp(engine).folder
        assert (before / served_form.MANIFEST).is_file()  # written at the start
        books = [json.loads(line) for line in DEMO_CATALOG.read_text().splitlines()]
        books[0]["description"] = "Rewritten: a story of lighthouses and their keepers."
        index_file(engine, write_jsonl(tmp_path / "edited.jsonl", books))
        client.app.state.watcher.check()  # type: ignore[attr-defined]  # (PostgreSQL's
        # notification may have swapped already: a check that returns has seen that swap whole)
        swapped = client.app.state.searcher.index  # type: ignore[attr-defined]
        assert swapped.generation == _stamp(engine).generation
        after = forms / _stamp(engine).folder
        assert after != before and (after / served_form.MANIFEST).is_file()
        assert not before.exists()  # the older generation's form removed
        assert_same(swapped, _load(engine, forms))


def test_a_swap_with_half_precision_keys_writes_no_form(engine: Engine, tmp_path: Path) -> None:
    """Its keys are rounded: a form of them would hand a float32 start keys the database lacks."""
    index_file(engine, DEMO_CATALOG)
    forms = tmp_path / "forms"
    settings = _settings(engine, forms, key_dtype="bfloat16")
    with TestClient(create_app(settings, encoder=FakeEncoder())) as client:
        assert (forms / _stamp(engine).folder / served_form.MANIFEST).is_file()  # from the rows
        books = [json.loads(line) for line in DEMO_CATALOG.read_text().splitlines()]
        books[0]["description"] = "Rewritten: a story of lighthouses and their keepers."
        index_file(engine, write_jsonl(tmp_path / "edited.jsonl", books))
        client.app.state.watcher.check()  # type: ignore[attr-defined]
        assert client.app.state.searcher.index.generation == _stamp(engine).generation  # type: ignore[attr-defined]
    assert not (forms / _stamp(engine).folder).exists()
    assert_same(_load(engine, None), _load(engine, forms))  # the next start: from the rows


def test_abandoned_writes_go_after_an_hour_and_younger_ones_stay(tmp_path: Path) -> None:
    index = tmp_path / "forms" / "some-index"
    old, young, kept = index / ".writing-old", index / ".writing-young", index / "g7-abc"
    for folder in (old, young, kept, index / "g6-abc"):
        folder.mkdir(parents=True)
    now = time.time()
    os.utime(old, (now, now - served_form.ABANDONED_S - 60))
    os.utime(young, (now, now - served_form.ABANDONED_S + 60))
    stamp = served_form.Stamp("some-index", 7, "m", "1:1:1")
    assert served_form.write(tmp_path / "forms", stamp, {"a": np.arange(3)}) is not None
    written = stamp.folder.split("/")[1]  # g7 of another model's digest than "abc": kept
    assert sorted(p.name for p in index.iterdir()) == sorted([".writing-young", "g7-abc", written])


def test_a_form_another_replica_wrote_meanwhile_stays(tmp_path: Path) -> None:
    stamp = served_form.Stamp("some-index", 3, "m", "1:1:1")
    first = served_form.write(tmp_path, stamp, {"a": np.arange(3)})
    again = served_form.write(tmp_path, stamp, {"a": np.arange(5)})
    assert first == again and first is not None
    read = served_form.read(tmp_path, stamp)
    assert read is not None and np.array_equal(read["a"], np.arange(3))  # the first, whole
    assert [p.name for p in first.parent.iterdir()] == [first.name]  # no copy left beside it


def test_where_the_forms_go(tmp_path: Path) -> None:
    sqlite = db.create_db_engine(f"sqlite:///{tmp_path / 'books.db'}")
    memory = db.create_db_engine("sqlite://")
    try:
        unset = ServiceSettings(database_url="sqlite://", served_dir=None)
        assert startup.served_root(unset, sqlite) == Path(f"{tmp_path / 'books.db'}.served")
        assert startup.served_root(unset, memory) is None
        off = ServiceSettings(database_url="sqlite://", served_dir="")
        assert startup.served_root(off, sqlite) is None
        there = ServiceSettings(database_url="sqlite://", served_dir=str(tmp_path / "x"))
        assert startup.served_root(there, sqlite) == tmp_path / "x"
    finally:
        sqlite.dispose()
        memory.dispose()


def test_a_form_that_cannot_be_written_leaves_the_start_serving(
    engine: Engine, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    index_file(engine, DEMO_CATALOG)
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    with caplog.at_level(logging.WARNING, logger="service.engine"):
        served = _load(engine, blocked)
    assert "could not write the served form" in caplog.text
    assert_same(_load(engine, None), served)
