"""`attend search` beside a running `attend serve` (issue 24): it asks the server when that
serves the very database the command was pointed at (same index id, same active generation),
and loads the model itself only when no server does, saying which at -v. Real commands in
subprocesses, the real model (its torch backend, so no test waits for the ONNX export), a real
server on a loopback port."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from conftest import ATTEND, attend_index, free_port, write_jsonl
from service.commands.remote_search import IndexIdentity, _not_the_same, server_url

pytestmark = pytest.mark.model

BOOKS = [
    {"id": "dune", "title": "Dune", "description": "A desert planet, its spice, and its worms."},
    {"id": "neuro", "title": "Neuromancer", "description": "A washed-up hacker in cyberspace."},
    {"id": "hobbit", "title": "The Hobbit", "description": "A hobbit goes after a dragon's gold."},
    {"id": "emma", "title": "Emma", "description": "A matchmaker in a country village."},
]
ASKED = "asked the server at"
LOADED = "loaded encoder"  # models.encoder's line once the model is loaded in the command


@dataclass(frozen=True)
class Server:
    folder: Path
    port: int
    env: dict[str, str]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """`attend serve` over BOOKS in a SQLite file, and the environment that points `attend
    search` at that database and at the server's port."""
    folder = tmp_path_factory.mktemp("cli-server")
    port = free_port()
    env = {
        **os.environ,
        "ATTEND_DATABASE_URL": f"sqlite:///{folder / 'attend.db'}",
        "ATTEND_PORT": str(port),
        "ATTEND_ENCODER_BACKEND": "torch",
        "ATTEND_GENERATION_POLL_S": "0",
        "HF_HUB_OFFLINE": "1",
    }
    attend_index(write_jsonl(folder / "books.jsonl", BOOKS), env, folder)
    proc = subprocess.Popen(
        [ATTEND, "serve"], env=env, cwd=folder, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + 180
        while True:
            assert proc.poll() is None, "attend serve exited during start-up"
            assert time.monotonic() < deadline, "attend serve did not become ready"
            try:
                if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.3)
        yield Server(folder, port, env)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


