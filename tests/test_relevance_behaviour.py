"""What a reader sees of the default ranking, with the real model: the demo catalog and a few
books added for the cases (a series, a shared first name, several books by one author), indexed
into SQLite in tmp_path and served by the real app. Each test states a behaviour, not a figure
copied from a run: a series mate first, a first name alone making no book similar, a query that
names an author ranking that author's books first, and a subject that contains a name ranking
as a subject."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from conftest import serve_demo_with

pytestmark = pytest.mark.model

EXTRA = [
    {
        "id": "mort",
        "title": "Mort (Discworld, #4)",
        "authors": ["Terry Pratchett"],
        "description": "Death takes on a gangling apprentice, who falls for a princess he was "
        "supposed to collect and bends reality to save her.",
    },
    {
        "id": "small-gods",
        "title": "Small Gods (Discworld, #13)",
        "authors": ["Terry Pratchett"],
        "description": "A novice monk hears his god speak to him from the body of a tortoise, "
        "and a theocratic empire's inquisition wants a word.",
    },
    {
        "id": "guards-guards",
        "title": "Guards! Guards! (Discworld, #8)",
        "authors": ["Terry Pratchett"],
        "description": "The Night Watch of Ankh-Morpork, three drunk officers and a new recruit, "
        "face a dragon summoned by a secret brotherhood.",
    },
    {
        "id": "pattern-recognition",
        "title": "Pattern Recognition",
        "authors": ["William Gibson"],
        "description": "A coolhunter allergic to brands is hired to track down the maker of "
        "anonymous film fragments circulating on the internet.",
    },
    {
        "id": "william-tell",
        "title": "William Tell",
        "authors": ["Friedrich Schiller"],
        "description": "A drama of the Swiss uprising against Habsburg rule and the marksman "
        "forced to shoot an apple from his son's head.",
    },
    {  # a surname that is also a word of the catalog: "victorian london" is no author query
        "id": "call-of-the-wild",
        "title": "The Call of the Wild",
        "authors": ["Jack London"],
        "description": "Buck, a dog stolen from a California ranch, is sold into the brutal "
        "life of a sled dog in the Klondike gold rush.",
    },
    # an editor's two anthologies crediting the same contributors, Pratchett among them: each
    # contributor a principal author of both, neither his own book
    *(
        {
            "id": f"anthology-{n}",
            "title": title,
            "authors": ["Ellen Datlow", "Terry Pratchett", "Clive Barker", "Shirley Jackson"],
            "description": f"{about} Horror and dark fantasy stories: ghosts, haunted houses, "
            "monsters and things that go bump in the night.",
        }
        for n, (title, about) in enumerate(
            [("Darkness Falls", "An anthology."), ("Night Terrors", "A second anthology.")]
        )
    ),
    {
        "id": "in-the-woods",
        "title": "In the Woods",
        "authors": ["Tana French"],
        "description": "A Dublin detective investigates a child's murder in the woods where, "
        "twenty years before, his two friends vanished.",
    },
]


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    with serve_demo_with(tmp_path_factory.mktemp("relevance"), EXTRA) as c:
        yield c


def similar(client: TestClient, book_id: str, k: int = 5) -> dict:
    r = client.get(f"/books/{book_id}/similar", params={"k": k})
    assert r.status_code == 200, r.text
    return r.json()


def test_a_series_book_gets_its_series_mates_first(client: TestClient) -> None:
    body = similar(client, "mort")
    ids = [h["id"] for h in body["results"]]
    assert set(ids[:2]) == {"small-gods", "guards-guards"}, ids
    assert body["heads"]["series"]["weight"] > 0 and not body["heads"]["series"]["abstained"]
    top = body["results"][0]["heads"]
    assert top["series"]["share"] == max(part["share"] for part in top.values())


def test_a_shared_first_name_alone_makes_no_book_similar(client: TestClient) -> None:
    """Neuromancer shares "William" with Shirer's and Schiller's books and nothing else: its
    author's other book comes first, and no book whose only link is the first name follows."""
    body = similar(client, "neuromancer-gibson")
    ids = [h["id"] for h in body["results"]]
    assert ids[0] == "pattern-recognition", ids
    assert "william-tell" not in ids and "rise-and-fall-third-reich-shirer" not in ids, ids
    assert body["heads"]["series"]["abstained"]  # Neuromancer has no series marker here


