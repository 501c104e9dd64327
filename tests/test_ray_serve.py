"""`attend serve --engine ray --shards 2` (a real process on a local Ray) answers every search
as the single-process service does: same books, scores to relative 1e-6, weights, per-head
shares and entropy to 1e-5 (what a softmax makes of float32 rounding), same errors; and follows
a re-index to the new generation without a restart. A shard that stops answering fails searches
in ATTEND_SHARD_TIMEOUT_S with a 503, not a hang, and they are answered again once it is back."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
import torch
from fastapi.testclient import TestClient

from conftest import ATTEND, attend_index, free_port, write_jsonl
from indexer.data import DEMO_CATALOG
from service.api.main import create_app
from service.config.settings import ServiceSettings

pytest.importorskip("ray", reason="the ray engine is an extra: pip install 'attend[ray]'")
pytestmark = pytest.mark.model
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
# Each process multiplies with the BLAS it measured faster at its start (models/cpu_blas.py), and
# MKL and OpenBLAS sum a dot product in other orders: a score moves by float32 rounding (~1e-7
# relative), and a probability, exp(scale · score) normalised, by up to the scale times that
# (25 on the description head). A share of 2.6e-5 came out 3.7e-6 relative apart.
_EXP = 1e-5  # relative, for what went through a softmax
SHARD_TIMEOUT_S = 3
SERVER_PID: dict[str, int] = {}  # the module's `attend serve --engine ray` (the fixture's)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """(database URL, base URL) of the demo catalog served by 2 shards on Ray Serve."""
    cwd = tmp_path_factory.mktemp("ray-serve")
    url = f"sqlite:///{cwd / 'attend.db'}"
    env = {
        **os.environ,
        "ATTEND_DATABASE_URL": url,
        "HF_HUB_OFFLINE": "1",
        "ATTEND_GENERATION_POLL_S": "0.5",
        "ATTEND_SHARD_TIMEOUT_S": str(SHARD_TIMEOUT_S),
    }
    attend_index(DEMO_CATALOG, env, cwd)
    port = free_port()
    log = (cwd / "serve.log").open("wb")
    proc = subprocess.Popen(
        [ATTEND, "serve", "--engine", "ray", "--shards", "2", "--port", str(port)],
        env=env,
        cwd=cwd,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    SERVER_PID["pid"] = proc.pid
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


@contextmanager
def _one_thread() -> Iterator[None]:
    """Torch on one thread here, as in every shard replica (num_cpus=1 sets OMP_NUM_THREADS=1)
    and in the router beside its onnx encoder (service/commands/threads.py): with 2 threads float32
    kernels sum in another order, which moved "the history of Rome"'s entropy by 5e-6
    relative, in some runs, whatever the sharding."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _compare(local: TestClient, ray: httpx.Client) -> None:
    """Every search of SEARCHES answered alike by the single-process app and the Ray one."""
    for path in SEARCHES:
        want, got = local.get(path), ray.get(path)
        assert got.status_code == want.status_code == 200, got.text
        w, g = want.json(), got.json()
        # The entropy sums every book's term from float32 products, which the two processes
        # may take from different BLAS libraries (each measures its faster one at start-up,
        # models/cpu_blas.py): MKL's and OpenBLAS's moved it by up to 2.8e-6 relative here,
        # and a peaked mixture's, which is 0 up to rounding, by 2e-6.
        assert g["entropy"] == pytest.approx(w["entropy"], rel=_EXP, abs=1e-5)
        assert g["match_strength"] == pytest.approx(w["match_strength"], rel=1e-6, abs=1e-9)
        assert {k: v for k, v in g.items() if k not in _NOT_COMPARED} == {
            k: v for k, v in w.items() if k not in _NOT_COMPARED
        }
        assert [h["id"] for h in g["results"]] == [h["id"] for h in w["results"]], path
        for gh, wh in zip(g["results"], w["results"], strict=True):
            assert gh["weight"] == pytest.approx(wh["weight"], rel=_EXP, abs=0)
            assert gh["score"] == pytest.approx(wh["score"], rel=1e-6, abs=1e-7)
            assert gh["heads"].keys() == wh["heads"].keys()
            for name, part in wh["heads"].items():
                assert gh["heads"][name]["share"] == pytest.approx(part["share"], rel=_EXP)
                assert gh["heads"][name]["probability"] == pytest.approx(
                    part["probability"], rel=_EXP
                )
                assert gh["heads"][name]["score"] == pytest.approx(
                    part["score"], rel=1e-6, abs=1e-7
                )
    assert w["matched"] == 0  # the last search's filter leaves nothing


def test_sharded_service_answers_like_one_process(served: tuple[str, str]) -> None:
    url, base = served
    settings = ServiceSettings(database_url=url, device="cpu")
    with (
        _one_thread(),
        TestClient(create_app(settings)) as local,
        httpx.Client(base_url=base, timeout=30) as ray,
    ):
        _compare(local, ray)

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
        # books as the queries: their keys come from the shards, the answers are one process's
        for path, params in (
            ("/books/generative-deep-learning-foster/similar", {"k": 5}),
            ("/books/the-hobbit-tolkien/similar", {"k": 5, "heads": "title:1,description:1"}),
        ):
            want, got = local.get(path, params=params), ray.get(path, params=params)
            assert got.status_code == 200, got.text
            assert [h["id"] for h in got.json()["results"]] == [
                h["id"] for h in want.json()["results"]
            ]
            for g, w in zip(got.json()["results"], want.json()["results"], strict=True):
                assert g["weight"] == pytest.approx(w["weight"], rel=_EXP)
        liked = {
            "liked": ["the-hobbit-tolkien", "dune-herbert"],
            "disliked": ["pride-and-prejudice-austen"],
        }
        want, got = local.post("/recommend", json=liked), ray.post("/recommend", json=liked)
        assert got.status_code == 200, got.text
        assert [(h["id"], [b["id"] for b in h["because"]]) for h in got.json()["results"]] == [
            (h["id"], [b["id"] for b in h["because"]]) for h in want.json()["results"]
        ]
        assert ray.post("/recommend", json={"liked": ["x"]}).status_code == 404
        bad = ray.get("/search?q=&k=0")
        assert bad.status_code == 422 and "detail" in bad.json()


