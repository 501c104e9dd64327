"""Issue 16: what validation passes, the databases store and the service serves back.

Rows that once passed validation and then crashed the run (a traceback, the generation left
building, `attend delete` refused) are rejected with `file:line: reason` and honour
`--skip-invalid`; rows at the edge of each limit are stored and served unchanged. One snapshot
of the catalog per run; bounded memory per row; a run that fails ends its generation failed.
On SQLite and PostgreSQL."""

from __future__ import annotations

import json
import tempfile
import time
import tracemalloc
from pathlib import Path

import pytest
import torch
from fastapi.testclient import TestClient
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from conftest import FakeEncoder, index_file, serve_books, write_jsonl
from indexer import deletion, loaded_index, pipeline, progress, store
from indexer.catalog import (
    MAX_DEPTH,
    CatalogError,
    CatalogRecord,
    CatalogSnapshot,
    InvalidRow,
    scan_catalog,
)
from indexer.schema import BUILDING, FAILED, Generation
from indexer.settings import IndexSettings

GOOD: dict[str, object] = {
    "id": "good",
    "title": "A fine book",
    "description": "Dragons and rivers.",
}


def _nested(levels: int) -> object:
    """A value of `levels` nested lists around a 1 (the row adds one level)."""
    value: object = 1
    for _ in range(levels):
        value = [value]
    return value


# Raw JSONL lines (not json.dumps: the lone surrogate and NaN need their own spelling) of
# rows that crashed a run on SQLite, PostgreSQL or both, and the words their reason has.
UNSTORABLE = [
    pytest.param(
        '{"id": "y", "title": "T", "year": 9223372036854775808}', ["year"], id="year-2^63"
    ),
    pytest.param(
        '{"id": "y", "title": "T", "year": 2147483648}', ["year", "range"], id="year-2^31"
    ),
    pytest.param(
        '{"id": "y", "title": "T", "year": -2147483649}', ["year", "range"], id="year-below-int32"
    ),
    pytest.param('{"id": "y", "title": "T\\ud800"}', ["surrogate", "title"], id="lone-surrogate"),
    pytest.param(
        '{"id": "y", "title": "T", "tags": ["\\udfff"]}', ["surrogate"], id="surrogate-in-metadata"
    ),
    pytest.param(
        '{"id": "y", "title": "T", "x": ' + "[" * 1100 + "]" * 1100 + "}",
        ["nested"],
        id="1100-levels",
    ),
    pytest.param(
        '{"id": "y", "title": "T", "x": ' + json.dumps(_nested(300)) + "}",
        ["nested"],
        id="300-levels",
    ),
    pytest.param(
        '{"id": "y", "title": "T", "n": ' + "9" * 5000 + "}", ["integer"], id="5000-digits"
    ),
    pytest.param('{"id": "y", "title": "T", "n": 9223372036854775808}', ["integer"], id="int-2^63"),
    pytest.param('{"id": "y", "title": "T\\u0000x"}', ["NUL", "title"], id="nul-in-title"),
    pytest.param(
        '{"id": "y", "title": "T", "description": "a\\u0000"}', ["NUL"], id="nul-in-description"
    ),
    pytest.param('{"id": "y", "title": "T", "k\\u0000": 1}', ["NUL"], id="nul-in-metadata-key"),
    pytest.param('{"id": "y", "title": "T", "score": NaN}', ["NaN"], id="nan-in-metadata"),
    pytest.param('{"id": "y", "title": "T", "score": -Infinity}', ["Infinity"], id="infinity"),
    pytest.param('{"id": "y", "title": "T", "score": 1e400}', ["range"], id="float-overflow"),
    pytest.param(
        '{"id": "y", "title": "T", "language": "' + "x" * 65 + '"}',
        ["language", "64"],
        id="long-lang",
    ),
]


def _catalog(folder: Path, bad: str) -> Path:
    path = folder / "books.jsonl"
    path.write_text(json.dumps(GOOD) + "\n" + bad + "\n", encoding="utf-8")
    return path


