"""A database that is down or whose disk is full, told in one sentence with no driver, SQL, path,
host or port (issue 32, finding 3): /readyz's 503, an admin job's `error`, and `attend`'s line.

Before: /readyz answered `the database does not answer (OperationalError: (psycopg.
OperationalError) connection failed: connection to server at "127.0.0.1", port 1 failed …)` to
any client, a job's error carried `(sqlite3.OperationalError) database or disk is full … [SQL:
INSERT …] (Background on this error at: …)`, and `attend` said a full disk was a database it
could not reach. The full text is logged under the reference the sentence names.

A full disk is a real one: a tmpfs of a few hundred KiB, filled (mounting needs root, which
.ci/run has); a database that is down is a PostgreSQL URL on a port nothing listens on.
"""

from __future__ import annotations

import errno
import logging
import os
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, event, text
from sqlalchemy.exc import OperationalError

from conftest import ATTEND, FakeEncoder, free_port, index_books, write_jsonl
from indexer import db
from service.api.main import create_app
from service.config.settings import ServiceSettings
from service.engine.database_errors import describe

TOKEN = "an-admin-token-of-some-length"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
DOWN = "the database does not answer: check that it runs and ATTEND_DATABASE_URL"
REFERENCE = re.compile(r" \(log reference ([0-9a-f]{12})\)$")
# what a driver's message carries, and a client's sentence must not
LEAKS = ("psycopg", "sqlite3", "OperationalError", "SQL", "127.0.0.1", "port", "Background")
BOOKS: list[dict[str, object]] = [
    {"id": "dune", "title": "Dune", "description": "desert planet spice"},
    {"id": "sea", "title": "The Old Man and the Sea", "description": "a fisherman at sea"},
]


def _no_leak(sentence: str) -> None:
    for leak in LEAKS:
        assert leak not in sentence, (leak, sentence)


@pytest.fixture
def full_disk(tmp_path: Path) -> Iterator[Path]:
    """A folder on a tmpfs of its own, 512 KiB; `_fill` fills it."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root (.ci/run runs as root)")
    folder = tmp_path / "disk"
    folder.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(folder)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def _fill(folder: Path) -> None:
    fd = os.open(folder / "filler", os.O_WRONLY | os.O_CREAT)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError as e:
        assert e.errno == errno.ENOSPC
    finally:
        os.close(fd)


def test_readyz_names_a_database_that_is_down_in_one_sentence(
    demo_database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    app = create_app(ServiceSettings(database_url=demo_database_url), encoder=FakeEncoder())
    with TestClient(app) as client, caplog.at_level(logging.WARNING):
        real = app.state.engine
        port = free_port()
        app.state.engine = create_engine(f"postgresql+psycopg://nobody@127.0.0.1:{port}/attend")
        try:
            answers = [client.get("/readyz") for _ in range(3)]
        finally:
            app.state.engine.dispose()
            app.state.engine = real
    details = [a.json()["detail"] for a in answers]
    assert [a.status_code for a in answers] == [503] * 3
    found = REFERENCE.search(details[0])
    assert found and details[0][: found.start()] == DOWN, details[0]
    assert str(port) not in details[0]
    _no_leak(details[0])
    # the driver's text is in the log, once, under the reference; the probes that followed
    # within a minute give the same reference and log nothing more
    assert len(set(details)) == 1
    logged = [r.getMessage() for r in caplog.records if found[1] in r.getMessage()]
    assert len(logged) == 1 and "OperationalError" in logged[0] and str(port) in logged[0]


def test_real_driver_errors_are_described_without_their_text(tmp_path: Path) -> None:
    port = free_port()
    with pytest.raises(OperationalError) as refused:
        create_engine(f"postgresql+psycopg://nobody@127.0.0.1:{port}/attend").connect()
    assert describe(refused.value) == DOWN
    # SQLite out of room: a page limit, which SQLite reports as it does a full disk
    engine = db.create_db_engine(f"sqlite:///{tmp_path / 'small.db'}")
    event.listen(engine, "connect", lambda c, _: c.execute("PRAGMA max_page_count = 8"))
    with pytest.raises(OperationalError) as full, engine.begin() as conn:
        conn.execute(text("CREATE TABLE t (b BLOB)"))
        conn.execute(text("INSERT INTO t VALUES (zeroblob(100000))"))
    engine.dispose()
    assert "database or disk is full" in str(full.value)
    assert describe(full.value) == "the database's disk is full: free space on it, then retry"
    assert describe(psycopg.errors.DiskFull("could not extend file")) == (
        "the disk is full: free space on it, then retry"
    )
    assert describe(OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))).startswith("the disk is full")
    gone = db.DatabaseGoneError(f"the SQLite database {tmp_path}/x.db is gone (deleted)")
    assert "gone" in describe(gone) and str(tmp_path) not in describe(gone)


def _wait_job(client: TestClient, job_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        job: dict[str, Any] = client.get(f"/admin/jobs/{job_id}", headers=AUTH).json()
        if job["state"] in ("succeeded", "failed"):
            return job
        time.sleep(0.05)
    raise AssertionError(f"job {job_id} did not finish")


def test_a_reindex_job_on_a_full_disk_says_the_disk_is_full(
    full_disk: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    engine = db.create_db_engine(f"sqlite:///{full_disk / 'attend.db'}")
    db.upgrade(engine)
    url = index_books(engine, tmp_path, BOOKS)
    engine.dispose()
    more: list[dict[str, object]] = [
        {"id": f"b{i}", "title": f"Book {i}", "description": "x " * 200} for i in range(200)
    ]
    catalog = write_jsonl(tmp_path / "more.jsonl", [*BOOKS, *more])
    settings = ServiceSettings(database_url=url, device="cpu", admin_token=TOKEN)
    with TestClient(create_app(settings, encoder=FakeEncoder())) as client:
        _fill(full_disk)
        with caplog.at_level(logging.WARNING):
            r = client.post("/admin/reindex", json={"catalog": str(catalog)}, headers=AUTH)
            job = _wait_job(client, r.json()["id"])
        assert job["state"] == "failed"
        found = REFERENCE.search(job["error"])
        assert found and job["error"].startswith("the database's disk is full"), job["error"]
        _no_leak(job["error"])
        logged = [r.getMessage() for r in caplog.records if found[1] in r.getMessage()]
        assert len(logged) == 1 and "database or disk is full" in logged[0]
        # the served generation is intact
        assert client.get("/search", params={"q": "fisherman sea"}).json()["results"][0]["id"] == (
            "sea"
        )


def test_attend_on_a_full_disk_says_the_disk_is_full(full_disk: Path) -> None:
    _fill(full_disk)
    url = f"sqlite:///{full_disk / 'attend.db'}"
    done = subprocess.run(
        [ATTEND, "db", "upgrade"],
        env={**os.environ, "ATTEND_DATABASE_URL": url},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        f"attend db: the disk of the database at {url} is full: free space on it, then run the "
        "command again (an index run resumes where it stopped)"
    ]
