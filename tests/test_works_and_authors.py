"""Works and principal authors as a reader sees them, with the real model: the demo catalog and
a few books added for the cases (a foreword writer's credit, two editions of one work, two
prolific authors), indexed into SQLite in tmp_path and served by the real app. Each test
states a behaviour: a foreword writer makes no book similar, a work takes one slot in search,
similar books and recommendations, and a recommendation is not the liked authors'
bibliography."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from conftest import serve_demo_with

pytestmark = pytest.mark.model

# Two of each prolific author's books are liked in turn; the rest could fill a top 10 alone.
LE_GUIN = [
    (
        "Rocannon's World",
        "An ethnologist stranded on a feudal planet after rebels destroy his ship",
    ),
    ("Planet of Exile", "Colonists forgotten on a world of sixty-year winters ally with natives"),
    ("City of Illusions", "A man with amber eyes and no memory crosses a ruined future America"),
    ("The Lathe of Heaven", "A man whose dreams change reality is used by an ambitious analyst"),
    ("The Word for World Is Forest", "Loggers enslave a gentle forest people, who learn to kill"),
    ("Four Ways to Forgiveness", "Four linked novellas of slavery and freedom on two worlds"),
    ("The Telling", "An observer studies a suppressed storytelling tradition on a planet"),
]
BANKS = [
    ("Consider Phlebas", "A shapeshifter agent fights the Culture across a galaxy at war"),
    ("The Player of Games", "A master game player is sent to an empire whose game is its state"),
    ("Use of Weapons", "A mercenary hired by the Culture's Special Circumstances and his past"),
    ("Excession", "An artefact older than the galaxy appears and the Minds of the Culture scheme"),
    ("Inversions", "A doctor and a bodyguard at two courts of a medieval world hide a secret"),
    ("Look to Windward", "A Culture orbital awaits the light of a star destroyed in a war"),
    ("Matter", "A prince of a shellworld learns his father is murdered and seeks his sister"),
]
EXTRA: list[dict[str, object]] = [
    *(
        {"id": f"le-guin-{i}", "title": t, "authors": ["Ursula K. Le Guin"], "description": d}
        for i, (t, d) in enumerate(LE_GUIN)
    ),
    *(
        {"id": f"banks-{i}", "title": t, "authors": ["Iain M. Banks"], "description": d}
        for i, (t, d) in enumerate(BANKS)
    ),
    {  # an edition of the demo's Nineteen Eighty-Four that credits a foreword writer
        "id": "nineteen-eighty-four-centennial",
        "title": "Nineteen Eighty-Four (Centennial Edition)",
        "authors": ["George Orwell", "Thomas Pynchon"],
        "description": "Winston Smith works at the Ministry of Truth in Oceania, rewriting the "
        "past for the Party, and falls in love with Julia; with a foreword by Thomas Pynchon.",
    },
    {
        "id": "animal-farm",
        "title": "Animal Farm",
        "authors": ["George Orwell"],
        "description": "The animals of Manor Farm drive out their drunken farmer and run the "
        "farm themselves, until the pigs become the masters they replaced.",
    },
    {
        "id": "crying-of-lot-49",
        "title": "The Crying of Lot 49",
        "authors": ["Thomas Pynchon"],
        "description": "Oedipa Maas, executor of a lover's estate, stumbles on a secret postal "
        "network and a centuries-old conspiracy in California.",
    },
    {
        "id": "gravitys-rainbow",
        "title": "Gravity's Rainbow",
        "authors": ["Thomas Pynchon"],
        "description": "In the last months of the Second World War, an American lieutenant in "
        "London is sent after the V-2 rocket and the secret of his own conditioning.",
    },
]
ORWELL = "nineteen-eighty-four-orwell"  # the demo's edition
EDITION = "nineteen-eighty-four-centennial"


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    with serve_demo_with(tmp_path_factory.mktemp("works"), EXTRA) as c:
        yield c


def ok(r: object) -> dict:
    assert r.status_code == 200, r.text  # type: ignore[attr-defined]
    return r.json()  # type: ignore[attr-defined,no-any-return]


def test_a_foreword_writer_makes_no_book_similar(client: TestClient) -> None:
    """The edition that credits Pynchon's foreword is Orwell's book: Pynchon's novels get no
    author part from it, nor it from them, while Pynchon's two novels are author mates."""
    for book in ("crying-of-lot-49", "gravitys-rainbow"):
        body = ok(client.get(f"/books/{book}/similar", params={"k": 20}))
        parts = {h["id"]: h["heads"].get("author", {}).get("share", 0.0) for h in body["results"]}
        assert parts.get(EDITION, 0.0) == 0.0 and parts.get(ORWELL, 0.0) == 0.0, parts
        other = "gravitys-rainbow" if book == "crying-of-lot-49" else "crying-of-lot-49"
        assert parts[other] > 0, parts
    body = ok(client.get(f"/books/{EDITION}/similar", params={"k": 20}))
    authored = [h["id"] for h in body["results"] if h["heads"].get("author", {}).get("share")]
    assert authored == ["animal-farm"], authored  # Orwell's other book
    assert not {"crying-of-lot-49", "gravitys-rainbow"} & set(authored), authored


def test_two_editions_take_one_slot(client: TestClient) -> None:
    """Both editions of Nineteen Eighty-Four are one work: one slot in a search, the other
    listed under it; a book's own other edition is never like it; a recommendation for a
    reader of Animal Farm lists the work once."""
    hits = ok(client.get("/search", params={"q": "Big Brother Ministry of Truth", "k": 10}))
    ids = [h["id"] for h in hits["results"]]
    assert len({ORWELL, EDITION} & set(ids)) == 1, ids
    first = next(h for h in hits["results"] if h["id"] in {ORWELL, EDITION})
    assert [e["id"] for e in first["editions"]] == list({ORWELL, EDITION} - {first["id"]})
    similar = ok(client.get(f"/books/{ORWELL}/similar", params={"k": 20}))
    assert EDITION not in [h["id"] for h in similar["results"]]
    rec = ok(client.post("/recommend", json={"liked": ["animal-farm"], "k": 10}))
    ids = [h["id"] for h in rec["results"]]
    assert len({ORWELL, EDITION} & set(ids)) <= 1, ids


def test_a_recommendation_is_not_the_liked_authors_bibliography(client: TestClient) -> None:
    """Liking one book each of two prolific authors gives at most 3 of their books in a top 10
    (by default), says how many it held back, and gives them all when asked."""
    liked = ["le-guin-3", "banks-1"]
    own = {f"le-guin-{i}" for i in range(len(LE_GUIN))} | {f"banks-{i}" for i in range(len(BANKS))}
    rec = ok(client.post("/recommend", json={"liked": liked, "k": 10}))
    ids = [h["id"] for h in rec["results"]]
    assert len(ids) == 10
    theirs = [i for i in ids if i in own]
    assert len(theirs) <= 3, ids
    assert rec["own_authors"] == 3 and rec["held_back"] > 0, rec["held_back"]
    every = ok(client.post("/recommend", json={"liked": liked, "k": 10, "own_authors": 10}))
    more = [h["id"] for h in every["results"] if h["id"] in own]
    assert len(more) > len(theirs) and every["held_back"] == 0, more
    for hit in rec["results"]:  # each result still explains its weight exactly
        assert abs(sum(b["share"] for b in hit["because"]) - 1.0) < 1e-9, hit