def _states(engine: Engine) -> list[str]:
    with Session(engine) as session:
        return list(session.scalars(select(Generation.state).order_by(Generation.id)))


@pytest.mark.parametrize(("bad", "words"), UNSTORABLE)
def test_a_row_the_databases_cannot_store_is_rejected_with_its_line(
    tmp_path: Path, bad: str, words: list[str]
) -> None:
    path = _catalog(tmp_path, bad)
    rows = list(scan_catalog(path))
    assert isinstance(rows[0], CatalogRecord)
    (row,) = rows[1:]
    assert isinstance(row, InvalidRow), row
    assert (row.path, row.line) == (str(path), 2)
    assert str(row).startswith(f"{path}:2: ")
    for word in words:
        assert word in row.reason
    assert len(row.reason) < 200  # a 5,000-digit number is not echoed whole


@pytest.mark.parametrize(("bad", "words"), UNSTORABLE)
def test_an_unstorable_row_stops_the_run_or_is_skipped(
    engine: Engine, tmp_path: Path, bad: str, words: list[str]
) -> None:
    """Without --skip-invalid nothing is written; with it the good row is indexed, the
    generation is active (not left building) and books can be deleted."""
    path = _catalog(tmp_path, bad)
    with pytest.raises(CatalogError) as info:
        index_file(engine, path)
    assert f"{path}:2: " in str(info.value)
    assert _states(engine) == []
    report = index_file(engine, path, skip_invalid=True)
    assert report.books == 1 and [r.line for r in report.rejected] == [2]
    assert _states(engine) == ["active"]
    with Session(engine) as session:
        assert store.get_book(session=session, book_id="good") is not None
        assert store.get_book(session=session, book_id="y") is None
    assert deletion.delete_books(engine=engine, book_ids=["good"]).removed == ["good"]


# Rows at the edge of every limit: stored and served back exactly.
EDGE: list[dict[str, object]] = [
    {"id": "year-max", "title": "T", "year": 2**31 - 1},
    {"id": "year-min", "title": "T", "year": -(2**31)},
    {"id": "int64", "title": "T", "big": 2**63 - 1, "small": -(2**63)},
    {"id": "deep", "title": "T", "deep": _nested(MAX_DEPTH - 1)},
    {"id": "astral", "title": "Emoji \U0001f409 and ümlauts", "tags": ["\u2028", "\ufeff"]},
    {"id": "lang", "title": "T", "language": "x" * 64, "f": 1.5e308, "neg": -0.0},
    {"id": "ctl", "title": "tab\there", "description": "bell\x07 and escape\x1b"},
]


def test_rows_at_each_limit_are_stored_and_served(engine: Engine, tmp_path: Path) -> None:
    with serve_books(engine, tmp_path, EDGE) as client:
        for row in EDGE:
            r = client.get(f"/books/{row['id']}")
            assert r.status_code == 200, (row["id"], r.text)
            body = r.json()
            assert body["title"] == row["title"]
            assert body.get("year") == row.get("year")
            assert body.get("language") == row.get("language")
            extra = {
                k: v for k, v in row.items() if k not in GOOD and k not in ("year", "language")
            }
            assert body["metadata"] == extra
            assert client.get(f"/books/{row['id']}/explain", params={"q": "t"}).status_code == 200