def _search(
    argv: list[str], env: dict[str, str], cwd: Path, **more_env: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [ATTEND, "search", "-v", *argv],
        env={**env, **more_env},
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _titles(table: str) -> list[str]:
    """The titles of `attend search`'s table, best first."""
    rows = table.splitlines()[2:]
    return [row.split(maxsplit=3)[3].rsplit(" (", 1)[0] for row in rows]


def test_search_asks_the_server_of_its_database_and_loads_no_model(server: Server) -> None:
    done = _search(["desert planet spice", "-k", "2"], server.env, server.folder)
    assert done.returncode == 0, done.stderr
    assert f"{ASKED} {server.url} (generation 1): no model loaded here" in done.stderr
    assert LOADED not in done.stderr
    assert _titles(done.stdout)[0] == "Dune"

    here = _search(["desert planet spice", "-k", "2", "--here"], server.env, server.folder)
    assert here.returncode == 0, here.stderr
    assert LOADED in here.stderr and ASKED not in here.stderr
    assert _titles(here.stdout) == _titles(done.stdout)

    as_json = _search(["hacker", "--json", "-k", "1"], server.env, server.folder)
    response = json.loads(as_json.stdout)
    assert response["generation"] == 1 and response["results"][0]["id"] == "neuro"


def test_the_servers_refusal_is_the_commands_error(server: Server) -> None:
    done = _search(["dune", "--heads", "nope:1"], server.env, server.folder)
    assert done.returncode == 2
    assert ASKED not in done.stderr and LOADED not in done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith("attend search: heads: ")
    assert "nope" in done.stderr and "Traceback" not in done.stderr


def test_a_server_on_another_database_is_not_asked(server: Server, tmp_path: Path) -> None:
    """The same books in another database (a copy given another index id, as a re-created
    database gets): the server is not its server, so the command searches here."""
    other = tmp_path / "other.db"
    with sqlite3.connect(server.folder / "attend.db") as source, sqlite3.connect(other) as copy:
        source.backup(copy)  # with what the WAL holds
        copy.execute("UPDATE index_metadata SET value = '\"another\"' WHERE key = 'index_id'")
    env = {**server.env, "ATTEND_DATABASE_URL": f"sqlite:///{other}"}
    done = _search(["desert planet spice", "-k", "1"], env, tmp_path)
    assert done.returncode == 0, done.stderr
    assert f"the server at {server.url} serves another database" in done.stderr
    assert ASKED not in done.stderr and LOADED in done.stderr
    assert _titles(done.stdout) == ["Dune"]

    # asked explicitly for that server and that database: an error, not the wrong answer
    explicit = _search(
        ["dune", "--url", server.url, "--database-url", f"sqlite:///{other}"], env, tmp_path
    )
    assert explicit.returncode == 2
    assert explicit.stderr.strip().endswith("leave out --url to search this database here")
    assert "serves another database" in explicit.stderr and LOADED not in explicit.stderr


def test_url_asks_that_server_whatever_the_working_folder(server: Server, tmp_path: Path) -> None:
    env = {k: v for k, v in server.env.items() if k not in ("ATTEND_DATABASE_URL", "ATTEND_PORT")}
    done = _search(["hobbit dragon", "-k", "1", "--url", server.url + "/"], env, tmp_path)
    assert done.returncode == 0, done.stderr
    assert ASKED in done.stderr and _titles(done.stdout) == ["The Hobbit"]
    assert not (tmp_path / "attend.db").exists()


def test_url_where_nothing_answers_is_an_error(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    done = _search(["dune", "--url", url], dict(os.environ), tmp_path)
    assert done.returncode == 2
    assert (
        done.stderr.strip()
        .splitlines()[-1]
        .startswith(f"attend search: no Attend server answers at {url} (")
    )
    assert "attend serve" in done.stderr


def test_without_a_server_it_searches_here_and_says_why_in_one_line(
    server: Server, tmp_path: Path
) -> None:
    """A copy of the database (its index id too) where no server's record is: no server."""
    copy = tmp_path / "attend.db"
    with sqlite3.connect(server.folder / "attend.db") as source, sqlite3.connect(copy) as into:
        source.backup(into)
    env = {**server.env, "ATTEND_DATABASE_URL": f"sqlite:///{copy}", "ATTEND_PORT": "1"}
    done = subprocess.run(
        [ATTEND, "search", "dune"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines() == [
        "attend search: no server answers at http://127.0.0.1:1 (Connection refused): searching "
        "here, loading the model and the index (`attend serve` of this database answers in "
        "about a second)"
    ]
    assert _titles(done.stdout)[0] == "Dune"


def test_search_finds_the_server_its_database_recorded_whatever_the_port(
    server: Server,
) -> None:
    """`attend serve` records where it listens beside the database: a search with ATTEND_PORT
    unset (8000) or wrong still asks it (issue 33: 9.3 s here against 1.7 s there)."""
    record = json.loads((server.folder / "attend.db.server").read_text(encoding="utf-8"))
    assert record["url"] == server.url
    unset = {k: v for k, v in server.env.items() if k != "ATTEND_PORT"}
    for env in (unset, {**unset, "ATTEND_PORT": str(free_port())}):
        done = _search(["desert planet spice", "-k", "1"], env, server.folder)
        assert done.returncode == 0, done.stderr
        assert f"{ASKED} {server.url} (generation 1)" in done.stderr
        assert LOADED not in done.stderr and _titles(done.stdout) == ["Dune"]


def test_a_server_behind_on_generations_or_on_another_model_is_not_asked() -> None:
    local = IndexIdentity("id-1", 3)
    same = {"status": "ok", "index_id": "id-1", "generation": 3, "model": "m"}
    assert _not_the_same("U", 200, same, local, "m") is None
    behind = _not_the_same("U", 200, {**same, "generation": 2}, local, "m")
    assert behind is not None and "serves generation 2, the database's active one is 3" in behind
    other_model = _not_the_same("U", 200, same, local, "other")
    assert other_model is not None and "embeds with m, not other" in other_model
    assert _not_the_same("U", 200, {**same, "index_id": None}, local, "m") is not None
    assert _not_the_same("U", 503, {"detail": "loading"}, local, "m") is not None


@pytest.mark.parametrize(
    ("host", "url"),
    [
        ("127.0.0.1", "http://127.0.0.1:8000"),
        ("0.0.0.0", "http://127.0.0.1:8000"),
        ("::", "http://[::1]:8000"),
        ("localhost", "http://localhost:8000"),
    ],
)
def test_the_server_is_looked_for_where_serve_listens(host: str, url: str) -> None:
    assert server_url(host, 8000) == url
