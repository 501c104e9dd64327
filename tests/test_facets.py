"""Issue 48 item 1: facets weighted by attention, and the subject, series and publisher
filters. A facet's values count the relevant books (weight at least 1% of the top's, 1,000 at
most) and weigh each value by the Σ of those books' weights; each value's filter keeps its
books; the subject, series and publisher filters are masks before the softmax, in one process
and on shards alike. The demo catalog with the real model, and a small catalog on both databases."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from conftest import serve_books, serve_demo_with
from indexer import db, loaded_index, store
from indexer.data import DEMO_CATALOG
from service.api.search_schemas import PageAndFilters
from service.cluster.shards.router import ShardedKeys
from service.cluster.shards.shard import LocalShard, Shard
from service.engine.facets import FACETS, facets
from service.engine.query_ranking import Hit
from service.engine.served_index import ServedIndex
from service.engine.sorting import SORT_FLOOR, SORT_POOL

pytestmark = pytest.mark.model
QUERIES = ["dragons and wizards", "machine learning", "the history of rome", "moonfall"]
# a series by its titles' markers and by a catalog's column; a heading written two ways; a
# publisher as one name, a list and a ";" list (the demo's own books have none)
EXTRA: list[dict[str, object]] = [
    {"id": "moon-1", "title": "The Tide Clock (Moonfall, #1)", "authors": ["Ada Reyes"],
     "year": 2003, "description": "A moon falls toward a coastal town.",
     "subjects": ["Children's Books", "Science Fiction"], "publisher": "Tideline Press"},
    {"id": "moon-2", "title": "The Salt Road (Moonfall #2)", "authors": ["Ada Reyes"],
     "year": 2005, "description": "The town walks inland as the moon falls.",
     "subjects": ["science fiction"], "publishers": ["Tideline Press", "Harbour House"]},
    {"id": "moon-3", "title": "Moonfall's End", "authors": ["Ada Reyes"], "year": 2011,
     "series": "Moonfall", "description": "The last of the moon's fall.",
     "publisher": "Harbour House; Farrar, Straus and Giroux"},
]  # fmt: skip


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    with serve_demo_with(tmp_path_factory.mktemp("facets"), EXTRA) as client:
        yield client


def _catalog() -> dict[str, dict[str, Any]]:
    rows = [json.loads(line) for line in DEMO_CATALOG.read_text().splitlines() if line.strip()]
    return {str(row["id"]): row for row in [*rows, *EXTRA]}


def _search(client: TestClient, **params: object) -> dict[str, Any]:
    r = client.get("/search", params=params)
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


def _want(hits: list[dict[str, Any]], field: str) -> dict[str, tuple[int, float]]:
    """Each value's count and Σ of weights over `hits`, from the hits and the catalog file."""
    catalog, out = _catalog(), {}
    for hit in hits:
        book = catalog[hit["id"]]
        if field == "author":
            values = hit["authors"]
        elif field == "year":
            values = [] if hit["year"] is None else [f"{hit['year'] // 10 * 10}s"]
        elif field == "language":
            values = [] if hit["language"] is None else [hit["language"]]
        elif field == "subjects":
            values = list({s.casefold().replace("'", " "): s for s in book.get("subjects", [])})
        elif field == "publisher":
            named = book.get("publisher", book.get("publishers", []))
            values = [p.strip() for p in (named.split(";") if isinstance(named, str) else named)]
        else:
            values = ["moonfall"] if hit["id"].startswith("moon-") else []
        for v in values:
            count, weight = out.get(v, (0, 0.0))
            out[v] = (count + 1, weight + hit["weight"])
    return out


