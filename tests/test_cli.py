"""The `attend` command in-process: exit codes, messages, what it leaves in the database and
beside it, what it logs, and its help."""

from __future__ import annotations

import argparse
import json
import logging
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import inspect
from sqlalchemy.orm import Session

from conftest import ATTEND, index_books, write_jsonl
from indexer import db, store
from indexer.generations import writer_lock
from indexer.progress import ProgressSnapshot
from service.commands.cli import main
from service.commands.cli_parser import build_parser
from service.commands.index_progress import ProgressBar

GOOD = {"id": "a", "title": "Dune", "description": "Desert planet.", "year": 1965}


@pytest.fixture(autouse=True)
def _root_logger_restored() -> Iterator[None]:
    """main() points the root logger at the stderr its test captured; a later test that logs
    before calling main() (indexing with the fake encoder) must not write to that closed
    stream."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


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
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.jsonl"]  # no empty database

    assert main(["index", str(path), "--skip-invalid"]) == 0
    out = capsys.readouterr()
    assert "1 books: 1 added, 0 updated, 0 unchanged, 0 removed, 2 rejected" in out.out
    assert f"generation 1 active -> sqlite:///{tmp_path / 'cli.db'}\n" in out.out
    # quiet: the rejected rows and nothing else (no INFO lines of the model, alembic or bm25s)
    assert out.err.splitlines() == [
        f"WARNING: skipped {path}:2: missing 'title'",
        f"WARNING: skipped {path}:3: duplicate id 'a' (first on line 1)",
    ]
    assert not (tmp_path / "cli.db.index-lock").exists()

    engine = db.create_db_engine(db_url)
    try:
        with writer_lock(engine):  # another writer holds the database
            assert main(["delete", "a"]) == 3
            err = capsys.readouterr().err
            assert "another indexer is writing to this index" in err
            assert "cli.db" not in err  # no database named: an admin job shows it to a client
    finally:
        engine.dispose()
    assert main(["delete", "a"]) == 0
    assert capsys.readouterr().out == "removed 1 of 1 book(s); generation 2 active\n"
    assert not (tmp_path / "cli.db.index-lock").exists()


def test_index_if_empty_seeds_a_new_database_only(
    db_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """What docker compose's indexer runs at every `up`: the catalog is indexed into a database
    with no index yet, and a database that holds one is left as it is, without loading the
    model (which the in-process fake index here never needs)."""
    engine = db.create_db_engine(db_url)
    try:
        db.upgrade(engine)
        index_books(engine, tmp_path, [GOOD])  # an index with one generation, the fake encoder
    finally:
        engine.dispose()
    other = write_jsonl(tmp_path / "other.jsonl", [{"id": "z", "title": "Another catalog"}])
    assert main(["-v", "index", "--if-empty", str(other)]) == 0
    out = capsys.readouterr()
    assert out.out == (
        f"the index already holds generation 1: nothing indexed (--if-empty) "
        f"-> sqlite:///{tmp_path / 'cli.db'}\n"
    )
    assert "loaded encoder" not in out.err
    engine = db.create_db_engine(db_url)
    try:
        with Session(engine) as session:
            assert store.active_generation_id(session=session) == 1
            assert store.count_books(session=session) == 1
    finally:
        engine.dispose()


@pytest.mark.model
def test_a_re_index_loads_the_model_only_for_a_text_to_embed(
    db_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The real model, loaded by the first run; the second finds nothing to embed and never
    loads it (a no-op re-index of the shared catalog took 26 s, 12 of them loading it)."""
    path = write_jsonl(tmp_path / "books.jsonl", [GOOD])
    assert main(["-v", "index", str(path)]) == 0
    first = capsys.readouterr()
    assert "loaded encoder" in first.err and "2 texts embedded" in first.out

    assert main(["-v", "index", str(path)]) == 0
    again = capsys.readouterr()
    assert "loaded encoder" not in again.err
    assert "0 texts embedded" in again.out and "nothing changed" in again.out


