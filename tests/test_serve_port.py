"""`attend serve` and `attend demo` on a port already in use (issue 24): they stop before the
model and the index load (which took 3-54 s), say in one sentence to choose another port with
--port or ATTEND_PORT, and exit with status 2, no traceback. Real commands in subprocesses,
against a real listening socket."""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import ATTEND
from indexer import db


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A loopback port something listens on for the test."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield int(s.getsockname()[1])


def _attend(argv: list[str], folder: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ATTEND_DATABASE_URL": f"sqlite:///{folder / 'attend.db'}"}
    return subprocess.run(
        [ATTEND, *argv],
        env=env,
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _migrated(folder: Path) -> None:
    """An empty index at the schema's head in `folder`/attend.db."""
    engine = db.create_db_engine(f"sqlite:///{folder / 'attend.db'}")
    db.upgrade(engine)
    engine.dispose()


def _says_what_to_do(stderr: str, command: str, port: int) -> None:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith(f"attend {command}: port {port} is already in use")
    assert "--port N" in lines[0] and "ATTEND_PORT" in lines[0]
    assert "Traceback" not in stderr


def test_serve_on_a_taken_port_stops_before_the_model_loads(
    taken_port: int, tmp_path: Path
) -> None:
    # a migrated, empty database: without the check, serve loaded the model (its log line,
    # at -v) and then failed on the port or the empty index, exit 3
    _migrated(tmp_path)
    done = _attend(["serve", "-v", "--port", str(taken_port)], tmp_path)
    assert done.returncode == 2, done.stderr
    assert "loaded encoder" not in done.stderr
    error = [line for line in done.stderr.splitlines() if line.startswith("attend serve:")]
    _says_what_to_do("\n".join(error), "serve", taken_port)


def test_serve_names_the_port_from_attend_port(
    taken_port: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _migrated(tmp_path)
    monkeypatch.setenv("ATTEND_PORT", str(taken_port))
    done = _attend(["serve"], tmp_path)
    assert done.returncode == 2
    _says_what_to_do(done.stderr, "serve", taken_port)


def test_demo_on_a_taken_port_stops_before_it_indexes(taken_port: int, tmp_path: Path) -> None:
    done = _attend(["demo", "--port", str(taken_port)], tmp_path)
    assert done.returncode == 2
    _says_what_to_do(done.stderr, "demo", taken_port)
    assert not (tmp_path / "attend.db").exists()  # nothing indexed, no file left


def test_serve_on_a_host_that_is_not_this_machine_says_so(tmp_path: Path) -> None:
    _migrated(tmp_path)
    done = _attend(["serve", "--host", "192.0.2.1", "--port", "8000"], tmp_path)  # TEST-NET-1
    assert done.returncode == 2
    assert done.stderr.startswith("attend serve: cannot listen on 192.0.2.1:8000: 192.0.2.1 is")
    assert "--host or ATTEND_HOST" in done.stderr
