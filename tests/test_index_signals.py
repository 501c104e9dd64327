"""Ctrl-C (SIGINT) and SIGTERM on a real `attend index` mid-embedding (issue 32, findings 3, 4
and 5): one line on stderr, no traceback, the SQLite writer's lock file gone, the generation
left building, and the same command resumes it, its summary counting the whole generation.

Before: SIGINT printed the model's traceback, SIGTERM left DATABASE.index-lock behind, and a
resumed run's summary counted only what it wrote itself (the books the first run had written
came out "unchanged", against the generation row's "added").
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from conftest import ATTEND, write_jsonl

pytestmark = pytest.mark.model

BOOKS = 96
BATCH = 8  # books per transaction: the first is written long before the last is embedded
PROGRESS = re.compile(r"attend index: generation \d+: \d+/\d+ books")


def _catalog(folder: Path) -> Path:
    words = ["river", "castle", "engine", "garden", "comet", "harbor", "violin", "desert"]
    books: list[dict[str, object]] = [
        {
            "id": f"book-{i}",
            "title": f"The {words[i % 8]} of {words[(i // 8) % 8]} {i}",
            "description": f"A long tale of a {words[(i * 3) % 8]} and a {words[(i * 5) % 8]}. "
            * 6,
        }
        for i in range(BOOKS)
    ]
    return write_jsonl(folder / "books.jsonl", books)


def _query(db: Path, sql: str) -> list[tuple[object, ...]]:
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
        return conn.execute(sql).fetchall()


def _written(db: Path) -> int:
    """Vectors committed so far (0 before the schema exists)."""
    try:
        (count,) = _query(db, "SELECT count(*) FROM vectors")[0]
        return int(str(count))
    except sqlite3.Error:
        return 0


def _interrupt(tmp_path: Path, signum: signal.Signals) -> tuple[Path, Path, dict[str, str]]:
    """`attend index` of the catalog, sent `signum` once its first batch is written; checks
    what it left. The database, the catalog and the environment, to run it again."""
    db, catalog = tmp_path / "attend.db", _catalog(tmp_path)
    env = {
        **os.environ,
        "ATTEND_DATABASE_URL": f"sqlite:///{db}",
        "ATTEND_BATCH_SIZE": str(BATCH),
        "ATTEND_ENCODE_BATCH_SIZE": str(BATCH),
        "HF_HUB_OFFLINE": "1",
    }
    proc = subprocess.Popen(
        [ATTEND, "index", str(catalog)],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while _written(db) == 0:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "no batch written in 120 s"
            time.sleep(0.05)
        proc.send_signal(signum)
        _out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signum, err
    # one line, besides the progress lines a run writes every 5 s without a terminal
    said = [line for line in err.splitlines() if not PROGRESS.match(line)]
    assert said == [
        f"attend index: stopped by {signum.name}; the batches written are kept, and the same "
        "command resumes the run"
    ], err
    assert not Path(f"{db}.index-lock").exists()
    written = _written(db)
    assert 0 < written < 2 * BOOKS  # stopped mid-run: some texts embedded, not all
    assert _query(db, "SELECT id, state FROM generations") == [(1, "building")]
    return db, catalog, env


def test_sigterm_ends_an_index_run_in_one_line_and_removes_its_lock(tmp_path: Path) -> None:
    _interrupt(tmp_path, signal.SIGTERM)


def test_ctrl_c_ends_an_index_run_that_the_same_command_resumes(tmp_path: Path) -> None:
    db, catalog, env = _interrupt(tmp_path, signal.SIGINT)
    done = subprocess.run(
        [ATTEND, "index", str(catalog)],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    (summary,) = [line for line in done.stdout.splitlines() if line.startswith(f"{BOOKS} books:")]
    assert "(resumed an interrupted run)" in summary
    # the generation's counts, as its row holds them: every book added by this generation
    ((books, added, updated, removed),) = _query(
        db, "SELECT books, added, updated, removed FROM generations WHERE state = 'active'"
    )
    assert (books, added, updated, removed) == (BOOKS, BOOKS, 0, 0)
    assert summary.startswith(f"{BOOKS} books: {BOOKS} added, 0 updated, 0 unchanged, 0 removed")
    assert not Path(f"{db}.index-lock").exists()