def test_a_catalog_rewritten_during_the_run_is_indexed_as_validated(
    engine: Engine, tmp_path: Path
) -> None:
    """Validated and indexed from one snapshot: a rewrite after validation (here the moment
    the run starts indexing) changes nothing, where it once indexed an unvalidated row,
    skipped a broken one silently and removed books, its summary saying "0 rejected"."""
    books: list[dict[str, object]] = [{"id": f"b{i}", "title": f"Book {i}"} for i in range(6)]
    path = write_jsonl(tmp_path / "books.jsonl", books)
    rewritten: list[dict[str, object]] = [
        {"id": "intruder", "title": "Never validated"},
        {"id": "b0"},
    ]

    def rewrite(p: progress.ProgressSnapshot) -> None:
        if p.state == "indexing" and p.done == 0:
            write_jsonl(path, rewritten)

    url = engine.url.render_as_string(hide_password=False)
    report = pipeline.run(
        IndexSettings(database_url=url, batch_size=2),
        engine=engine,
        encoder=FakeEncoder(),
        path=path,
        progress=progress.Progress(rewrite),
    )
    assert json.loads(path.read_text().splitlines()[0])["id"] == "intruder"  # it was rewritten
    assert (report.books, report.added, report.removed, report.rejected) == (6, 6, 0, [])
    with Session(engine) as session:
        index = loaded_index.load_index(session=session, model=FakeEncoder.name)
    assert index.ids == sorted(str(b["id"]) for b in books)


def test_a_run_reads_the_catalog_file_once(tmp_path: Path) -> None:
    """The snapshot is taken once; the original file can go before the run reads a row."""
    path = write_jsonl(tmp_path / "books.jsonl", [GOOD])
    with CatalogSnapshot.take(path) as snapshot:
        path.unlink()
        first, second = list(snapshot.scan()), list(snapshot.scan())
    assert first == second and [r.id for r in first if isinstance(r, CatalogRecord)] == ["good"]
    assert str(path) == snapshot.name


@pytest.mark.parametrize("suffix", [".jsonl", ".csv"])
def test_an_overlong_row_is_rejected_with_its_line_in_bounded_memory(
    tmp_path: Path, suffix: str
) -> None:
    """A 20 MB single-line row (a 100 MB one drove an upload past 11 GB) is refused by the
    reader with `file:line`, holding at most ~the row limit in memory; reading goes on after
    it."""
    limit = 64 * 1024
    path = tmp_path / f"books{suffix}"
    huge = "x" * 20_000_000
    if suffix == ".jsonl":
        lines = [
            json.dumps(GOOD),
            json.dumps({"id": "h", "title": huge}),
            '{"id": "z", "title": "Z"}',
        ]
    else:
        lines = ["id,title", "good,A fine book", f"h,{huge}", "z,Z"]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    del huge, lines
    tracemalloc.start()
    try:
        rows = list(scan_catalog(path, max_row_bytes=limit))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 5_000_000, peak  # the line was 20 MB; skipping it reads 1 MB chunks
    bad = [r for r in rows if isinstance(r, InvalidRow)]
    good = [r.id for r in rows if isinstance(r, CatalogRecord)]
    line = 2 if suffix == ".jsonl" else 3
    assert [(r.path, r.line) for r in bad] == [(str(path), line)]
    assert "longer than 65,536 bytes" in bad[0].reason
    assert good == ["good", "z"]


def test_a_csv_record_over_many_lines_counts_them_all_against_the_limit(tmp_path: Path) -> None:
    path = tmp_path / "books.csv"
    many = "\n".join(["y" * 1000] * 100)  # 100 kB in one quoted field, 1 kB a line
    path.write_text(f'id,title\ngood,A\nh,"{many}"\n', encoding="utf-8")
    rows = list(scan_catalog(path, max_row_bytes=64 * 1024))
    assert [r.id for r in rows if isinstance(r, CatalogRecord)] == ["good"]
    (bad,) = [r for r in rows if isinstance(r, InvalidRow)]
    assert bad.line == 3 and "longer than" in bad.reason


def test_a_csv_year_of_thousands_of_digits_is_rejected(tmp_path: Path) -> None:
    path = tmp_path / "books.csv"
    path.write_text(f"id,title,year\ngood,A,1999\nh,B,{'9' * 5000}\n", encoding="utf-8")
    rows = list(scan_catalog(path))
    assert isinstance(rows[0], CatalogRecord) and rows[0].year == 1999
    assert isinstance(rows[1], InvalidRow) and rows[1].line == 3
    assert "'year'" in rows[1].reason and "range" in rows[1].reason