@pytest.mark.parametrize("query", QUERIES)
def test_a_value_counts_and_weighs_the_relevant_books_with_it(demo: TestClient, query: str) -> None:
    body = _search(demo, q=query, k=100, sort="-year", facets=",".join(FACETS), facet_size=50)
    hits = body["results"]  # the relevant books, all of them: fewer than a page of 100
    assert body["sorted_books"] == len(hits) < 100
    for field in FACETS:
        facet = body["facets"][field]
        assert facet["books"] == len(hits) and facet["more"] == 0
        assert facet["weight"] == pytest.approx(sum(h["weight"] for h in hits), rel=1e-9)
        got = {
            v["value"].casefold().replace("'", " "): (v["count"], v["weight"])
            for v in facet["values"]
        }
        want = {k.casefold().replace("'", " "): v for k, v in _want(hits, field).items()}
        assert got.keys() == want.keys(), field
        for value, (count, weight) in want.items():
            assert got[value][0] == count and got[value][1] == pytest.approx(weight, rel=1e-9)
        weights = [v["weight"] for v in facet["values"]]
        assert weights == sorted(weights, reverse=True)  # the heaviest first
        if field in ("year", "language"):  # one value a book, none for a book without
            held = sum(h["weight"] for h in hits if h[field] is not None)
            assert sum(weights) == pytest.approx(held, rel=1e-9)
            assert held <= facet["weight"] * (1 + 1e-12)
    assert body["facets"]["subjects"]["values"] and body["facets"]["author"]["values"]
    if query == "moonfall":
        assert body["facets"]["publisher"]["values"]


def test_the_size_caps_the_values_and_counts_the_rest(demo: TestClient) -> None:
    whole = _search(demo, q="machine learning", facets="author,subjects", facet_size=50)
    for field in ("author", "subjects"):
        every = whole["facets"][field]["values"]
        assert len(every) > 3
        for size in (1, 3, len(every) - 1, len(every)):
            facet = _search(demo, q="machine learning", facets=field, facet_size=size)["facets"]
            assert facet[field]["values"] == every[:size]
            assert facet[field]["more"] == len(every) - size
    assert _search(demo, q="machine learning")["facets"] is None


def test_the_floor_and_the_pool_at_their_edges(demo: TestClient) -> None:
    """A book at exactly 1% of the top weight is counted, one just under is not; no more than
    the first SORT_POOL books are."""
    index: ServedIndex = demo.app.state.searcher.index  # type: ignore[attr-defined]
    hits = [Hit(0, 0.0, 0.5, {}), Hit(1, 0.0, 0.5 * SORT_FLOOR, {})]
    under = Hit(2, 0.0, 0.5 * SORT_FLOOR * 0.999, {})
    got = facets(index, [*hits, under], ["language"])["language"]
    assert got.books == 2 and got.weight == pytest.approx(0.5 * (1 + SORT_FLOOR))
    many = [Hit(r % len(index), 0.0, 1.0, {}) for r in range(SORT_POOL + 1)]
    assert facets(index, many, ["year"])["year"].books == SORT_POOL


def test_each_value_filters_to_its_books(demo: TestClient) -> None:
    catalog = _catalog()
    body = _search(
        demo, q="moonfall", facets="subjects,series,publisher,author,year", facet_size=50
    )
    values = [v for f in body["facets"].values() for v in f["values"]]
    # as the catalog first writes it: the demo's rows come before EXTRA's "Children's Books"
    assert {"subject": "children's books"} in [v["filter"] for v in values]
    assert {"series": "Moonfall"} in [v["filter"] for v in values]
    assert {"publisher": "Farrar, Straus and Giroux"} in [v["filter"] for v in values]
    for value in values:
        kept = _search(demo, q="moonfall", k=100, **value["filter"])
        assert kept["matched"] >= value["count"]
        for hit in kept["results"]:
            book = catalog[hit["id"]]
            for name, wanted in value["filter"].items():
                if name == "subject":
                    folded = [s.casefold().replace("'", " ") for s in book.get("subjects", [])]
                    assert wanted.casefold().replace("'", " ") in folded
                elif name == "series":
                    assert hit["id"].startswith("moon-")
                elif name == "publisher":
                    assert wanted in _want([hit], "publisher")
                elif name == "author":
                    assert any(wanted.casefold() in a.casefold() for a in hit["authors"])
                else:
                    assert (hit["year"] >= int(wanted)) if name == "year_min" else True


def test_subject_and_series_filters_are_whole_names_case_and_accents_aside(
    demo: TestClient,
) -> None:
    """Every book under the heading and none other is matched; a series by its titles' markers
    and a catalog's column alike."""
    catalog = _catalog()
    under = {
        i for i, b in catalog.items() if "fiction" in [s.casefold() for s in b.get("subjects", [])]
    }
    for written in ("fiction", "FICTION", "Fíction"):
        body = _search(demo, q="a story", subject=written, k=100)
        assert body["matched"] == len(under) and {h["id"] for h in body["results"]} <= under
    science = _search(demo, q="the moon", subject="Science Fiction", k=100)
    assert {"moon-1", "moon-2"} <= {h["id"] for h in science["results"]}
    assert _search(demo, q="a story", subject="fict")["matched"] == 0  # whole, not a part
    series = _search(demo, q="a town", series="moonfall", k=100)
    assert series["matched"] == 3 and {h["id"] for h in series["results"]} == {
        "moon-1",
        "moon-2",
        "moon-3",
    }
    both = _search(demo, q="a town", series="Moonfall", subject="children's books")
    assert [h["id"] for h in both["results"]] == ["moon-1"]


