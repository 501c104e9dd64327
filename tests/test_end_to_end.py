"""The whole data flow with the real model: demo catalog → `attend index` (a real process) →
database → app start-up → GET /search → ranked books with their attention weights."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from indexer.catalog import read_catalog
from indexer.data import DEMO_CATALOG
from service.api.main import create_app
from service.config.settings import ServiceSettings

pytestmark = pytest.mark.model
ATTEND = str(Path(sys.executable).with_name("attend"))
ML_SUBJECTS = {
    "machine learning",
    "deep learning",
    "generative ai",
    "large language models",
    "natural language processing",
    "artificial intelligence",
    "neural networks",
}


def _attend(*args: str, database_url: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ATTEND_DATABASE_URL": database_url, "HF_HUB_OFFLINE": "1"}
    return subprocess.run(
        [ATTEND, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=600, check=False
    )


def test_demo_catalog_to_search_with_weights(database_url: str, tmp_path: Path) -> None:
    indexed = _attend("index", str(DEMO_CATALOG), database_url=database_url, cwd=tmp_path)
    assert indexed.returncode == 0, indexed.stderr
    books = {b.id: b for b in read_catalog(DEMO_CATALOG)}
    assert f"{len(books)} books: {len(books)} added" in indexed.stdout

    settings = ServiceSettings(database_url=database_url, device="cpu")
    with TestClient(create_app(settings)) as client:
        r = client.get("/search?q=generative%20AI")
        assert r.status_code == 200
        body = r.json()
        assert body["catalog_size"] == body["matched"] == len(books)
        assert body["scale"] == settings.scales["description"] and len(body["results"]) == 10
        top = books[body["results"][0]["id"]]
        assert ML_SUBJECTS & set(top.extra["subjects"]), top.title
        weights = [h["weight"] for h in body["results"]]
        assert weights == sorted(weights, reverse=True) and 0 < sum(weights) <= 1
        assert weights[0] > 5 / len(books)  # sharper than uniform: the scale does its job
        # the description head alone is one softmax: weight ratios are exp(scale · Δscore)
        alone = client.get("/search?q=generative%20AI&heads=description:1").json()["results"]
        first = alone[0]
        for hit in alone[1:]:
            expected = math.exp(body["scale"] * (hit["score"] - first["score"]))
            assert math.isclose(hit["weight"] / first["weight"], expected, rel_tol=1e-4)

        # exact names rank right under the default heads (the lexical head among them)
        tolkien = client.get("/search", params={"q": "Tolkien", "k": 2}).json()["results"]
        assert {h["id"] for h in tolkien} == {
            "the-hobbit-tolkien",
            "fellowship-of-the-ring-tolkien",
        }
        assert all(h["heads"]["lexical"]["score"] > 0 for h in tolkien)
        assert sum(h["weight"] for h in tolkien) > 0.9
        pytorch = client.get("/search", params={"q": "PyTorch", "k": 3}).json()["results"]
        assert all(h["heads"]["lexical"]["score"] > 0 for h in pytorch)  # the name is in each
        assert all("PyTorch" in h["title"] for h in pytorch[:2]), [h["title"] for h in pytorch]
        hp = client.get("/search", params={"q": "Harry Potter", "k": 1}).json()["results"]
        assert hp[0]["id"] == "harry-potter-philosophers-stone-rowling"
        nothing = client.get("/search", params={"q": "qwertyuiop asdfghjkl"}).json()
        assert nothing["no_strong_match"] and not body["no_strong_match"]

        # a non-ML query does not put ML books on top, and a filter narrows the softmax
        kids = client.get("/search", params={"q": "a caterpillar who eats too much", "k": 1}).json()
        assert kids["results"][0]["id"] == "very-hungry-caterpillar-carle"
        assert client.get(f"/books/{body['results'][0]['id']}").json()["title"] == top.title

    # a second run finds every book up to date and embeds nothing
    again = _attend("index", str(DEMO_CATALOG), database_url=database_url, cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert f"0 added, 0 updated, {len(books)} unchanged, 0 removed" in again.stdout
    assert "0 texts embedded" in again.stdout and "nothing changed, generation 1" in again.stdout


def test_cli_search_prints_the_api_json(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'attend.db'}"
    assert _attend("index", str(DEMO_CATALOG), database_url=url, cwd=tmp_path).returncode == 0
    out = _attend(
        "search",
        "relational databases and SQL",
        "-k",
        "3",
        "--json",
        database_url=url,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    body = json.loads(out.stdout)
    with TestClient(create_app(ServiceSettings(database_url=url, device="cpu"))) as client:
        api = client.get("/search", params={"q": "relational databases and SQL", "k": 3}).json()
    assert [h["id"] for h in body["results"]] == [h["id"] for h in api["results"]]
    table = _attend(
        "search", "relational databases and SQL", "-k", "3", database_url=url, cwd=tmp_path
    )
    assert api["results"][0]["title"] in table.stdout and "weight" in table.stdout
