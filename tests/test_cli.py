"""The `attend` command in-process: exit codes, messages, and what it leaves in the database."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import inspect

from conftest import write_jsonl
from indexer import db
from indexer.generations import writer_lock
from service.cli import main

GOOD = {"id": "a", "title": "Dune", "description": "Desert planet.", "year": 1965}


@pytest.fixture
def db_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    monkeypatch.setenv("ATTEND_DATABASE_URL", url)
    return url


def _tables(url: str) -> set[str]:
    engine = db.create_db_engine(url)
    try:
        return set(inspect(engine).get_table_names())
    finally:
        engine.dispose()


@pytest.mark.model
def test_index_refuses_a_bad_catalog_and_writes_nothing(
    db_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_jsonl(tmp_path / "bad.jsonl", [GOOD, {"id": "b"}, {"id": "a", "title": "Again"}])
    assert main(["index", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path}:2: missing 'title'" in err
    assert f"{path}:3: duplicate id 'a' (first on line 1)" in err
    assert "nothing was written" in err
    assert "book_versions" not in _tables(db_url)

    assert main(["index", str(path), "--skip-invalid"]) == 0
    out = capsys.readouterr()
    assert "1 books: 1 added, 0 updated, 0 unchanged, 0 removed, 2 rejected" in out.out
    assert "generation 1 active" in out.out
    assert f"rejected {path}:2: missing 'title'" in out.err

    engine = db.create_db_engine(db_url)
    try:
        with writer_lock(engine):  # another writer holds the database
            assert main(["delete", "a"]) == 3
            assert "another indexer is writing to" in capsys.readouterr().err
    finally:
        engine.dispose()
    assert main(["delete", "a", "zz"]) == 1
    out = capsys.readouterr()
    assert out.out == "removed 1 book(s); generation 2 active\n"
    assert out.err == "attend delete: no book with id 'zz' in the active generation\n"


def test_index_names_an_unknown_format(
    db_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "books.txt"
    path.write_text("id,title\n")
    assert main(["index", str(path)]) == 2
    assert "unknown catalog format '.txt'" in capsys.readouterr().err


def test_db_upgrade_current_and_downgrade(db_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    head = db.head_revision()
    assert main(["db", "current"]) == 0
    assert capsys.readouterr().out == f"revision None (head {head})\n"
    assert main(["db", "upgrade"]) == 0
    assert capsys.readouterr().out == f"revision {head} (head {head})\n"
    assert {"generations", "book_versions", "vectors", "index_metadata"} <= _tables(db_url)
    assert main(["db", "downgrade", "base"]) == 0
    assert "book_versions" not in _tables(db_url)


def test_serve_and_search_refuse_an_unmigrated_database(
    db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["serve", "--port", "1"]) == 2
    assert "run `attend db upgrade`" in capsys.readouterr().err


@pytest.mark.model
def test_search_on_an_empty_index_says_what_to_do(
    db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["db", "upgrade"]) == 0
    assert main(["search", "anything"]) == 2
    assert "run `attend index CATALOG` first" in capsys.readouterr().err


def test_search_validates_its_options(db_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["search", "x", "-k", "0"]) == 2
    assert "greater than or equal to 1" in capsys.readouterr().err