def test_bad_facets_are_422_naming_the_problem(demo: TestClient) -> None:
    for params, words in [
        ({"facets": "price"}, "no facet 'price'"),
        ({"facets": "author,author"}, "named twice"),
        ({"facets": ""}, "no facet ''"),
        ({"facets": "author", "facet_size": 0}, "facet_size"),
        ({"facets": "author", "facet_size": 51}, "facet_size"),
        ({"subject": ""}, "subject"),
        ({"publisher": ""}, "publisher"),
        ({"publisher": "x" * 201}, "publisher"),
    ]:
        r = demo.get("/search", params={"q": "dragons", **params})
        assert r.status_code == 422 and words in r.text, (params, r.text)


def test_a_batch_facets_each_query_and_a_like_query_has_none(demo: TestClient) -> None:
    r = demo.post("/search", json={"queries": QUERIES[:2], "facets": "language"})
    assert r.status_code == 200, r.text
    for one, query in zip(r.json()["responses"], QUERIES[:2], strict=True):
        alone = _search(demo, q=query, facets="language")["facets"]["language"]
        got = one["facets"]["language"]
        assert got["books"] == alone["books"] and got["weight"] == pytest.approx(alone["weight"])
        for g, w in zip(got["values"], alone["values"], strict=True):
            assert (g["value"], g["count"]) == (w["value"], w["count"])
            assert g["weight"] == pytest.approx(w["weight"], rel=1e-6)  # a batch's rounding
    like = _search(demo, q="books like the hobbit", facets="author")
    assert like["like"] is not None and like["facets"] is None


@pytest.mark.parametrize("shards", [2, 3])
def test_the_name_filters_on_shards_answer_as_one_process(demo: TestClient, shards: int) -> None:
    """The router sends a subject or series filter as the rows its mask keeps: the shards hold
    no names."""
    searcher = demo.app.state.searcher  # type: ignore[attr-defined]
    url = demo.app.state.settings.database_url  # type: ignore[attr-defined]
    engine = db.create_db_engine(url)
    try:
        with Session(engine) as session:
            index = loaded_index.load_index(session=session, model=searcher.index.model)
            extras = store.book_extras(
                session=session, book_ids=index.ids, generation=index.generation
            )
            descriptions = store.book_descriptions(
                session=session, book_ids=index.ids, generation=index.generation
            )
    finally:
        engine.dispose()
    clients = [
        LocalShard(Shard(index, shard=s, shards=shards, device="cpu")) for s in range(shards)
    ]
    router = ServedIndex(
        index,
        ShardedKeys.of(index, clients),
        descriptions=descriptions,
        subjects=extras.subjects,
        series=extras.series,
        publishers=extras.publishers,
    )
    for params in (
        {"subject": "science fiction"},
        {"series": "Moonfall", "year_min": 2004},
        {"publisher": "harbour house"},
    ):
        options = PageAndFilters(k=10, **params).options()  # type: ignore[arg-type]
        want = searcher.search_now(["the moon falls"], options)[0]
        searcher.index, local = router, searcher.index
        try:
            got = searcher.search_now(["the moon falls"], options)[0]
        finally:
            searcher.index = local
        assert got.matched == want.matched > 0
        assert [h.book.id for h in got.results] == [h.book.id for h in want.results]
        for g, w in zip(got.results, want.results, strict=True):
            assert g.weight == pytest.approx(w.weight, rel=1e-6)