def test_delete_removes_the_known_ids_and_names_the_unknown_ones(
    db_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    books = [GOOD, {"id": "b", "title": "Emma"}, {"id": "c", "title": "Ulysses"}]
    engine = db.create_db_engine(db_url)
    try:
        db.upgrade(engine)
        index_books(engine, tmp_path, books)  # the fake encoder: deleting needs no model
    finally:
        engine.dispose()

    # a partial success: the known ones removed and counted, the unknown named, exit 0
    assert main(["delete", "a", "zz", "b"]) == 0
    out = capsys.readouterr()
    assert out.out == "removed 2 of 3 book(s) (1 not found); generation 2 active\n"
    assert out.err == "attend delete: no book with id 'zz' in the active generation (not removed)\n"
    assert main(["delete", "a", "yy"]) == 1  # none of them in the index: nothing removed
    out = capsys.readouterr()
    assert out.out == ""
    assert out.err.splitlines() == [
        "attend delete: no book with id 'a' in the active generation (not removed)",
        "attend delete: no book with id 'yy' in the active generation (not removed)",
        "attend delete: nothing removed",
    ]
    engine = db.create_db_engine(db_url)
    try:
        with Session(engine) as session:
            assert store.count_books(session=session) == 1  # c
    finally:
        engine.dispose()
    assert not (tmp_path / "cli.db.index-lock").exists()


def test_index_names_an_unknown_format(
    db_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "books.xls"
    path.write_text("id,title\n")
    assert main(["index", str(path)]) == 2
    assert "unknown catalog format '.xls'" in capsys.readouterr().err
    path = tmp_path / "books.xml"  # a known name, of other bytes
    path.write_text("id,title\n")
    assert main(["index", str(path)]) == 2
    assert f"{path}: not XML (it starts with 'i'): a .xml catalog is read as MARCXML" in (
        capsys.readouterr().err
    )


def test_db_upgrade_current_and_downgrade(db_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    head = db.head_revision()
    assert main(["db", "current"]) == 0
    file = db_url.removeprefix("sqlite:///")
    assert capsys.readouterr().out == f"revision None (head {head}); no file {file}\n"
    assert main(["db", "upgrade"]) == 0
    assert capsys.readouterr().out == f"revision {head} (head {head})\n"
    assert {"generations", "book_versions", "vectors", "index_metadata"} <= _tables(db_url)
    assert main(["db", "downgrade", "base"]) == 0
    assert "book_versions" not in _tables(db_url)


@pytest.mark.parametrize("command", [["search", "anything"], ["serve", "--port", "1"]])
def test_a_missing_index_leads_to_attend_index_and_leaves_no_file(
    command: list[str], db_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(command) == 2
    err = capsys.readouterr().err
    assert f"no index at {db_url}" in err
    assert "`attend index CATALOG`" in err
    assert "attend db upgrade" not in err
    assert list(tmp_path.iterdir()) == []

    assert main(["db", "current"]) == 0
    assert capsys.readouterr().out.startswith("revision None")
    assert list(tmp_path.iterdir()) == []


def test_an_older_schema_leads_to_attend_db_upgrade(
    db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["db", "upgrade", "0001"]) == 0
    capsys.readouterr()
    assert main(["serve", "--port", "1"]) == 2
    assert "is at revision 0001" in capsys.readouterr().err
    assert main(["search", "x"]) == 2
    assert "run `attend db upgrade`" in capsys.readouterr().err


def test_database_url_option_wins_over_the_environment(
    db_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other = f"sqlite:///{tmp_path / 'other.db'}"
    assert main(["db", "upgrade", "--database-url", other]) == 0
    assert "book_versions" in _tables(other)
    assert not (tmp_path / "cli.db").exists()  # ATTEND_DATABASE_URL's file
    assert main(["db", "current", "--database-url", other]) == 0
    head = db.head_revision()
    assert capsys.readouterr().out.endswith(f"revision {head} (head {head})\n")


def test_quiet_by_default_info_with_v(db_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["db", "upgrade"]) == 0
    assert capsys.readouterr().err == ""
    assert main(["db", "downgrade", "base", "-v"]) == 0
    err = capsys.readouterr().err
    assert "Running downgrade 0002 -> 0001" in err
    # alembic's per-connection chatter stays out at INFO
    assert "Context impl" not in err
    assert "Will assume" not in err


def test_every_option_has_help_text() -> None:
    def options(parser: argparse.ArgumentParser, name: str) -> list[tuple[str, object]]:
        found = []
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub, subparser in action.choices.items():
                    found += options(subparser, f"{name} {sub}")
            else:
                found.append((f"{name} {'/'.join(action.option_strings) or action.dest}", action))
        return found

    found = options(build_parser(), "attend")
    assert len(found) > 40
    missing = [name for name, action in found if not getattr(action, "help", None)]
    assert missing == []
    assert all(
        any(o.option_strings == ["--database-url"] for o in sub._actions)
        for sub in build_parser()._subparsers._group_actions[0].choices.values()  # type: ignore[union-attr]
    )


def test_serve_and_demo_say_what_v_changes_for_them() -> None:
    """Issue 24: serve's -v help said "by default only warnings and the result", though serve
    logs its start-up and every request at INFO (ATTEND_LOG_LEVEL) without it."""
    helps = {}
    for name, sub in build_parser()._subparsers._group_actions[0].choices.items():  # type: ignore[union-attr]
        (verbose,) = [a for a in sub._actions if "-v" in a.option_strings]
        helps[name] = verbose.help or ""
    for name in ("serve", "demo"):
        assert "only warnings" not in helps[name]
        assert "ATTEND_LOG_LEVEL (default INFO: its start-up and every request)" in helps[name]
    assert "-vv: log DEBUG lines too" in helps["serve"]
    assert "by default only warnings and the result" in helps["search"]


def test_help_loads_no_model_stack() -> None:
    """`attend --help` (and a mistyped option) answer before torch, SQLAlchemy or FastAPI load:
    they took 1.4 s of its 1.9 s."""
    code = (
        "import sys\n"
        "import service.commands.cli\n"
        "from service.commands.cli_parser import build_parser\n"
        "for argv in (['--help'], ['index', '--help'], ['search', '--help']):\n"
        "    try:\n"
        "        build_parser().parse_args(argv)\n"
        "    except SystemExit:\n"
        "        pass\n"
        "heavy = sorted({m.split('.')[0] for m in sys.modules} & "
        "{'torch', 'numpy', 'sqlalchemy', 'fastapi', 'pydantic', 'sentence_transformers'})\n"
        "print(heavy)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.splitlines()[-1] == "[]"
    shown = subprocess.run(
        [ATTEND, "index", "--help"], capture_output=True, text=True, timeout=60, check=True
    )
    assert "sqlite:///attend.db" in shown.stdout  # says where it writes
    assert "--database-url" in shown.stdout


def test_progress_bar_shows_the_embedded_count_at_100_percent(
    capsys: pytest.CaptureFixture[str],
) -> None:
    bar = ProgressBar()
    bar.update(ProgressSnapshot(state="indexing", total=180, done=0, embedded=0, generation=1))
    time.sleep(0.2)  # past tqdm's minimum interval between redraws
    bar.update(ProgressSnapshot(state="indexing", total=180, done=180, embedded=360, generation=1))
    bar.close()
    frames = capsys.readouterr().err.replace("\r", "\n").splitlines()
    done = [f for f in frames if "180/180" in f]
    assert done
    assert all("embedded=360" in f for f in done)


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


@pytest.mark.model
def test_search_shows_heads_and_match_strength(
    db_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    books = [
        GOOD,
        {"id": "b", "title": "Neuromancer", "description": "A washed-up hacker in cyberspace."},
        {"id": "c", "title": "The Hobbit", "description": "A hobbit goes after a dragon's gold."},
    ]
    assert main(["index", str(write_jsonl(tmp_path / "books.jsonl", books))]) == 0
    capsys.readouterr()

    assert main(["search", "hacker in cyberspace", "--heads", "description:1", "-k", "2"]) == 0
    out = capsys.readouterr()
    # on stderr only why it searches here (no server), and the warning that the model is being
    # exported, the first time
    (why,) = [line for line in out.err.splitlines() if " to ONNX into " not in line]
    assert why.startswith("attend search: no server answers at http://127.0.0.1:")
    assert why.endswith(
        ": searching here, loading the model and the index (`attend serve` of this database "
        "answers in about a second)"
    )
    lines = out.out.splitlines()
    assert lines[0].startswith("'hacker in cyberspace': 3 of 3 books matched; heads description:1;")
    strength = float(lines[0].rsplit("match strength ", 1)[1])
    assert strength >= 0.55
    assert lines[1].split() == ["rank", "weight", "score", "title"]
    assert lines[2].split()[0] == "1"
    assert "Neuromancer" in lines[2]
    assert len(lines) == 4

    assert main(["search", "qwertyuiop asdfghjkl", "--json"]) == 0
    response = json.loads(capsys.readouterr().out)
    assert main(["search", "qwertyuiop asdfghjkl"]) == 0
    table = capsys.readouterr().out
    assert f"match strength {response['match_strength']:.2f}" in table
    assert ("no strong match:" in table) == response["no_strong_match"]

    assert main(["search", "x", "--heads", "nope:1"]) == 2
    assert "nope" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "count"),
    [
        (["db", "current"], 0),
        (["-v", "db", "current"], 1),
        (["db", "current", "-v"], 1),
        (["-vv", "search", "x"], 2),
        (["search", "x", "-vv"], 2),
    ],
)
def test_verbose_counts_before_or_after_the_command(argv: list[str], count: int) -> None:
    assert build_parser().parse_args(argv).verbose == count
