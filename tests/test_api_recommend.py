"""GET /books/{id}/similar, POST /recommend and GET /books/{id}/explain over a real database
(SQLite and PostgreSQL), with the fake encoder (a word's vector is its hash)."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine

from conftest import FakeEncoder, index_books, serve_books
from service.api.main import create_app
from service.config.settings import ServiceSettings

BOOKS = [
    {"id": "dune", "title": "Dune", "description": "desert planet spice empire sandworms"},
    {"id": "messiah", "title": "Dune Messiah", "description": "desert planet spice emperor"},
    {"id": "found", "title": "Foundation", "description": "galactic empire psychohistory"},
    {"id": "empire", "title": "Foundation and Empire", "description": "galactic empire mule"},
    {"id": "hp", "title": "Harry Potter", "description": "wizard school magic"},
    {"id": "hobbit", "title": "The Hobbit", "description": "wizard dragon treasure"},
    {"id": "a/b", "title": "Slash", "description": "an id with a slash"},
]


@pytest.fixture
def client(engine: Engine, tmp_path: Path) -> Iterator[TestClient]:
    settings = ServiceSettings(database_url=index_books(engine, tmp_path, BOOKS), device="cpu")
    settings.chunk_size = 3  # under the bound (64), to stream this small catalog in chunks
    with TestClient(create_app(settings, encoder=FakeEncoder())) as c:
        yield c


def test_similar_excludes_the_book_itself(client: TestClient) -> None:
    r = client.get("/books/dune/similar", params={"k": 10})
    assert r.status_code == 200, r.text
    body = r.json()
    ids = [h["id"] for h in body["results"]]
    assert "dune" not in ids and len(ids) == len(BOOKS) - 1 == body["matched"]
    assert ids[0] == "messiah"  # shares "dune", "desert", "planet", "spice"
    assert math.isclose(sum(h["weight"] for h in body["results"]), 1.0, rel_tol=1e-5)
    assert [h["rank"] for h in body["results"]] == list(range(1, len(ids) + 1))
    assert client.get("/books/a/b/similar").status_code == 200  # ids with slashes


def test_recommend_attributes_weight_to_liked_books(client: TestClient) -> None:
    r = client.post("/recommend", json={"liked": ["dune", "found"], "k": 3})
    assert r.status_code == 200, r.text
    body = r.json()
    ids = [h["id"] for h in body["results"]]
    assert {"dune", "found"}.isdisjoint(ids) and body["matched"] == len(BOOKS) - 2
    assert set(ids[:2]) == {"messiah", "empire"}
    for hit in body["results"]:
        shares = {b["id"]: b["share"] for b in hit["because"]}
        assert set(shares) == {"dune", "found"}
        assert math.isclose(sum(shares.values()), 1.0, rel_tol=1e-9)
    by_id = {h["id"]: h for h in body["results"]}
    assert by_id["messiah"]["because"][0]["id"] == "dune"  # mostly from Dune
    assert by_id["empire"]["because"][0]["id"] == "found"
    assert by_id["messiah"]["because"][0]["share"] > 0.5


def test_disliked_books_push_candidates_down_and_are_never_returned(client: TestClient) -> None:
    base = client.post("/recommend", json={"liked": ["hobbit"], "k": 6}).json()["results"]
    pushed = client.post(
        "/recommend", json={"liked": ["hobbit"], "disliked": ["messiah"], "k": 6}
    ).json()["results"]
    weight = {h["id"]: h["weight"] for h in base}
    after = {h["id"]: h["weight"] for h in pushed}
    assert "messiah" not in after and "hobbit" not in after
    # like the disliked book: down against one unlike it (the weights still sum to 1)
    assert after["dune"] / after["hp"] < weight["dune"] / weight["hp"]


@pytest.mark.parametrize(
    ("body", "status", "detail"),
    [
        ({"liked": []}, 422, "liked"),
        ({"liked": ["nope"]}, 404, "no book with id 'nope'"),
        ({"liked": ["dune"], "disliked": ["gone"]}, 404, "no book with id 'gone'"),
        ({"liked": ["dune"], "k": 0}, 422, "k"),
        ({"liked": ["dune"], "extra": 1}, 422, "extra"),
        ({"liked": [""]}, 422, "liked"),
    ],
)
def test_recommend_errors(
    client: TestClient, body: dict[str, object], status: int, detail: str
) -> None:
    r = client.post("/recommend", json=body)
    assert r.status_code == status
    assert detail in r.json()["detail"]


def test_similar_and_explain_unknown_ids_are_404(client: TestClient) -> None:
    for path in ("/books/nope/similar", "/books/nope/explain?q=x"):
        r = client.get(path)
        assert r.status_code == 404 and r.json() == {"detail": "no book with id 'nope'"}
    assert client.get("/books/dune/similar?k=0").status_code == 422
    assert client.get("/books/dune/explain").status_code == 422  # q is required
    assert client.get("/books/dune/explain?q=%20").status_code == 422


def test_explain_offsets_point_at_the_matched_words(client: TestClient) -> None:
    r = client.get("/books/hobbit/explain", params={"q": "a dragon and a wizard"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert [w["text"] for w in body["query_words"]] == ["dragon", "wizard"]  # stop words left out
    fields = {"title": body["title"], "description": body["description"]}
    for w in body["book_words"]:
        assert fields[w["field"]][w["start"] : w["end"]] == w["text"]
    marked = {(h["field"], fields[h["field"]][h["start"] : h["end"]]) for h in body["highlights"]}
    assert {("description", "dragon"), ("description", "wizard")} <= marked
    for row in body["weights"]:
        assert math.isclose(sum(row), 1.0, rel_tol=1e-3)
    top = body["attends"][0]["top"][0]
    assert body["book_words"][top["word"]]["text"] == "dragon"


def test_the_page_is_served(client: TestClient) -> None:
    r = client.get("/")
    assert r.status_code == 200 and "text/html" in r.headers["content-type"]
    assert '<script src="/static/app.js">' in r.text
    assert client.get("/static/app.js").headers["content-type"].startswith("text/javascript")
    assert client.get("/static/style.css").status_code == 200
    assert client.get("/static/nope.js").status_code == 404
    assert client.get("/static/..%2Fmain.py").status_code == 404


SERIES = [
    {
        "id": "mort",
        "title": "Mort (Discworld  #4)",
        "authors": ["Terry Pratchett"],
        "description": "death takes an apprentice",
    },
    {
        "id": "gods",
        "title": "Small Gods (Discworld  #13)",
        "authors": ["Terry Pratchett"],
        "description": "a tortoise god and his last believer",
    },
    {
        "id": "omens",
        "title": "Good Omens",
        "authors": ["Terry Pratchett", "Neil Gaiman"],
        "description": "an angel and a demon avert the apocalypse",
    },
    {
        "id": "reaper",
        "title": "The Reaper",
        "authors": ["Someone Else"],
        "description": "death takes an apprentice and a holiday",
    },
    {
        "id": "tortoise",
        "title": "Tortoise Tales",
        "authors": ["Another Writer"],
        "description": "a tortoise god and a believer",
    },
]


@pytest.fixture
def series(engine: Engine, tmp_path: Path) -> Iterator[TestClient]:
    with serve_books(engine, tmp_path, SERIES) as c:
        yield c


def test_similar_finds_the_series_then_the_author(series: TestClient) -> None:
    """Under the default heads a series book's first similar book is its series mate and the
    author's other book comes next, above books whose descriptions say the same words."""
    body = series.get("/books/mort/similar", params={"k": 4}).json()
    ids = [h["id"] for h in body["results"]]
    assert ids[:2] == ["gods", "omens"], ids
    assert set(body["heads"]) == {"title", "description", "lexical", "author", "series", "subjects"}
    assert body["heads"]["subjects"]["abstained"]  # a catalog without subject headings
    assert body["results"][0]["heads"]["series"]["share"] > 0  # from its series mate
    assert body["results"][1]["heads"]["series"]["share"] == 0  # Good Omens: no series
    assert body["results"][1]["heads"]["author"]["share"] > 0  # but Pratchett's
    for hit in body["results"]:
        assert math.isclose(sum(h["share"] for h in hit["heads"].values()), hit["weight"])
    # the description head alone ranks by the description: the other book about death first
    alone = series.get("/books/mort/similar", params={"k": 4, "heads": "description:1"}).json()
    assert alone["results"][0]["id"] == "reaper"
    assert set(alone["heads"]) == {"description"} and alone["heads"]["description"]["weight"] == 1


