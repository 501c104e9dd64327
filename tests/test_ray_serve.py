"""`attend serve --engine ray --shards 2` (a real process on a local Ray) answers every search
as the single-process service does: same books, weights, per-head shares and entropy to relative
1e-6, same errors."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from indexer.data import DEMO_CATALOG
from service.main import create_app
from service.settings import ServiceSettings

pytest.importorskip("ray", reason="the ray engine is an extra: pip install 'attend[ray]'")
pytestmark = pytest.mark.model
ATTEND = str(Path(sys.executable).with_name("attend"))
# The sharded engine mixes the same heads as one process (its shards answer the dense heads, its
# router the lexical one), so the default heads are compared, and single heads too.
SEARCHES = [
    "/search?q=generative%20AI&k=10",
    "/search?q=the%20history%20of%20Rome&k=5&year_min=1990",
    "/search?q=a%20picture%20book%20about%20a%20bear&k=7&offset=3&heads=description:1",
    "/search?q=databases&author=kleppmann",
    "/search?q=Kleppmann&k=4&heads=title:1",
    "/search?q=anything&language=zz",
]
_NOT_COMPARED = {"results", "entropy", "match_strength"}  # floats: compared approximately


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """(database URL, base URL) of the demo catalog served by 2 shards on Ray Serve."""
    cwd = tmp_path_factory.mktemp("ray-serve")
    url = f"sqlite:///{cwd / 'attend.db'}"
    env = {**os.environ, "ATTEND_DATABASE_URL": url, "HF_HUB_OFFLINE": "1"}
    indexed = subprocess.run(
        [ATTEND, "index", str(DEMO_CATALOG)],
        env=env,
        cwd=cwd,
        capture_output=True,
        timeout=300,
        check=False,
    )
    assert indexed.returncode == 0, indexed.stderr
    port = _free_port()
    log = (cwd / "serve.log").open("wb")
    proc = subprocess.Popen(
        [ATTEND, "serve", "--engine", "ray", "--shards", "2", "--port", str(port)],
        env=env,
        cwd=cwd,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 150
        while True:
            assert proc.poll() is None, (cwd / "serve.log").read_text()[-3000:]
            assert time.monotonic() < deadline, (cwd / "serve.log").read_text()[-3000:]
            try:
                if httpx.get(f"{base}/healthz", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(1)
        yield url, base
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
    assert proc.returncode == 0, (cwd / "serve.log").read_text()[-3000:]


def test_sharded_service_answers_like_one_process(served: tuple[str, str]) -> None:
    url, base = served
    settings = ServiceSettings(database_url=url, device="cpu")
    with TestClient(create_app(settings)) as local, httpx.Client(base_url=base, timeout=30) as ray:
        for path in SEARCHES:
            want, got = local.get(path), ray.get(path)
            assert got.status_code == want.status_code == 200, got.text
            w, g = want.json(), got.json()
            assert g["entropy"] == pytest.approx(w["entropy"], rel=1e-6)
            assert g["match_strength"] == pytest.approx(w["match_strength"], rel=1e-6, abs=1e-9)
            assert {k: v for k, v in g.items() if k not in _NOT_COMPARED} == {
                k: v for k, v in w.items() if k not in _NOT_COMPARED
            }
            assert [h["id"] for h in g["results"]] == [h["id"] for h in w["results"]], path
            for gh, wh in zip(g["results"], w["results"], strict=True):
                assert gh["weight"] == pytest.approx(wh["weight"], rel=1e-6, abs=0)
                assert gh["score"] == pytest.approx(wh["score"], rel=1e-6, abs=1e-7)
                assert gh["heads"].keys() == wh["heads"].keys()
                for name, part in wh["heads"].items():
                    assert gh["heads"][name]["share"] == pytest.approx(part["share"], rel=1e-6)
                    assert gh["heads"][name]["probability"] == pytest.approx(
                        part["probability"], rel=1e-6
                    )
                    assert gh["heads"][name]["score"] == pytest.approx(
                        part["score"], rel=1e-6, abs=1e-7
                    )
        assert w["matched"] == 0  # the last search's filter leaves nothing

        body = {"queries": ["machine learning", "poetry"], "k": 4, "year_max": 2010}
        want, got = local.post("/search", json=body), ray.post("/search", json=body)
        assert got.status_code == 200
        assert [[h["id"] for h in r["results"]] for r in got.json()["responses"]] == [
            [h["id"] for h in r["results"]] for r in want.json()["responses"]
        ]
        health = ray.get("/healthz").json()
        assert health["status"] == "ok" and health["catalog_size"] == 180
        book = ray.get("/books/generative-deep-learning-foster")
        assert book.status_code == 200 and book.json()["title"] == "Generative Deep Learning"
        assert ray.post("/recommend", json={"liked": ["x"]}).status_code == 501
        bad = ray.get("/search?q=&k=0")
        assert bad.status_code == 422 and "detail" in bad.json()