def test_sharded_service_follows_a_reindex(served: tuple[str, str], tmp_path: Path) -> None:
    """A re-index (3 books out, 1 in) is served by the shards and router without a restart,
    every answer on the way from one generation, then alike to one process over it."""
    url, base = served
    rows = [json.loads(line) for line in DEMO_CATALOG.read_text(encoding="utf-8").splitlines()]
    removed = [r["id"] for r in rows[:3]]
    new = {
        "id": "zeppelin-navigation-manual",
        "title": "The Zeppelin Navigator's Manual",
        "authors": ["Hugo Eckener"],
        "year": 1931,
        "language": "en",
        "subjects": ["airships", "navigation"],
        "description": "How to steer a rigid airship across the Atlantic: gas cells, ballast, "
        "dead reckoning and weather at altitude.",
    }
    catalog = write_jsonl(tmp_path / "changed.jsonl", [*rows[3:], new])
    with httpx.Client(base_url=base, timeout=30) as ray:
        before = ray.get("/healthz").json()["generation"]
        t0 = time.monotonic()
        env = {**os.environ, "ATTEND_DATABASE_URL": url, "HF_HUB_OFFLINE": "1"}
        attend_index(catalog, env)
        settings = ServiceSettings(database_url=url, device="cpu")
        with _one_thread(), TestClient(create_app(settings)) as local:
            after = local.get("/healthz").json()["generation"]
            assert after > before
            seen = set()
            while True:  # searches keep answering while the shards load the new generation
                got = ray.get("/search?q=airship%20navigation&k=3")
                assert got.status_code == 200, got.text
                seen.add(got.json()["generation"])
                if got.json()["generation"] == after:
                    break
                assert time.monotonic() - t0 < 60, "the router did not follow the re-index"
                time.sleep(0.2)
            assert seen <= {before, after}
            assert ray.get("/healthz").json() == {**local.get("/healthz").json()}
            _compare(local, ray)
            hits = [h["id"] for h in got.json()["results"]]
            assert hits[0] == new["id"]
            assert ray.get(f"/books/{removed[0]}").status_code == 404
            assert all(
                r not in [h["id"] for h in ray.get(f"/search?q={r}&k=50").json()["results"]]
                for r in removed
            )


def _descendants(root: int) -> set[int]:
    """The pids of every process under `root` (its children, theirs, …)."""
    parent: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                # "pid (comm) state ppid …": comm may hold spaces, so split after its ")"
                stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                parent[int(entry.name)] = int(stat[1])
    found, todo = set(), [root]
    while todo:
        pid = todo.pop()
        for child, ppid in parent.items():
            if ppid == pid and child not in found:
                found.add(child)
                todo.append(child)
    return found


def _shard_replica(server: int, name: str) -> int:
    """The pid of the Ray Serve replica process of the deployment `name` under the server
    process `server` (its Ray's workers are its descendants; another test's Ray may run beside
    it): its process title, `ray::ServeReplica:<app>:<name>`, then `.<method>` while it runs
    one."""
    title = re.compile(rf"^ray::ServeReplica:[^:]+:{re.escape(name)}(?:\.|\s|$)")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for pid in _descendants(server):
            with contextlib.suppress(OSError):
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
                if title.match(cmdline):
                    return pid
        time.sleep(0.5)
    raise AssertionError(f"no Ray Serve replica process of {name} under {server}")


def test_a_stopped_shard_fails_searches_fast_and_they_come_back(served: tuple[str, str]) -> None:
    _, base = served
    pid = _shard_replica(SERVER_PID["pid"], "shard-1")
    os.kill(pid, signal.SIGSTOP)  # frozen: its process holds the connection and never answers
    try:
        with httpx.Client(base_url=base, timeout=60) as client:
            t0 = time.monotonic()
            r = client.get("/search", params={"q": "dragons and wizards"})
            took = time.monotonic() - t0
            assert r.status_code == 503, r.text
            assert "shard-1 did not answer within 3 s" in r.json()["detail"]
            assert r.headers["retry-after"] == "1"
            assert SHARD_TIMEOUT_S <= took < SHARD_TIMEOUT_S + 10
            assert client.get("/healthz").status_code == 200  # the router itself answers
            t0 = time.monotonic()
            ready = client.get("/readyz")
            assert ready.status_code == 503 and "shard-1 did not answer" in ready.json()["detail"]
            assert time.monotonic() - t0 < 5
    finally:
        os.kill(pid, signal.SIGCONT)
    deadline = time.monotonic() + 60
    with httpx.Client(base_url=base, timeout=60) as client:
        while (r := client.get("/search", params={"q": "dragons and wizards"})).status_code != 200:
            assert time.monotonic() < deadline, r.text
            time.sleep(0.5)
        assert r.json()["results"]
        assert client.get("/readyz").status_code == 200