def test_a_standalone_book_is_carried_by_its_topic_and_headings(client: TestClient) -> None:
    """Harry Potter, the demo's only Rowling and in no series: its headings (children's books,
    fantasy, young adult) and its keys carry it, and its title's "Philosopher" does not."""
    body = similar(client, "harry-potter-philosophers-stone-rowling")
    assert body["heads"]["author"]["abstained"] and body["heads"]["series"]["abstained"]
    titles = [h["title"] for h in body["results"]]
    assert "The Republic" not in titles and "Beyond Good and Evil" not in titles, titles
    shelves = {"children's books", "fantasy", "young adult", "picture books"}
    for hit in body["results"]:
        book = client.get(f"/books/{hit['id']}").json()
        assert shelves & set(book["metadata"]["subjects"]), (hit["title"], book["metadata"])
    for hit in body["results"]:  # no part from a head without evidence
        assert set(hit["heads"]) == {h for h, info in body["heads"].items() if info["weight"] > 0}


@pytest.mark.parametrize("query", ["Ursula Le Guin", "le guin", "books by ursula le guin"])
def test_a_query_that_names_an_author_ranks_their_books_first(
    client: TestClient, query: str
) -> None:
    body = client.get("/search", params={"q": query, "k": 3}).json()
    assert body["author"] == {"name": "Ursula K. Le Guin", "books": 1, "intent": "by"}
    assert body["results"][0]["authors"] == ["Ursula K. Le Guin"], body["results"][0]
    assert body["heads"]["author"]["weight"] > 0
    assert not body["no_strong_match"]


def test_an_author_with_several_books_has_them_all_on_top(client: TestClient) -> None:
    body = client.get("/search", params={"q": "terry pratchett novels", "k": 3}).json()
    assert {tuple(h["authors"]) for h in body["results"]} == {("Terry Pratchett",)}


def test_an_author_query_ranks_their_own_books_before_anthologies_that_include_them(
    client: TestClient,
) -> None:
    body = client.get("/search", params={"q": "terry pratchett horror stories", "k": 3}).json()
    assert body["author"]["books"] == 5  # the anthologies credit him
    assert [h["authors"] for h in body["results"]] == [["Terry Pratchett"]] * 3


def test_a_query_joining_two_authors_gives_each_half_of_the_author_head(
    client: TestClient,
) -> None:
    """Pratchett's three novels and Gibson's two: each author's books hold half of the author
    head, however near either's descriptions sit to the query's embedding, and the head's score
    shown is the book's q·k, as for one author."""
    body = client.get("/search", params={"q": "terry pratchett or william gibson", "k": 10}).json()
    assert body["author"]["name"] == "Terry Pratchett or William Gibson"
    held: dict[str, float] = {}
    for hit in body["results"]:
        part = hit["heads"]["author"]
        if part["probability"] > 0:
            (author,) = hit["authors"]  # their own books, not the anthologies crediting him
            held[author] = held.get(author, 0.0) + part["probability"]
            assert part["score"] == pytest.approx(hit["score"], abs=1e-5)
    assert held == {
        "Terry Pratchett": pytest.approx(0.5, rel=1e-4),
        "William Gibson": pytest.approx(0.5, rel=1e-4),
    }


@pytest.mark.parametrize("query", ["victorian london", "the french revolution"])
def test_a_subject_that_contains_a_name_names_no_author(client: TestClient, query: str) -> None:
    body = client.get("/search", params={"q": query, "k": 3}).json()
    assert body["author"] is None
    assert body["heads"]["author"]["abstained"] and body["heads"]["author"]["weight"] == 0.0


@pytest.mark.parametrize(
    "query",
    [
        "blockchain smart contracts in solidity",
        "tiktok marketing for small businesses",
        "kubernetes cluster autoscaling",
        "keto meal prep for athletes",
    ],
)
def test_a_query_the_catalog_has_nothing_on_is_flagged_though_its_words_occur(
    client: TestClient, query: str
) -> None:
    """Some of the query's words are in books (the lexical head does not abstain), and its
    match strength may pass, but no book is about it: no strong match."""
    body = client.get("/search", params={"q": query}).json()
    assert body["heads"]["lexical"]["abstained"] is False, body["heads"]
    assert body["no_strong_match"] is True, [r["title"] for r in body["results"]]


@pytest.mark.parametrize("query", ["deep learning with pytorch", "the trojan war", "tolkien"])
def test_a_query_the_catalog_has_books_on_is_not_flagged(client: TestClient, query: str) -> None:
    body = client.get("/search", params={"q": query}).json()
    assert body["no_strong_match"] is False, (body["match_strength"], body["results"][0]["title"])
