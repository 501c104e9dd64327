"""Issue 48 item 4: suggestions as a reader types. Titles and author names whose words hold the
query's, the last one as a prefix, accents and case aside; a work once; the most read first;
bounded and validated like every route; on both databases."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine

from conftest import serve_books
from service.engine.suggestions import SuggestionIndexes

BOOKS: list[dict[str, object]] = [
    {"id": "hobbit", "title": "The Hobbit", "authors": ["J. R. R. Tolkien"], "ratings_count": 90},
    {"id": "hobbit-2", "title": "The Hobbit", "authors": ["J.R.R. Tolkien"], "ratings_count": 5},
    {"id": "fellowship", "title": "The Fellowship of the Ring", "authors": ["J. R. R. Tolkien"],
     "ratings_count": 80},
    {"id": "hobbies", "title": "Hobbies for Everyone", "authors": ["Ann Hobbs"],
     "ratings_count": 7},
    {"id": "stone", "title": "Harry Potter and the Philosopher's Stone",
     "authors": ["J. K. Rowling"], "ratings_count": 100},
    {"id": "bronte", "title": "Jane Eyre", "authors": ["Charlotte Brontë"], "ratings_count": 50},
    {"id": "tolkien-life", "title": "Tolkien: A Biography", "authors": ["Humphrey Carpenter"]},
]  # fmt: skip


@pytest.fixture
def client(engine: Engine, tmp_path: Path) -> Iterator[TestClient]:
    with serve_books(engine, tmp_path, BOOKS) as c:
        yield c


def _suggest(client: TestClient, q: str, k: int = 8) -> tuple[list[str], list[tuple[str, int]]]:
    r = client.get("/suggest", params={"q": q, "k": k})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["query"] == q
    return [t["id"] for t in body["titles"]], [(a["name"], a["books"]) for a in body["authors"]]


def test_a_prefix_completes_titles_most_read_first_and_a_work_once(client: TestClient) -> None:
    titles, authors = _suggest(client, "hobb")
    # the Hobbit's two editions are one work: its most read; then the hobbies book
    assert titles == ["hobbit", "hobbies"]
    assert authors == [("Ann Hobbs", 1)]


def test_words_complete_in_any_order_accents_and_case_aside(client: TestClient) -> None:
    assert _suggest(client, "potter phil")[0] == ["stone"]
    assert _suggest(client, "PHILOSOPHER'S har")[0] == ["stone"]
    assert _suggest(client, "bronte")[1] == [("Charlotte Brontë", 1)]
    assert _suggest(client, "Brontë ch")[1] == [("Charlotte Brontë", 1)]
    assert _suggest(client, "potter phx") == ([], [])


def test_an_author_by_their_number_of_books(client: TestClient) -> None:
    titles, authors = _suggest(client, "tolk")
    assert authors[0] == ("J. R. R. Tolkien", 2)  # "J.R.R. Tolkien" is written apart: its own
    assert ("J.R.R. Tolkien", 1) in authors
    assert titles == ["tolkien-life"]  # the word in a title


def test_a_finished_word_is_whole_and_too_short_a_query_suggests_nothing(
    client: TestClient,
) -> None:
    assert _suggest(client, "hobb ") == ([], [])  # "hobb" whole: no word is
    assert _suggest(client, "hobbit ")[0] == ["hobbit"]
    assert _suggest(client, "h") == ([], [])  # one character: every text would do
    assert _suggest(client, "  ") == ([], [])


def test_k_and_the_query_are_bounded(client: TestClient) -> None:
    assert len(_suggest(client, "the", k=1)[0]) == 1
    assert len(_suggest(client, "the", k=2)[0]) == 2
    for params in ({"q": ""}, {"q": "x" * 201}, {"q": "the", "k": 0}, {"q": "the", "k": 21}):
        r = client.get("/suggest", params=params)
        assert r.status_code == 422 and "detail" in r.json(), params
    assert client.get("/suggest", params={"q": "x" * 200, "k": 20}).status_code == 200


def test_while_one_request_makes_the_indexes_the_others_get_none_at_once(
    client: TestClient,
) -> None:
    """Made in the threads every route shares: a burst of suggestions while they are made must
    not hold those threads (a book read would wait behind them)."""
    front = client.app.state.front  # type: ignore[attr-defined]
    indexes, index = front.suggestions, front.index
    assert indexes.of(index) is not None  # made
    fresh = SuggestionIndexes()
    with fresh._making:  # another request is making them
        assert fresh.of(index) is None
        r = client.get("/suggest", params={"q": "hobb"})  # the app's own: made already
        assert r.json()["titles"][0]["id"] == "hobbit"
    assert fresh.of(index) is not None
    assert fresh.of(index) is fresh.of(index)  # made once