def test_a_subject_filter_on_both_databases(engine: Engine, tmp_path: Path) -> None:
    books: list[dict[str, object]] = [
        {"id": "a", "title": "Rivers", "description": "water", "subjects": ["Hydrology"]},
        {"id": "b", "title": "Lakes", "description": "water", "subjects": ["hydrology", "Lakes"]},
        {"id": "c", "title": "Seas", "description": "water"},
    ]
    with serve_books(engine, tmp_path, books) as client:
        body = _search(client, q="water", subject="HYDROLOGY", facets="subjects")
        assert body["matched"] == 2 and {h["id"] for h in body["results"]} == {"a", "b"}
        values = {v["value"]: v["count"] for v in body["facets"]["subjects"]["values"]}
        assert values == {"Hydrology": 2, "Lakes": 1}


def test_a_publisher_filter_is_the_whole_name_case_and_accents_aside(demo: TestClient) -> None:
    """A publisher as a name, a list or a ";" list; whole, not a part; beside another filter."""
    for written in ("Tideline Press", "TIDELINE PRESS", "Tídeline Préss"):
        body = _search(demo, q="the moon", publisher=written, k=100)
        assert {h["id"] for h in body["results"]} == {"moon-1", "moon-2"} and body["matched"] == 2
    harbour = _search(demo, q="the moon", publisher="harbour house", k=100)
    assert {h["id"] for h in harbour["results"]} == {"moon-2", "moon-3"}
    giroux = _search(demo, q="the moon", publisher="farrar straus and giroux")
    assert [h["id"] for h in giroux["results"]] == ["moon-3"]  # a comma is no separator
    assert _search(demo, q="the moon", publisher="Tideline")["matched"] == 0
    both = _search(demo, q="the moon", publisher="Harbour House", series="Moonfall", year_max=2008)
    assert [h["id"] for h in both["results"]] == ["moon-2"]


def test_a_publisher_facet_and_filter_on_both_databases(engine: Engine, tmp_path: Path) -> None:
    books: list[dict[str, object]] = [
        {"id": "a", "title": "Rivers", "description": "water", "publisher": "Penguin Books"},
        {"id": "b", "title": "Lakes", "description": "water", "publishers": ["penguin books"]},
        {"id": "c", "title": "Seas", "description": "water", "publisher": "Vintage"},
        {"id": "d", "title": "Ponds", "description": "water"},
    ]
    with serve_books(engine, tmp_path, books) as client:
        body = _search(client, q="water", facets="publisher")
        values = {v["value"]: v["count"] for v in body["facets"]["publisher"]["values"]}
        assert values == {"Penguin Books": 2, "Vintage": 1}
        kept = _search(client, q="water", publisher="PENGUIN BOOKS")
        assert kept["matched"] == 2 and {h["id"] for h in kept["results"]} == {"a", "b"}


def test_an_author_facets_filter_keeps_every_spelling_it_counted(
    engine: Engine, tmp_path: Path
) -> None:
    """The author facet counts a name however its books spell it (folded); its filter, the
    `author` filter, keeps them all: whole words accents and punctuation aside, beside the
    substring it always matched."""
    books: list[dict[str, object]] = [
        {"id": "a", "title": "Rings", "description": "a ring", "authors": ["J.R.R. Tolkien"]},
        {"id": "b", "title": "Hobbit", "description": "a ring", "authors": ["J. R. R. Tolkien"]},
        {"id": "c", "title": "Cien", "description": "a ring", "authors": ["G. García Márquez"]},
        {"id": "d", "title": "Other", "description": "a ring", "authors": ["Ann Rtolkién", "X Y"]},
    ]
    with serve_books(engine, tmp_path, books) as client:
        body = _search(client, q="a ring", facets="author", facet_size=50)
        tolkien = [v for v in body["facets"]["author"]["values"] if v["count"] == 2]
        assert len(tolkien) == 1, body["facets"]["author"]
        kept = _search(client, q="a ring", **tolkien[0]["filter"])
        assert {h["id"] for h in kept["results"]} == {"a", "b"}  # not "Rtolkien": whole words
        for written, want in [
            ("garcia marquez", {"c"}),  # accents aside
            ("García-Márquez", {"c"}),  # punctuation aside
            ("olkie", {"a", "b"}),  # a substring, as ever (as written: "olkié" is not it)
            ("rtolkien", {"d"}),  # a whole word, accents aside
            ("n rtolkie", set()),  # words are whole: "ann rtolkien" is not "n rtolkie"
            ("rtolkien x", set()),  # words never span two names
            ("...", set()),  # no words, and no name holds it
        ]:
            got = _search(client, q="a ring", author=written)
            assert {h["id"] for h in got["results"]} == want, written
