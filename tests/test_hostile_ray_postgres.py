"""`attend serve --engine ray --shards 2` on PostgreSQL under the database's faults (issue 32,
finding 6; the local engine's were tried in issue 32 and survived): its LISTEN connection
killed, and every backend of its database killed at once (what a PostgreSQL restart does to a
client; the server itself is shared with the rest of the suite, so it is not restarted). Through
each, searches keep their answers from the generation served, /readyz comes back, and a
re-index while the shards serve still reaches them by notification (polling is set to an hour,
so nothing else could explain it), every answer on the way from one whole generation.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import make_url

from conftest import ATTEND, attend_index, free_port, new_database
from indexer.data import DEMO_CATALOG

pytest.importorskip("ray", reason="the ray engine is an extra: pip install 'attend[ray]'")
PG_URL = os.environ.get("ATTEND_TEST_POSTGRES_URL")
pytestmark = [
    pytest.mark.model,
    pytest.mark.postgres,
    pytest.mark.skipif(not PG_URL, reason="ATTEND_TEST_POSTGRES_URL is not set"),
]
QUERY = "/search?q=quantum%20gardening%20for%20cats&k=3"
LISTENS = "AND query ILIKE 'LISTEN%'"  # the listener's backend (its last query)


@dataclass
class Served:
    url: str  # the database
    base: str  # the service
    env: dict[str, str]
    folder: Path
    rows: list[str]  # the catalog indexed last, a JSON line each


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    folder = tmp_path_factory.mktemp("ray-pg")
    with new_database("postgresql", folder) as url:
        env = {
            **os.environ,
            "ATTEND_DATABASE_URL": url,
            "ATTEND_GENERATION_POLL_S": "3600",
            "HF_HUB_OFFLINE": "1",
        }
        attend_index(DEMO_CATALOG, env, folder)
        port = free_port()
        log = (folder / "serve.log").open("wb")
        proc = subprocess.Popen(
            [ATTEND, "serve", "--engine", "ray", "--shards", "2", "--port", str(port)],
            env=env,
            cwd=folder,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        base = f"http://127.0.0.1:{port}"
        try:
            _until(lambda: _ready(base, proc, folder), 150, "attend serve was not ready")
            _until(_listening_anew(url, set()), 30, "the service does not LISTEN")
            rows = DEMO_CATALOG.read_text(encoding="utf-8").splitlines()
            yield Served(url=url, base=base, env=env, folder=folder, rows=rows)
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            log.close()
        assert proc.returncode == 0, (folder / "serve.log").read_text()[-3000:]


def _until(ok: Callable[[], bool], seconds: float, message: str) -> float:
    """Call `ok` until it is true; the seconds it took."""
    t0 = time.monotonic()
    while not ok():
        assert time.monotonic() - t0 < seconds, message
        time.sleep(0.2)
    return time.monotonic() - t0


def _ready(base: str, proc: subprocess.Popen[bytes], folder: Path) -> bool:
    assert proc.poll() is None, (folder / "serve.log").read_text()[-3000:]
    try:
        return httpx.get(f"{base}/readyz", timeout=5).status_code == 200
    except httpx.TransportError:
        return False


def _admin() -> Engine:
    assert PG_URL
    return create_engine(PG_URL, isolation_level="AUTOCOMMIT")


def _backends(url: str, where: str) -> str:
    name = make_url(url).database
    return f"FROM pg_stat_activity WHERE datname = '{name}' AND pid <> pg_backend_pid() {where}"


def _listeners(url: str) -> set[int]:
    """The backend pids of the database's LISTEN connections."""
    engine = _admin()
    try:
        with engine.connect() as conn:
            sql = f"SELECT pid {_backends(url, LISTENS)}"
            return set(conn.execute(text(sql)).scalars())
    finally:
        engine.dispose()


def _listening_anew(url: str, killed: set[int]) -> Callable[[], bool]:
    """Whether one LISTEN connection is up, and not one of `killed` (a terminated backend
    shows in pg_stat_activity a moment longer)."""
    return lambda: len(now := _listeners(url)) == 1 and not now & killed


def _kill(url: str, where: str) -> int:
    """Terminate the database's backends that `where` picks; how many."""
    engine = _admin()
    try:
        with engine.connect() as conn:
            sql = f"SELECT count(pg_terminate_backend(pid)) {_backends(url, where)}"
            return int(conn.execute(text(sql)).scalar_one())
    finally:
        engine.dispose()


def _reindex_reaches_it(served: Served, book_id: str) -> float:
    """Add a book and re-index while searching: every answer from one whole generation; the
    seconds from the switch until the service answers from the new one."""
    new = {"id": book_id, "title": "Quantum Gardening for Cats", "description": "Cats tend qubits."}
    served.rows = [*served.rows, json.dumps(new)]
    catalog = served.folder / f"{book_id}.jsonl"
    catalog.write_text("\n".join(served.rows) + "\n", encoding="utf-8")
    with httpx.Client(base_url=served.base, timeout=30) as client:
        before = client.get(QUERY).json()
        attend_index(catalog, served.env, served.folder)

        def switched() -> bool:
            body = client.get(QUERY).json()
            ids = [h["id"] for h in body["results"]]
            assert body["catalog_size"] in (before["catalog_size"], before["catalog_size"] + 1)
            assert (book_id in ids) == (body["catalog_size"] > before["catalog_size"]), body
            return bool(body["catalog_size"] > before["catalog_size"] and ids[0] == book_id)

        return _until(switched, 20, "the service stayed on the old generation")


def test_a_reindex_while_the_shards_serve_reaches_them_whole(served: Served) -> None:
    assert _reindex_reaches_it(served, "while-serving") < 10  # pushed, not polled


def test_a_killed_listen_connection_is_replaced_and_a_reindex_still_reaches_it(
    served: Served,
) -> None:
    with httpx.Client(base_url=served.base, timeout=30) as client:
        want = client.get(QUERY).json()
        killed = _listeners(served.url)
        assert _kill(served.url, LISTENS) == len(killed) == 1
        # searches answer meanwhile, as they did, and the listener comes back by itself
        _until(_listening_anew(served.url, killed), 30, "no LISTEN again")
        assert client.get(QUERY).json() == want
    assert _reindex_reaches_it(served, "after-listen-killed") < 10  # pushed, not polled


def test_every_backend_killed_at_once_is_survived(served: Served) -> None:
    with httpx.Client(base_url=served.base, timeout=30) as client:
        want = client.get(QUERY).json()
        killed = _listeners(served.url)
        assert _kill(served.url, "") >= 2  # the pools', the listener's: a restart's effect
        for _ in range(5):
            got = client.get(QUERY)
            assert got.status_code == 200 and got.json() == want
        _until(lambda: client.get("/readyz").status_code == 200, 30, "/readyz stayed 503")
        _until(_listening_anew(served.url, killed), 30, "no LISTEN again")
    assert _reindex_reaches_it(served, "after-backends-killed") < 10