def test_recommend_says_which_book_and_head_each_share_came_from(series: TestClient) -> None:
    r = series.post(
        "/recommend", json={"liked": ["mort", "tortoise"], "k": 3, "heads": "title:1,lexical:1"}
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert set(body["heads"]) == {"title", "lexical"}
    assert math.isclose(sum(h["weight"] for h in body["heads"].values()), 1.0)
    for hit in body["results"]:
        assert math.isclose(sum(b["share"] for b in hit["because"]), 1.0, rel_tol=1e-9)
        for because in hit["because"]:
            assert set(because["heads"]) <= {"title", "lexical"}
            assert math.isclose(sum(because["heads"].values()), because["share"], abs_tol=1e-12)
    by_id = {h["id"]: h for h in body["results"]}
    assert by_id["gods"]["because"][0]["id"] == "mort"  # the series mate: from Mort


def test_two_liked_books_ask_with_the_recommend_heads_one_with_the_similar_heads(
    engine: Engine, tmp_path: Path
) -> None:
    """ATTEND_RECOMMEND_HEADS weighs the heads of two or more liked books asking together; one
    liked book asks as its similar books do; a request's own heads override both."""
    with serve_books(
        engine, tmp_path, SERIES, similar_heads="title:1,lexical:1", recommend_heads="description:1"
    ) as c:
        pair = c.post("/recommend", json={"liked": ["mort", "tortoise"], "k": 3}).json()
        assert {h for h, info in pair["heads"].items() if info["weight"] > 0} == {"description"}
        for hit in pair["results"]:
            assert math.isclose(sum(b["share"] for b in hit["because"]), 1.0, abs_tol=1e-9)
        one = c.post("/recommend", json={"liked": ["mort", "mort"], "k": 3}).json()
        assert {h for h, info in one["heads"].items() if info["weight"] > 0} <= {"title", "lexical"}
        similar = c.get("/books/mort/similar", params={"k": 3}).json()
        assert one["heads"] == similar["heads"]
        asked = c.post(
            "/recommend", json={"liked": ["mort", "tortoise"], "k": 3, "heads": "title:1"}
        ).json()
        assert {h for h, info in asked["heads"].items() if info["weight"] > 0} == {"title"}


@pytest.mark.parametrize("heads", ["nope:1", "title:0", "title:x", "title:-1"])
def test_similar_and_recommend_refuse_bad_heads(series: TestClient, heads: str) -> None:
    r = series.get("/books/mort/similar", params={"heads": heads})
    assert r.status_code == 422 and "heads" in r.text
    r = series.post("/recommend", json={"liked": ["mort"], "heads": heads})
    assert r.status_code == 422 and "heads" in r.text


def test_a_book_with_no_word_in_another_gets_no_lexical_part(series: TestClient) -> None:
    """The lexical head asks with a book's title and description (BM25 over every book's), not
    with its authors: a shared name is the author head's."""
    body = series.get("/books/gods/similar", params={"heads": "description:1,lexical:1"}).json()
    assert not body["heads"]["lexical"]["abstained"]  # "tortoise", "god": in Tortoise Tales
    lonely = series.get("/books/omens/similar", params={"heads": "title:1,lexical:1"}).json()
    # "angel", "demon", "avert", "apocalypse": in no other book; "Pratchett" is not in its text
    scale = ServiceSettings().similar.scales["lexical"]
    assert lonely["heads"]["lexical"] == {"weight": 0.0, "scale": scale, "abstained": True}
    assert lonely["heads"]["title"]["weight"] == 1.0


def test_heads_without_evidence_for_a_book_abstain(series: TestClient) -> None:
    body = series.get("/books/reaper/similar").json()  # no series, no other book by its author
    assert body["heads"]["series"] == {"weight": 0.0, "scale": 2.0, "abstained": True}
    assert body["heads"]["author"] == {"weight": 0.0, "scale": 5.0, "abstained": True}
    used = {h for h, info in body["heads"].items() if info["weight"] > 0}
    assert used == {"title", "description", "lexical"}
    assert math.isclose(sum(body["heads"][h]["weight"] for h in used), 1.0)
    for hit in body["results"]:
        assert set(hit["heads"]) == used


SHELVED = [
    {
        "id": "hp",
        "title": "Harry Potter",
        "description": "an orphan boy at a boarding school",
        "subjects": ["Fantasy", "children's books"],
    },
    {
        "id": "catcher",
        "title": "The Catcher",
        "description": "an orphan boy at a boarding school",
        "subjects": ["coming of age"],
    },
    {
        "id": "hobbit",
        "title": "The Hobbit",
        "description": "a dragon and a burglar",
        "subjects": "fantasy; adventure",
    },
    {"id": "plain", "title": "Plain", "description": "an orphan boy at a boarding school"},
]


def test_a_book_under_subject_headings_gets_the_books_under_them(
    engine: Engine, tmp_path: Path
) -> None:
    """The catalog's own headings (metadata `subjects`, a list or a `;`-separated string) are
    evidence of their own: with the subjects head weighed above the description's, the Hobbit,
    which shares "fantasy" with Harry Potter, outweighs two books with Harry Potter's very
    description but no heading in common (by default the head is one topical opinion among
    the others, and those copies come first)."""
    with serve_books(engine, tmp_path, SHELVED) as client:
        heads = "subjects:1,description:0.2"
        body = client.get("/books/hp/similar", params={"k": 3, "heads": heads}).json()
        assert body["results"][0]["id"] == "hobbit", body["results"]
        assert body["results"][0]["heads"]["subjects"]["share"] > 0
        assert not body["heads"]["subjects"]["abstained"]
        lonely = client.get("/books/plain/similar").json()  # no headings at all
        assert lonely["heads"]["subjects"]["abstained"]


# Two candidates with the liked book's one shared word ("wizard") alike, one of them with the
# disliked book's ("desert"): only the lexical dislike can tell them apart.
LEXICAL_DISLIKE = [
    {"id": "liked", "title": "Quill", "description": "wizard dragon treasure"},
    {"id": "near", "title": "Ember", "description": "wizard desert"},
    {"id": "far", "title": "Frost", "description": "wizard school"},
    {"id": "disliked", "title": "Sand", "description": "desert planet spice"},
    {"id": "sea", "title": "Glass", "description": "ocean voyage storm"},
    {"id": "hills", "title": "Stone", "description": "mountain river forest"},
]


def test_a_disliked_books_words_push_candidates_down_in_the_lexical_head(
    engine: Engine, tmp_path: Path
) -> None:
    """In the lexical head alone, a candidate with a disliked book's term scores lower by
    DISLIKE_STRENGTH times its BM25 score for the disliked book's terms (book_ranking's
    `lexical_part`): the two candidates tie without the dislike and part with it."""
    with serve_books(engine, tmp_path, LEXICAL_DISLIKE) as client:
        weights = []
        for disliked in ([], ["disliked"]):
            body = {"liked": ["liked"], "disliked": disliked, "k": 4, "heads": "lexical:1"}
            r = client.post("/recommend", json=body)
            assert r.status_code == 200, r.text
            assert not r.json()["heads"]["lexical"]["abstained"]
            weights.append({h["id"]: h["weight"] for h in r.json()["results"]})
    before, after = weights
    assert math.isclose(before["near"], before["far"], rel_tol=1e-6), before
    # "desert" weighs against "near": it drops to the lexical head's second place, under "far"
    assert after["far"] > after["near"], after
    ranks = {h["id"]: h["rank"] for h in r.json()["results"]}
    assert ranks["far"] < ranks["near"]
