"""A typed query that asks for books like a book of the catalog ("books like Dune", "similar to
the hobbit") is answered with that book's similar books and says which book it understood; one
that names no title, or is a title itself, is searched as typed. End to end with the real model
over the demo catalog and two books of the test's own."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from conftest import serve_demo_with
from service.engine.books_like import named_text

pytestmark = pytest.mark.model

EXTRA = [
    {
        "id": "summer",
        "title": "Summer",
        "authors": ["Edith Wharton"],
        "year": 1917,
        "description": "A young woman in a poor New England village and her summer of love.",
    },
    {
        "id": "something-like-summer",
        "title": "Something Like Summer",
        "authors": ["Jay Bell"],
        "year": 2011,
        "description": "Two boys in a Texas high school, and the love between them over years.",
    },
]


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    with serve_demo_with(tmp_path_factory.mktemp("like"), EXTRA) as client:
        yield client


def _get(client: TestClient, path: str, **params: object) -> dict:
    r = client.get(path, params=params)
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    ("query", "named"),
    [
        ("books like Dune", "Dune"),
        ("Similar to the hobbit?", "the hobbit"),
        ("a novel like The Secret History", "The Secret History"),
        ("read-alikes for Pride and Prejudice", "Pride and Prejudice"),
        ("like water for chocolate", None),  # a title, not a request
        ("books about dune ecology", None),
        ("books like", None),
    ],
)
def test_the_named_text(query: str, named: str | None) -> None:
    assert named_text(query) == named


def test_books_like_a_title_are_its_similar_books(client: TestClient) -> None:
    got = _get(client, "/search", q="books like Dune", k=5)
    assert got["like"] == {"id": "dune-herbert", "title": "Dune"}
    similar = _get(client, "/books/dune-herbert/similar", k=5)
    assert [h["id"] for h in got["results"]] == [h["id"] for h in similar["results"]]
    assert [h["weight"] for h in got["results"]] == [h["weight"] for h in similar["results"]]
    assert got["match_strength"] == similar["match_strength"]
    assert "dune-herbert" not in [h["id"] for h in got["results"]]


def test_case_punctuation_and_an_article_do_not_matter(client: TestClient) -> None:
    got = _get(client, "/search", q="Similar to hobbit?", k=3)
    assert got["like"] is not None and got["like"]["id"] == "the-hobbit-tolkien"


def test_a_text_that_is_no_title_is_searched_as_typed(client: TestClient) -> None:
    got = _get(client, "/search", q="books like the sea", k=5)
    assert got["like"] is None
    assert [h["rank"] for h in got["results"]] == [h["relevance_rank"] for h in got["results"]]


def test_a_title_that_reads_like_a_request_is_that_title(client: TestClient) -> None:
    """ "Something Like Summer" is a book; "Summer" another: the query is the first's title."""
    got = _get(client, "/search", q="something like summer", k=3)
    assert got["like"] is None
    assert got["results"][0]["id"] == "something-like-summer"


def test_filters_and_paging_apply_to_the_similar_books(client: TestClient) -> None:
    """Dune (1965) is found though the filter leaves it out; its similar books are filtered,
    and a page is the same slice of the ranking as without paging."""
    old = _get(client, "/search", q="books like dune", k=5, year_max=1950)
    assert old["like"]["id"] == "dune-herbert"
    assert old["results"] and all(h["year"] <= 1950 for h in old["results"])
    whole = _get(client, "/search", q="books like dune", k=6)
    page = _get(client, "/search", q="books like dune", k=3, offset=3)
    assert [h["id"] for h in page["results"]] == [h["id"] for h in whole["results"][3:]]
    assert [h["rank"] for h in page["results"]] == [4, 5, 6]


def test_in_a_batch_each_query_answers_as_alone(client: TestClient) -> None:
    queries = ["books like Dune", "space opera", "similar to the hobbit", "books like the sea"]
    r = client.post("/search", json={"queries": queries, "k": 4})
    assert r.status_code == 200, r.text
    for query, got in zip(queries, r.json()["responses"], strict=True):
        alone = _get(client, "/search", q=query, k=4)
        assert got["like"] == alone["like"]
        assert [h["id"] for h in got["results"]] == [h["id"] for h in alone["results"]]
