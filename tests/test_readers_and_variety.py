"""Two things similar books weigh beyond closeness, end to end with the real model over the
demo catalog and a few books of the test's own: the readers' prior, when it is asked for (of
two close books, the one far more people rated comes first), and variety, on by default
(maximal marginal relevance: a cluster of near-copies does not take every slot). Each is
checked against the same index served with it turned off, so the test shows what the setting
changes, not a number from a run."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from conftest import index_demo_with
from service.api.main import create_app
from service.config.settings import ServiceSettings

pytestmark = pytest.mark.model


def _book(i: str, title: str, author: str, description: str, **extra: object) -> dict:
    return {"id": i, "title": title, "authors": [author], "description": description, **extra}


LIGHT = (
    "The life of a lighthouse keeper on a remote rocky island: trimming the lamp each night, "
    "logging the storms, and the long loneliness of the winter watch."
)
EXTRA = [
    _book("keeper", "The Keeper's Year", "Ann Query", LIGHT, ratings_count=900),
    # a little closer to the query in words, rated by few
    _book(
        "lamp-log",
        "The Lamp Log",
        "Ben Close",
        "A lighthouse keeper on a remote rocky island trims the lamp each night and logs the "
        "storms through a lonely winter.",
        ratings_count=3,
    ),
    # a little less close, rated by tens of thousands
    _book(
        "island-light",
        "Island Light",
        "Cy Read",
        "A keeper tends a lighthouse on a far island, keeping its lamp lit through storms and "
        "the solitude of the long winter nights.",
        ratings_count=60000,
    ),
]
LEGION = (
    "A military history of the Roman legions: their battles, marching camps, siege engines "
    "and the discipline of the legionaries on campaign."
)
EXTRA += [
    _book("legions", "The Legions of Rome", "Dee Query", LEGION),
    *(
        _book(
            f"legion-{n}",
            title,
            f"Author {n}",
            f"A military history of the Roman legions on campaign: {detail}.",
        )
        for n, (title, detail) in enumerate(
            [
                ("Legion on the March", "their marching camps, battles and siege engines"),
                ("Shields of the Legion", "their battles, sieges and the legionaries' drill"),
                ("The Legionary's War", "battles, camps and the discipline of the legionaries"),
                ("Eagles in Battle", "siege engines, marching camps and legionary discipline"),
            ]
        )
    ),
    _book(
        "roman-table",
        "At the Roman Table",
        "Eve Cook",
        "Daily life in ancient Rome: what Romans ate, how their kitchens and markets worked, "
        "and the soldiers' rations on campaign.",
    ),
]


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> str:
    return index_demo_with(tmp_path_factory.mktemp("readers"), EXTRA)


def _client(url: str, **settings: object) -> Iterator[TestClient]:
    app = create_app(ServiceSettings(database_url=url, device="cpu", **settings))  # type: ignore[arg-type]
    with TestClient(app) as client:
        yield client


@pytest.fixture(scope="module")
def default(url: str) -> Iterator[TestClient]:
    yield from _client(url)


@pytest.fixture(scope="module")
def readers(url: str) -> Iterator[TestClient]:
    """The same index with a readers' prior (off by default) and no variety."""
    yield from _client(url, similar_readers=0.05, similar_diversity=1.0)


@pytest.fixture(scope="module")
def plain(url: str) -> Iterator[TestClient]:
    """The same index with neither the readers' prior nor the variety."""
    yield from _client(url, similar_readers=0.0, similar_diversity=1.0)


def _similar(client: TestClient, book: str, k: int = 10) -> list[dict]:
    r = client.get(f"/books/{book}/similar", params={"k": k})
    assert r.status_code == 200, r.text
    return r.json()["results"]  # type: ignore[no-any-return]


def _ids(results: list[dict]) -> list[str]:
    return [h["id"] for h in results]


def test_of_two_close_books_the_one_more_people_read_comes_first(
    readers: TestClient, plain: TestClient
) -> None:
    """Without the prior the closer, little-read book is first; with it, the book rated by
    60,000 readers is. The weights shown are the heads' attention, which the prior does not
    enter: the closer book still weighs more, and `relevance_rank` says so."""
    without = _ids(_similar(plain, "keeper"))
    assert without.index("lamp-log") < without.index("island-light"), without
    results = _similar(readers, "keeper")
    ids = _ids(results)
    assert ids.index("island-light") < ids.index("lamp-log"), ids
    hits = {h["id"]: h for h in results}
    assert hits["island-light"]["weight"] < hits["lamp-log"]["weight"], hits
    assert hits["island-light"]["relevance_rank"] > hits["lamp-log"]["relevance_rank"], hits


def test_near_copies_do_not_take_every_slot(default: TestClient, plain: TestClient) -> None:
    """Without variety the four legion histories fill the top four; with it, other sides of
    Rome (the demo's Gibbon, SPQR) take at least two of those slots. Every result keeps its
    own weight, and its heads' shares still sum to it."""
    copies = {f"legion-{n}" for n in range(4)}
    top = _ids(_similar(plain, "legions"))[:4]
    assert set(top) == copies, top
    results = _similar(default, "legions")
    assert len(copies & set(_ids(results)[:4])) <= 2, _ids(results)
    for hit in results:
        assert hit["weight"] > 0
        shares = sum(p["share"] for p in hit["heads"].values())
        assert shares == pytest.approx(hit["weight"], rel=1e-6)
