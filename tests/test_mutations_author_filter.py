"""The author head has evidence only where the filters keep one of the author's books (issue 31,
item 6: with service/engine/scored_heads.py counting every finite logit as evidence, ignoring
the filter mask, a query naming an author whose books a filter removes kept the author head's
weight, and every test still passed). The app over a real database, SQLite and PostgreSQL."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine

from conftest import serve_books

BOOKS: list[dict[str, object]] = [
    {"id": "dune", "title": "Dune", "description": "a desert planet and its spice",
     "authors": ["Frank Herbert"], "year": 1965},
    {"id": "messiah", "title": "Dune Messiah", "description": "the emperor of the desert",
     "authors": ["Frank Herbert"], "year": 1969},
    {"id": "sands", "title": "Sands of Time", "description": "a desert novel of spice traders",
     "authors": ["Ann Other"], "year": 2001},
    {"id": "sea", "title": "The Sea", "description": "a sailor at sea",
     "authors": ["Sam Sailor"], "year": 2005},
]  # fmt: skip


@pytest.fixture
def client(engine: Engine, tmp_path: Path) -> Iterator[TestClient]:
    with serve_books(engine, tmp_path, BOOKS) as c:
        yield c


def _search(client: TestClient, **params: Any) -> dict[str, Any]:
    r = client.get("/search", params={"q": "frank herbert desert", **params})
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


def test_a_named_authors_books_all_filtered_out_leave_the_author_head_abstaining(
    client: TestClient,
) -> None:
    unfiltered = _search(client)
    assert unfiltered["author"] is not None  # the query names Frank Herbert
    assert unfiltered["heads"]["author"]["abstained"] is False
    assert unfiltered["heads"]["author"]["weight"] > 0

    # none of Herbert's books is kept: the other heads rank the kept books (with the mask
    # ignored the author head kept 0.75 of the weight, all of it on filtered books: no results)
    later = _search(client, year_min=1990)
    author = later["heads"]["author"]
    assert (author["weight"], author["abstained"]) == (0.0, True)
    assert {h["id"] for h in later["results"]} == {"sands", "sea"}
    assert math.isclose(sum(h["weight"] for h in later["results"]), 1.0, rel_tol=1e-5)

    # asked for alone, the author head has nothing to say about the kept books
    alone = _search(client, year_min=1990, heads="author:1")
    assert alone["results"] == [] and alone["heads"]["author"]["abstained"] is True
