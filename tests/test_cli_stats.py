"""Issue 33: `attend stats` says what the index holds in a few lines; `attend index` ends with
the next step; without a terminal, `attend index` writes a progress line every few seconds.
In-process on SQLite and PostgreSQL with the fake encoder (the model is not the point)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from conftest import FakeEncoder
from service.commands.cli import main
from service.commands.command_database import shown_url

CATALOG = (
    "title,author,year,description,language\n"
    "Dune,Frank Herbert,1965,A desert planet.,en\n"
    'Good Omens,"Neil Gaiman; Terry Pratchett",1990,An angel and a demon.,en\n'
    "The Hobbit,J. R. R. Tolkien,,,en\n"
    "Le Petit Prince,Antoine de Saint-Exupéry,1943,Un prince et une rose.,fr\n"
)


@pytest.fixture
def index_url(database_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("ATTEND_DATABASE_URL", database_url)
    monkeypatch.setenv("ATTEND_PORT", "8123")
    monkeypatch.setattr("service.engine.startup.build_encoder", lambda settings: FakeEncoder())
    monkeypatch.setattr(
        "service.commands.index_commands.index_encoder", lambda settings: FakeEncoder()
    )
    return database_url


def test_stats_says_what_the_index_holds(
    index_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "books.csv"
    path.write_text(CATALOG, encoding="utf-8")
    assert main(["index", str(path)]) == 0
    assert capsys.readouterr().out.endswith(
        "\nnext: attend serve, then open http://127.0.0.1:8123\n"
    )
    path.write_text(CATALOG.replace("A desert planet.", "Spice."), encoding="utf-8")
    assert main(["index", str(path)]) == 0
    capsys.readouterr()
    assert main(["stats"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"index {shown_url(index_url)}, model fake-hashing-64 (d=64)"
    assert re.fullmatch(
        rf"generation 2 active \(\d{{4}}-\d\d-\d\d \d\d:\d\d UTC\) from {re.escape(str(path))}; "
        r"generations: 1 active, 1 retired",
        lines[1],
    ), lines[1]
    assert lines[2:] == [
        "4 books: 3 with a description, 4 with authors (5 names), 3 with a year (1943-1990); "
        "languages en 3, fr 1",
        "embedded: title and description keys for every book (1 without a description: their "
        "title)",
        "boilerplate: no sentence recurs across 3 authors' descriptions",
        "next: attend serve, then open http://127.0.0.1:8123",
    ]
    # three authors' descriptions share a sentence: the next generation's boilerplate
    path.write_text(CATALOG.replace(".,", ". Reprint.,"), encoding="utf-8")
    assert main(["index", str(path)]) == 0
    capsys.readouterr()
    assert main(["stats"]) == 0
    assert capsys.readouterr().out.splitlines()[-2] == (
        "boilerplate: 1 sentences recur across 3 or more authors' descriptions, left out of the "
        "lexical heads: 'reprint' (3)"
    )


def test_stats_of_no_index_says_what_to_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("ATTEND_DATABASE_URL", f"sqlite:///{tmp_path / 'none.db'}")
    assert main(["stats"]) == 2
    assert "no index at" in capsys.readouterr().err
    assert not (tmp_path / "none.db").exists()


def test_without_a_terminal_index_writes_progress_lines(
    index_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Every batch here (the interval set to 0, so the test waits for no clock); a run shorter
    than the interval writes none."""
    path = tmp_path / "books.csv"
    path.write_text(CATALOG, encoding="utf-8")
    monkeypatch.setattr("service.commands.index_progress.LINE_EVERY_S", 0.0)
    assert main(["index", str(path), "--batch-size", "2"]) == 0
    lines = [line for line in capsys.readouterr().err.splitlines() if "books/s" in line]
    assert [line.split(" (")[0] for line in lines] == [
        "attend index: generation 1: 2/4 books",
        "attend index: generation 1: 4/4 books",
    ], lines
    # 4 titles and 3 descriptions: The Hobbit's description key is its title, embedded once
    assert lines[-1].endswith("books/s), 7 texts embedded")
    monkeypatch.setattr("service.commands.index_progress.LINE_EVERY_S", 3600.0)
    path.write_text(CATALOG.replace("Dune", "Dune Messiah"), encoding="utf-8")
    assert main(["index", str(path), "--batch-size", "2"]) == 0
    assert "books/s" not in capsys.readouterr().err
