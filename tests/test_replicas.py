"""Two real `attend serve` replicas on one PostgreSQL: a re-index between queries reaches both
promptly through LISTEN/NOTIFY (their polling is set to an hour, so nothing else could explain
it), and every answer along the way comes from one whole generation, never a mix."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from conftest import ATTEND, attend_index, free_port, new_database
from indexer.data import DEMO_CATALOG

PG_URL = os.environ.get("ATTEND_TEST_POSTGRES_URL")
pytestmark = [
    pytest.mark.model,
    pytest.mark.postgres,
    pytest.mark.skipif(not PG_URL, reason="ATTEND_TEST_POSTGRES_URL is not set"),
]
NEW = {"id": "new-book", "title": "Quantum Gardening for Cats", "description": "Cats tend qubits."}
QUERY = "/search?q=quantum%20gardening%20for%20cats&k=3"


@pytest.fixture
def pg_database(tmp_path: Path) -> Iterator[str]:
    with new_database("postgresql", tmp_path) as url:
        yield url


def _ready(base: str, proc: subprocess.Popen[bytes], deadline: float) -> None:
    while time.monotonic() < deadline:
        assert proc.poll() is None, "a replica exited during start-up"
        try:
            if httpx.get(f"{base}/readyz", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.5)
    raise AssertionError(f"{base} did not become ready")


def test_a_reindex_reaches_both_replicas_whole(pg_database: str, tmp_path: Path) -> None:
    env = {
        **os.environ,
        "ATTEND_DATABASE_URL": pg_database,
        "ATTEND_GENERATION_POLL_S": "3600",
        "HF_HUB_OFFLINE": "1",
    }

    attend_index(DEMO_CATALOG, env, tmp_path)
    ports = [free_port(), free_port()]
    replicas = [
        subprocess.Popen(
            [ATTEND, "serve", "--port", str(p)],
            env=env,
            cwd=tmp_path,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for p in ports
    ]
    bases = [f"http://127.0.0.1:{p}" for p in ports]
    try:
        deadline = time.monotonic() + 120
        for base, proc in zip(bases, replicas, strict=True):
            _ready(base, proc, deadline)
        for base in bases:
            body = httpx.get(base + QUERY, timeout=30).json()
            assert body["catalog_size"] == 180
            assert NEW["id"] not in [h["id"] for h in body["results"]]
        time.sleep(2)  # both replicas are LISTENing by now (they start before /readyz)

        rows = DEMO_CATALOG.read_text(encoding="utf-8").splitlines()
        changed = tmp_path / "changed.jsonl"
        changed.write_text("\n".join([*rows, json.dumps(NEW)]) + "\n", encoding="utf-8")
        attend_index(changed, env, tmp_path)
        switched_at = time.monotonic()
        seen: dict[str, float] = {}
        while len(seen) < 2 and time.monotonic() < switched_at + 20:
            for base in bases:
                body = httpx.get(base + QUERY, timeout=30).json()
                ids = [h["id"] for h in body["results"]]
                # one whole generation per answer: the new book iff the new catalog size
                assert body["catalog_size"] in (180, 181)
                assert (NEW["id"] in ids) == (body["catalog_size"] == 181), body
                if body["catalog_size"] == 181:
                    assert ids[0] == NEW["id"]
                    seen.setdefault(base, time.monotonic() - switched_at)
            time.sleep(0.1)
        assert set(seen) == set(bases), f"replicas still on the old generation: {seen}"
        assert max(seen.values()) < 10, seen  # pushed, not polled (polling is hourly here)
    finally:
        for proc in replicas:
            proc.send_signal(signal.SIGTERM)
        for proc in replicas:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
