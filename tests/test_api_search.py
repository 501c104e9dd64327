"""The REST API over a real database (SQLite and PostgreSQL), with the fake encoder."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from fastapi.testclient import TestClient
from sqlalchemy import Engine

from conftest import FakeEncoder, index_books
from indexer import db
from service.api.main import create_app
from service.config.settings import ServiceSettings

BOOKS = [
    {
        "id": "dl",
        "title": "Deep Learning",
        "description": "neural networks generative models",
        "authors": ["Ian Goodfellow", "Yoshua Bengio"],
        "year": 2016,
        "language": "eng",
    },
    {
        "id": "gdl",
        "title": "Generative Deep Learning",
        "description": "generative models diffusion",
        "authors": ["David Foster"],
        "year": 2019,
        "language": "eng",
    },
    {
        "id": "dbi",
        "title": "Database Internals",
        "description": "storage engines btrees",
        "authors": ["Alex Petrov"],
        "year": 2019,
        "language": "eng",
    },
    {
        "id": "hp",
        "title": "Harry Potter",
        "description": "wizard school magic",
        "authors": ["J.K. Rowling"],
        "year": 1997,
        "language": "en-GB",
    },
    {
        "id": "dune",
        "title": "Dune",
        "description": "desert planet spice",
        "year": 1965,
        "language": "eng",
        "authors": ["Frank Herbert"],
    },
    {
        "id": "quijote",
        "title": "Don Quijote",
        "description": "caballero molinos",
        "authors": ["Miguel de Cervantes"],
        "language": "spa",
    },
    {"id": "isbn10:0/1", "title": "A book with a slash in its id", "authors": []},
]


@pytest.fixture
def settings(engine: Engine, tmp_path: Path) -> ServiceSettings:
    url = index_books(engine, tmp_path, BOOKS)
    settings = ServiceSettings(database_url=url, device="cpu")
    # under ATTEND_CHUNK_SIZE's bound (64), so that this small catalog streams in chunks:
    # assignment is not validated
    settings.chunk_size = 3
    return settings


@pytest.fixture
def client(settings: ServiceSettings) -> Iterator[TestClient]:
    with TestClient(create_app(settings, encoder=FakeEncoder())) as c:
        yield c


def test_search_ranks_with_weights(client: TestClient) -> None:
    # the description head alone: weights are one softmax of the description scores
    r = client.get("/search", params={"q": "generative models", "k": 7, "heads": "description:1"})
    assert r.status_code == 200
    body = r.json()
    assert body["query"] == "generative models"
    assert body["scale"] == body["heads"]["description"]["scale"] == 25.0  # ATTEND_HEAD_SCALES
    assert body["catalog_size"] == 7 and body["matched"] == 7 and body["model"] == FakeEncoder.name
    hits = body["results"]
    assert [h["rank"] for h in hits] == list(range(1, 8))
    assert {hits[0]["id"], hits[1]["id"]} == {"dl", "gdl"}
    weights = [h["weight"] for h in hits]
    assert weights == sorted(weights, reverse=True)
    assert math.isclose(sum(weights), 1.0, rel_tol=1e-5)  # k = N: the whole distribution
    for a, b in itertools.pairwise(hits):
        assert math.isclose(
            b["weight"] / a["weight"],
            math.exp(body["scale"] * (b["score"] - a["score"])),
            rel_tol=1e-4,
        )
    assert hits[0]["authors"] and "year" in hits[0]


def test_paging_continues_the_ranking(client: TestClient) -> None:
    full = client.get("/search", params={"q": "deep learning", "k": 6}).json()["results"]
    page2 = client.get("/search", params={"q": "deep learning", "k": 3, "offset": 3}).json()
    assert [h["id"] for h in page2["results"]] == [h["id"] for h in full[3:6]]
    assert [h["rank"] for h in page2["results"]] == [4, 5, 6]
    assert page2["offset"] == 3 and page2["k"] == 3


@pytest.mark.parametrize(
    ("params", "ids"),
    [
        ({"author": "goodfellow"}, {"dl"}),
        ({"author": "ROWLING"}, {"hp"}),
        ({"year_min": 2019}, {"gdl", "dbi"}),
        ({"year_max": 1997}, {"hp", "dune"}),
        ({"year_min": 1990, "year_max": 2016}, {"hp", "dl"}),
        ({"language": "SPA"}, {"quijote"}),
        ({"language": "eng", "year_min": 2017}, {"gdl", "dbi"}),
    ],
)
def test_filters_are_the_attention_mask(
    client: TestClient, params: dict[str, object], ids: set[str]
) -> None:
    body = client.get("/search", params={"q": "books", "k": 10, **params}).json()
    assert {h["id"] for h in body["results"]} == ids
    assert body["matched"] == len(ids) and body["catalog_size"] == 7
    # the softmax ran over the matched books only: their weights sum to 1
    assert math.isclose(sum(h["weight"] for h in body["results"]), 1.0, rel_tol=1e-5)


def test_a_filter_matching_nothing_is_an_empty_answer(client: TestClient) -> None:
    r = client.get("/search", params={"q": "books", "author": "nobody at all"})
    assert r.status_code == 200
    assert r.json()["matched"] == 0 and r.json()["results"] == []


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({}, "q: Field required"),
        ({"q": ""}, "q: the query is empty"),
        ({"q": "   "}, "q: the query is empty"),
        ({"q": "a\x00b"}, "control characters"),
        ({"q": "x" * 513}, "at most 512 characters"),
        ({"q": "x", "k": 0}, "k: Input should be greater than or equal to 1"),
        ({"q": "x", "k": 101}, "k: Input should be less than or equal to 100"),
        ({"q": "x", "k": "ten"}, "k: Input should be a valid integer"),
        ({"q": "x", "offset": -1}, "offset"),
        (
            {"q": "x", "year_min": 2000, "year_max": 1990},
            "year_min (2000) is after year_max (1990)",
        ),
        ({"q": "x", "colour": "red"}, "unknown parameter 'colour' (this endpoint takes k, "),
        ({"q": "x", "ofset": 3}, "unknown parameter 'ofset' (did you mean 'offset'?)"),
        ({"q": "x", "year-min": 3}, "unknown parameter 'year-min' (did you mean 'year_min'?)"),
    ],
)
def test_bad_search_input_is_a_422_with_a_message(
    client: TestClient, params: dict[str, object], message: str
) -> None:
    r = client.get("/search", params=params)
    assert r.status_code == 422
    assert message in r.json()["detail"]


def test_query_for_q_is_named_with_what_was_meant(client: TestClient) -> None:
    """Issue 24: `/search?query=dune` answered `q: Field required; Extra inputs are not
    permitted`, naming neither `query` nor `q`."""
    r = client.get("/search", params={"query": "dune"})
    assert r.status_code == 422
    assert r.json() == {"detail": "unknown parameter 'query' (did you mean 'q'?)"}
    r = client.get("/search", params={"query": "dune", "k": 0})
    assert r.json()["detail"] == (
        "unknown parameter 'query' (did you mean 'q'?); "
        "k: Input should be greater than or equal to 1"
    )
    r = client.post("/search", json={"query": "dune"})
    assert r.status_code == 422
    assert r.json() == {"detail": "unknown body field 'query' (did you mean 'queries'?)"}
    r = client.get("/books/nope/similar", params={"limit": 3})
    assert r.json() == {"detail": "unknown parameter 'limit' (did you mean 'k'?)"}


def test_post_search_batches_queries(client: TestClient) -> None:
    queries = ["generative models", "wizard school", "desert planet"]
    r = client.post("/search", json={"queries": queries, "k": 3, "year_max": 2100})
    assert r.status_code == 200
    responses = r.json()["responses"]
    assert [x["query"] for x in responses] == queries
    for q, batched in zip(queries, responses, strict=True):
        single = client.get("/search", params={"q": q, "k": 3, "year_max": 2100}).json()
        assert [h["id"] for h in batched["results"]] == [h["id"] for h in single["results"]]
        for a, b in zip(batched["results"], single["results"], strict=True):
            assert math.isclose(a["weight"], b["weight"], rel_tol=1e-5)


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        ({"queries": []}, 422, "queries: List should have at least 1 item"),
        ({"queries": ["ok", " "]}, 422, "the query is empty"),
        ({"queries": ["x"] * 65}, 422, "at most 64 items"),
        ({"q": "x"}, 422, "queries: Field required"),
    ],
)
def test_bad_post_search_is_a_422(
    client: TestClient, body: dict[str, object], status: int, message: str
) -> None:
    r = client.post("/search", json=body)
    assert r.status_code == status and message in r.json()["detail"]


def test_malformed_json_body_is_a_422(client: TestClient) -> None:
    r = client.post("/search", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 422 and isinstance(r.json()["detail"], str)


def test_get_book(client: TestClient) -> None:
    r = client.get("/books/dl")
    assert r.status_code == 200
    assert r.json() == {
        "id": "dl",
        "title": "Deep Learning",
        "description": "neural networks generative models",
        "authors": ["Ian Goodfellow", "Yoshua Bengio"],
        "year": 2016,
        "language": "eng",
        "metadata": {},
    }
    assert client.get("/books/isbn10:0/1").json()["title"] == "A book with a slash in its id"


def test_unknown_book_is_a_404_naming_the_id(client: TestClient) -> None:
    r = client.get("/books/no-such-book")
    assert r.status_code == 404
    assert r.json() == {"detail": "no book with id 'no-such-book'"}


def test_healthz_and_docs(client: TestClient) -> None:
    health = client.get("/healthz").json()
    assert isinstance(health.pop("index_id"), str)  # the database's, read at start-up
    assert health == {
        "status": "ok",
        "catalog_size": 7,
        "model": FakeEncoder.name,
        "device": "cpu",
        "generation": 1,
    }
    assert client.get("/docs").status_code == 200
    schema = client.get("/openapi.json").json()
    weight = schema["components"]["schemas"]["SearchHit"]["properties"]["weight"]
    assert "softmax" in weight["description"]
    # the routes return pre-rendered JSON (ModelJSON); /docs still names their schemas
    for method, name in (("get", "SearchResponse"), ("post", "SearchBatchResponse")):
        ok = schema["paths"]["/search"][method]["responses"]["200"]["content"]
        assert ok["application/json"]["schema"]["$ref"] == f"#/components/schemas/{name}"


def test_an_empty_index_answers_503(database_url: str) -> None:
    engine = db.create_db_engine(database_url)
    db.upgrade(engine)
    engine.dispose()
    settings = ServiceSettings(database_url=database_url, device="cpu")
    with TestClient(create_app(settings, encoder=FakeEncoder())) as client:
        r = client.get("/search", params={"q": "anything"})
        assert r.status_code == 503 and "attend index" in r.json()["detail"]


def test_the_service_refuses_an_unmigrated_database(database_url: str) -> None:
    app = create_app(ServiceSettings(database_url=database_url), encoder=FakeEncoder())
    with pytest.raises(db.SchemaError, match="attend db upgrade"), TestClient(app):
        pass


def test_the_service_refuses_an_index_built_with_another_model(settings: ServiceSettings) -> None:
    class OtherModel(FakeEncoder):
        name = "other-model"

    with (
        pytest.raises(db.SchemaError, match="built with 'fake-hashing-64'"),
        TestClient(create_app(settings, encoder=OtherModel())),
    ):
        pass


def test_heads_breakdown_sums_to_the_weight(client: TestClient) -> None:
    r = client.get("/search", params={"q": "Harry Potter wizard", "k": 7})
    assert r.status_code == 200, r.text
    body = r.json()
    # the defaults; the query names no author, so the author head abstains
    assert set(body["heads"]) == {"title", "description", "lexical", "author"}
    assert body["heads"]["author"] == {"weight": 0.0, "scale": 10.0, "abstained": True}
    assert body["author"] is None
    assert math.isclose(sum(h["weight"] for h in body["heads"].values()), 1.0, rel_tol=1e-9)
    scales = {name: head["scale"] for name, head in body["heads"].items()}
    assert scales == {"title": 19.0, "description": 25.0, "lexical": 1.1, "author": 10.0}
    assert body["results"][0]["id"] == "hp"
    for hit in body["results"]:
        shares = [h["share"] for h in hit["heads"].values()]
        assert math.isclose(sum(shares), hit["weight"], rel_tol=1e-9)
        for name, part in hit["heads"].items():
            pi = body["heads"][name]["weight"]
            assert math.isclose(part["share"], pi * part["probability"], rel_tol=1e-9)
    assert math.isclose(sum(h["weight"] for h in body["results"]), 1.0, rel_tol=1e-5)  # k = N
    weights = [h["weight"] for h in body["results"]]
    entropy = -sum(w * math.log(w) for w in weights if w > 0)
    assert math.isclose(body["entropy"], entropy, rel_tol=1e-4)


def test_head_weights_are_normalised_and_lexical_abstains_without_evidence(
    client: TestClient,
) -> None:
    body = client.get("/search", params={"q": "wizard", "heads": "title:1,lexical:3"}).json()
    assert body["heads"] == {
        "title": {"weight": 0.25, "scale": 19.0, "abstained": False},
        "lexical": {"weight": 0.75, "scale": 1.1, "abstained": False},
    }
    assert body["no_strong_match"] is False
    # no query word is in the catalog: the lexical head has no evidence and abstains, and says so
    body = client.get("/search", params={"q": "zzyzx", "heads": "title:1,lexical:3"}).json()
    assert body["heads"] == {
        "title": {"weight": 1.0, "scale": 19.0, "abstained": False},
        "lexical": {"weight": 0.0, "scale": 1.1, "abstained": True},
    }
    assert body["no_strong_match"] is True  # no word of it in any book, whatever the strength
    # asked for alone, it has nothing to say: no results (never books in catalog order), and
    # the response says the head abstained
    body = client.get("/search", params={"q": "zzyzx", "heads": "lexical:1", "k": 7}).json()
    assert body["no_strong_match"] is True
    assert body["results"] == []
    assert body["heads"] == {"lexical": {"weight": 0.0, "scale": 1.1, "abstained": True}}
    body = client.get("/search", params={"q": "qwerty", "heads": "author:1"}).json()
    assert body["results"] == [] and body["heads"]["author"]["abstained"] is True
    posted = client.post("/search", json={"queries": ["wizard"], "heads": "description:2"})
    assert posted.json()["responses"][0]["heads"] == {
        "description": {"weight": 1.0, "scale": 25.0, "abstained": False}
    }


class SynonymEncoder(FakeEncoder):
    """The fake encoder that reads "sorcerer" as "wizard", as a sentence embedding places a
    synonym near the word: a strong match for a query none of whose words is in a book."""

    def _word(self, word: str) -> torch.Tensor:
        return super()._word("wizard" if word == "sorcerer" else word)


def test_a_strong_match_with_no_query_word_in_the_catalog_is_no_strong_match(
    settings: ServiceSettings,
) -> None:
    """The query "sorcerer" is in no book, yet embeds as "wizard": the description head puts
    nearly all its weight on Harry Potter (match strength ≥ 0.55), and the vocabulary rule
    alone says no strong match. "wizard" itself, as strong, is a strong match."""
    with TestClient(create_app(settings, encoder=SynonymEncoder())) as client:
        answers = {}
        for q in ("sorcerer", "wizard"):
            r = client.get("/search", params={"q": q, "heads": "description:1"})
            assert r.status_code == 200, r.text
            answers[q] = r.json()
    for body in answers.values():
        assert body["results"][0]["id"] == "hp"
        assert body["match_strength"] >= 0.55  # searcher.NO_STRONG_MATCH_BELOW
    assert answers["sorcerer"]["match_strength"] == answers["wizard"]["match_strength"]
    assert answers["sorcerer"]["no_strong_match"] is True, "no word of the query is in a book"
    assert answers["wizard"]["no_strong_match"] is False


@pytest.mark.parametrize(
    ("heads", "detail"),
    [
        ("title:0.5,nope:0.5", "unknown head 'nope'"),
        ("title:-1,description:1", "≥ 0"),
        ("title:0,lexical:0", "at least one head"),
        ("title", "expected name:weight"),
        ("title:abc", "not a number"),
        ("title:nan", "finite"),
        ("title:1,title:2", "twice"),
        ("", "heads"),
    ],
)
def test_bad_head_weights_are_422(client: TestClient, heads: str, detail: str) -> None:
    r = client.get("/search", params={"q": "wizard", "heads": heads})
    assert r.status_code == 422
    assert detail in r.json()["detail"]
    r = client.post("/search", json={"queries": ["wizard"], "heads": heads})
    assert r.status_code == 422


def test_lexical_head_finds_exact_author_names(client: TestClient) -> None:
    body = client.get("/search", params={"q": "Petrov", "heads": "lexical:1", "k": 1}).json()
    assert body["results"][0]["id"] == "dbi"
    assert body["results"][0]["heads"]["lexical"]["score"] > 0