def test_many_tiny_rows_are_read_in_small_memory(tmp_path: Path) -> None:
    """100,000 tiny rows (3 MB): the reader holds one row at a time and the ids seen."""
    path = tmp_path / "books.jsonl"
    path.write_text(
        "".join(f'{{"id": "{i}", "title": "t"}}\n' for i in range(100_000)), encoding="utf-8"
    )
    tracemalloc.start()
    try:
        n = sum(1 for r in scan_catalog(path) if isinstance(r, CatalogRecord))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert n == 100_000
    assert peak < 30_000_000, peak


class _FailingEncoder(FakeEncoder):
    """An encoder that fails on its second call, as a model can (out of memory, a bug)."""

    def encode(self, texts: list[str]) -> torch.Tensor:
        if self.calls >= 1:
            raise RuntimeError("the encoder failed")
        return super().encode(texts)


def test_a_run_that_fails_midway_ends_its_generation_failed(engine: Engine, tmp_path: Path) -> None:
    """An error mid-run leaves no generation building (which refused `attend delete` until a
    rerun): it ends failed, its rows undone, and the active generation keeps serving."""
    url = engine.url.render_as_string(hide_password=False)
    first = write_jsonl(tmp_path / "first.jsonl", [GOOD])
    pipeline.run(IndexSettings(database_url=url), engine=engine, encoder=FakeEncoder(), path=first)
    books: list[dict[str, object]] = [{"id": f"b{i}", "title": f"Book {i}"} for i in range(6)]
    second = write_jsonl(tmp_path / "second.jsonl", books)
    with pytest.raises(RuntimeError, match="the encoder failed"):
        pipeline.run(
            IndexSettings(database_url=url, batch_size=2),
            engine=engine,
            encoder=_FailingEncoder(),
            path=second,
        )
    assert _states(engine) == ["active", FAILED]
    assert BUILDING not in _states(engine)
    with Session(engine) as session:
        assert loaded_index.load_index(session=session, model=FakeEncoder.name).ids == ["good"]
        failed = session.scalars(select(Generation).where(Generation.state == FAILED)).one()
        assert failed.error is not None and "the encoder failed" in failed.error
    assert deletion.delete_books(engine=engine, book_ids=["good"]).removed == ["good"]


def _uploads_left(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_an_uploaded_catalog_has_no_name_on_disk(
    engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The upload is an anonymous temporary file while its job runs (seen from the encoder,
    mid-job), so a crash cannot leave it behind; it once was a named file in the temp folder."""
    from service.api.main import create_app
    from service.config.settings import ServiceSettings

    spool = tmp_path / "tmp"
    spool.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(spool))
    seen: list[list[str]] = []

    class Watching(FakeEncoder):
        def encode(self, texts: list[str]) -> torch.Tensor:
            seen.append(_uploads_left(spool))
            return super().encode(texts)

    url = engine.url.render_as_string(hide_password=False)
    pipeline.run(
        IndexSettings(database_url=url),
        engine=engine,
        encoder=FakeEncoder(),
        path=write_jsonl(tmp_path / "first.jsonl", [GOOD]),
    )
    settings = ServiceSettings(database_url=url, device="cpu", admin_token="t" * 32)
    body = "".join(json.dumps({"id": f"u{i}", "title": f"Up {i}"}) + "\n" for i in range(3))
    with TestClient(create_app(settings, encoder=Watching())) as client:
        r = client.post(
            "/admin/reindex",
            headers={"Authorization": f"Bearer {'t' * 32}"},
            files={"catalog": ("books.jsonl", body.encode(), "application/x-ndjson")},
        )
        assert r.status_code == 202, r.text
        job = r.json()["id"]
        deadline = time.monotonic() + 60
        while (state := client.get(f"/admin/jobs/{job}", headers=r.request.headers).json())[
            "state"
        ] in ("queued", "running") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert state["state"] == "succeeded", state
    assert seen and all(listing == [] for listing in seen), seen
    assert _uploads_left(spool) == []
