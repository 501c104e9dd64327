"""Chinese and Japanese books end to end with the real model: the sentence encoder knows little
of them, so the lexical head (CJK read as character bigrams, service/engine/lexical.py) carries
a query written in them, and the no-strong-match flag is right both ways."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from conftest import serve_demo_with

pytestmark = pytest.mark.model

EXTRA = [
    {
        "id": "santi",
        "title": "三体",
        "authors": ["刘慈欣"],
        "description": "文化大革命时期，叶文洁向宇宙发出信号，三体文明回应了。一部科幻小说。",
    },
    {
        "id": "huozhe",
        "title": "活着",
        "authors": ["余华"],
        "description": "福贵的一生：战争、饥荒和家人的离去。",
    },
    {
        "id": "noruwei",
        "title": "ノルウェイの森",
        "authors": ["村上春樹"],
        "description": "ワタナベは直子と緑のあいだで揺れる。",
    },
]


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    with serve_demo_with(tmp_path_factory.mktemp("cjk"), EXTRA) as client:
        yield client


def _search(client: TestClient, q: str) -> dict:
    r = client.get("/search", params={"q": q, "k": 3})
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    ("query", "book"), [("科幻小说", "santi"), ("福贵", "huozhe"), ("直子", "noruwei")]
)
def test_a_word_inside_a_cjk_sentence_finds_its_book(
    client: TestClient, query: str, book: str
) -> None:
    got = _search(client, query)
    assert got["results"][0]["id"] == book
    assert not got["heads"]["lexical"]["abstained"]
    assert not got["no_strong_match"], got["match_strength"]


def test_a_cjk_query_no_book_holds_is_flagged(client: TestClient) -> None:
    got = _search(client, "量子力学")  # "quantum mechanics"
    assert got["heads"]["lexical"]["abstained"]
    assert got["no_strong_match"]
