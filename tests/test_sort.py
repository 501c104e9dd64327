"""Issue 48 item 2: sorting a search's relevant books. The books whose weight is at least 1% of
the top's (1,000 at most) ordered by year, title (its article aside) or average rating, either
way; books without the key after those with one; each keeps its weight and its place by weight;
the page runs over the sorted books; on both databases, the rule's floor checked at its edge."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine

from conftest import FakeEncoder, index_books, serve_books
from service.api.main import create_app
from service.config.settings import ServiceSettings
from service.engine.query_ranking import Hit
from service.engine.sorting import SORT_FLOOR, sorted_hits

BOOKS: list[dict[str, object]] = [
    {"id": "d1", "title": "The Dragon Atlas", "description": "dragons dragons dragons",
     "year": 1990, "average_rating": 4.1},
    {"id": "d2", "title": "A Dragon's Egg", "description": "a dragon hatches", "year": 2010,
     "average_rating": "3.2"},
    {"id": "d3", "title": "Dragon Riders", "description": "riders of the dragons", "year": 1975},
    {"id": "d4", "title": "Beyond Dragons", "description": "dragons beyond the sea",
     "Average Rating": 4.8},
    {"id": "x1", "title": "Gardening", "description": "soil and seeds"},
]  # fmt: skip


@pytest.fixture
def client(engine: Engine, tmp_path: Path) -> Iterator[TestClient]:
    with serve_books(engine, tmp_path, BOOKS) as c:
        yield c


def _search(client: TestClient, **params: object) -> dict[str, object]:
    r = client.get("/search", params={"q": "dragons", "k": 10, **params})
    assert r.status_code == 200, r.text
    body: dict[str, object] = r.json()
    return body


def _relevant(client: TestClient) -> list[tuple[str, float]]:
    body = _search(client)
    hits = body["results"]
    top = hits[0]["weight"]  # type: ignore[index]
    return [(h["id"], h["weight"]) for h in hits if h["weight"] >= SORT_FLOOR * top]  # type: ignore[union-attr]


def test_year_either_way_books_without_one_last(client: TestClient) -> None:
    relevant = dict(_relevant(client))
    body = _search(client, sort="year")
    ids = [h["id"] for h in body["results"]]  # type: ignore[union-attr]
    years = {"d1": 1990, "d2": 2010, "d3": 1975}
    dated = [i for i in ids if i in years]
    assert dated == sorted(dated, key=years.__getitem__)
    assert ids[len(dated) :] == [i for i in ids if i not in years]  # no year: after
    assert set(ids) == set(relevant) and body["sorted_books"] == len(relevant)
    desc = [h["id"] for h in _search(client, sort="-year")["results"]]  # type: ignore[union-attr]
    assert [i for i in desc if i in years] == dated[::-1]
    for hit in body["results"]:  # type: ignore[union-attr]
        assert hit["weight"] == pytest.approx(relevant[hit["id"]])  # its weight, kept


def test_title_without_its_article_and_rating_as_the_catalog_writes_it(client: TestClient) -> None:
    relevant = {i for i, _ in _relevant(client)}
    titles = [h["title"] for h in _search(client, sort="title")["results"]]  # type: ignore[union-attr]
    keys = [t.removeprefix("The ").removeprefix("A ").casefold() for t in titles]
    assert keys == sorted(keys)
    ratings = [h["id"] for h in _search(client, sort="-rating")["results"]]  # type: ignore[union-attr]
    rated = [i for i in ("d4", "d1", "d2") if i in relevant]  # 4.8, 4.1, "3.2"
    assert ratings[: len(rated)] == rated


def test_the_relevance_rank_is_the_place_by_weight_and_the_page_runs_over_the_sorted(
    client: TestClient,
) -> None:
    by_weight = [i for i, _ in _relevant(client)]
    body = _search(client, sort="year", k=2, offset=1)
    full = [h["id"] for h in _search(client, sort="year")["results"]]  # type: ignore[union-attr]
    assert [h["id"] for h in body["results"]] == full[1:3]  # type: ignore[union-attr]
    for hit in body["results"]:  # type: ignore[union-attr]
        assert by_weight[hit["relevance_rank"] - 1] == hit["id"]
    assert [h["rank"] for h in body["results"]] == [2, 3]  # type: ignore[union-attr]
    assert _search(client)["sort"] is None and _search(client)["sorted_books"] is None
    r = client.get("/search", params={"q": "dragons", "sort": "price"})
    assert r.status_code == 422 and "sort" in r.text


def _hit(row: int, weight: float) -> Hit:
    return Hit(row, 0.0, weight, {})


def test_the_floor_at_its_edge(client: TestClient) -> None:
    """A book at exactly 1% of the top weight is relevant, one just under is not."""
    index = client.app.state.searcher.index  # type: ignore[attr-defined]
    hits = [_hit(0, 0.5), _hit(1, 0.5 * SORT_FLOOR), _hit(2, 0.5 * SORT_FLOOR * 0.999)]
    assert [(h.row, place) for h, place in sorted_hits(index, hits, "-year")] == [(1, 2), (0, 1)]
    many = [_hit(r % len(index), 1.0) for r in range(1200)]
    assert len(sorted_hits(index, many, "year")) == 1000  # SORT_POOL: the first by weight


def test_a_swap_and_a_restart_keep_the_ratings(engine: Engine, tmp_path: Path) -> None:
    url = index_books(engine, tmp_path, BOOKS)
    settings = ServiceSettings(
        database_url=url, device="cpu", generation_poll_s=0, served_dir=str(tmp_path / "forms")
    )
    # rated lowest of all, and far from the top by weight: first only by its rating
    worst = {"id": "d5", "title": "Tales", "description": "one dragon", "average_rating": 0.5}
    with TestClient(create_app(settings, encoder=FakeEncoder())) as client:
        index_books(engine, tmp_path, [*BOOKS, worst])
        client.app.state.watcher.check()  # type: ignore[attr-defined]  # (or its thread did)
        assert _search(client)["results"][0]["id"] != "d5"  # type: ignore[index]
        assert _search(client, sort="rating")["results"][0]["id"] == "d5"  # type: ignore[index]
    with TestClient(create_app(settings, encoder=FakeEncoder())) as restarted:  # the form's
        assert _search(restarted, sort="rating")["results"][0]["id"] == "d5"  # type: ignore[index]
