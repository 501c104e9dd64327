"""The weights of similar books and recommendations mean what they say, end to end with the real
model over the demo catalog and three books of the test's own: a near-duplicate description
weighs far above a weak match, a book with nothing like it in the catalog is flagged, each
head's probability is its exact softmax (not its rank), and where the order is not the weights'
each result says where its weight places it."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from conftest import index_demo_with
from service.api.main import create_app
from service.config.settings import ServiceSettings

pytestmark = pytest.mark.model

SALT = (
    "A caravan crosses the Sahara carrying slabs of salt from the mines of Taoudenni to the "
    "markets of Timbuktu, and the camel drivers tell of the desert's wells, storms and thieves."
)
EXTRA = [
    {"id": "salt-road", "title": "The Salt Road", "authors": ["Ama Keita"], "description": SALT},
    # the same blurb under another title and author: a near-duplicate, not the same work
    {
        "id": "white-gold",
        "title": "White Gold of the Desert",
        "authors": ["Idris Maiga"],
        "description": SALT.replace("tell of", "speak of"),
    },
    # nothing in the demo catalog is about this
    {
        "id": "marine-diesel",
        "title": "Servicing Two-Stroke Marine Diesels",
        "authors": ["R. Pettersen"],
        "description": "Workshop procedures for two-stroke marine diesel engines: injector "
        "calibration, cylinder liner wear limits, scavenge port cleaning and crankcase "
        "lubrication intervals, with torque tables for each fastener.",
    },
]


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    url = index_demo_with(tmp_path_factory.mktemp("weights"), EXTRA)
    with TestClient(create_app(ServiceSettings(database_url=url, device="cpu"))) as client:
        yield client


def _similar(client: TestClient, book: str, k: int = 10) -> dict:
    r = client.get(f"/books/{book}/similar", params={"k": k})
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


def test_a_near_duplicate_weighs_far_above_a_weak_match(client: TestClient) -> None:
    dup, lonely = _similar(client, "salt-road"), _similar(client, "marine-diesel")
    first = dup["results"][0]
    assert first["id"] == "white-gold"
    weak = max(h["weight"] for h in lonely["results"])
    assert first["weight"] > 0.5 and first["weight"] > 5 * weak, (first["weight"], weak)
    assert dup["match_strength"] > 0.9 and not dup["no_strong_match"]
    # the weights over every candidate sum to 1: what the first takes, the others cannot
    assert sum(h["weight"] for h in dup["results"]) <= 1 + 1e-9
    assert 0 <= dup["entropy"] < lonely["entropy"] <= math.log(lonely["matched"]) + 1e-9


def test_a_book_with_nothing_like_it_is_flagged(client: TestClient) -> None:
    lonely = _similar(client, "marine-diesel")
    assert lonely["no_strong_match"], lonely["match_strength"]
    assert lonely["match_strength"] < 0.55
    assert lonely["results"], "a flagged book still gets its nearest books"


def test_each_heads_probability_is_its_exact_softmax(client: TestClient) -> None:
    """Within one softmax, two books' probabilities are in the ratio exp(scale · Δscore):
    true of an exact softmax, false of a rank's 1 / (60 + rank)."""
    found = _similar(client, "salt-road", k=8)
    scales = {h: v["scale"] for h, v in found["heads"].items()}
    checked = 0
    for head in ("title", "description"):
        hits = [h["heads"][head] for h in found["results"] if head in h["heads"]]
        for a, b in itertools.pairwise(hits):
            softmax = math.exp(scales[head] * (a["score"] - b["score"]))
            assert a["probability"] / b["probability"] == pytest.approx(softmax, rel=1e-4)
            checked += 1
    assert checked >= 10


@pytest.mark.parametrize("book", ["salt-road", "marine-diesel", "dune-herbert"])
def test_relevance_rank_is_the_place_by_weight(client: TestClient, book: str) -> None:
    hits = _similar(client, book)["results"]
    for h in hits:
        assert h["relevance_rank"] == 1 + sum(o["weight"] > h["weight"] for o in hits)
        assert sum(p["share"] for p in h["heads"].values()) == pytest.approx(h["weight"], rel=1e-6)


def test_a_recommendation_says_how_strong_its_match_is(client: TestClient) -> None:
    body = {"liked": ["salt-road"], "k": 5}
    r = client.post("/recommend", json=body)
    assert r.status_code == 200, r.text
    got = r.json()
    assert got["results"][0]["id"] == "white-gold"
    assert got["match_strength"] > 0.9 and not got["no_strong_match"]
    assert got["entropy"] is not None and got["entropy"] >= 0
    hits = got["results"]
    for h in hits:
        assert h["relevance_rank"] == 1 + sum(o["weight"] > h["weight"] for o in hits)
    r = client.post("/recommend", json={"liked": ["marine-diesel"], "k": 5})
    assert r.status_code == 200, r.text
    assert r.json()["no_strong_match"]
