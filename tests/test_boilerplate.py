"""Boilerplate (indexer/boilerplate.py): the sentences a catalog repeats across the descriptions
of at least three authors' books are found from the catalog itself, kept with each generation
(indexer/boilerplate_rows.py), and left out of the lexical heads and the explanations; shared
boilerplate brings no similar book. Unit rules first, then both databases, then the real model
end to end."""

from __future__ import annotations

import logging
import random
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from conftest import FakeEncoder, index_demo_with, write_jsonl
from indexer import boilerplate_rows, deletion, pipeline
from indexer.boilerplate import MIN_AUTHORS, MIN_LETTERS, Boilerplate, sentence_spans
from indexer.pipeline import IndexReport
from indexer.schema import Book, BookVector
from indexer.settings import IndexSettings
from service.api.main import create_app
from service.commands.index_commands import _boilerplate_line
from service.config.settings import ServiceSettings

BLURB = "Reader's Guide available. Reprint. 100,000 first printing."


def _found(descriptions: list[str | None], authors: list[list[str]]) -> Boilerplate:
    return Boilerplate.found(descriptions, authors)


def test_a_sentence_of_three_authors_descriptions_is_boilerplate_and_of_two_is_not() -> None:
    texts = [f"Book {n} is about {topic}. Reissue." for n, topic in enumerate("abcd")]
    three = _found(texts[:MIN_AUTHORS], [[f"Author {n}"] for n in range(MIN_AUTHORS)])
    assert three.keys == {"reissue"}
    assert three.authors == {"reissue": MIN_AUTHORS}
    two = _found(texts[: MIN_AUTHORS - 1], [[f"Author {n}"] for n in range(MIN_AUTHORS - 1)])
    assert not two
    # the third description by the first author again: still two authors
    again = _found(texts[:MIN_AUTHORS], [["Author 0"], ["Author 1"], ["AUTHOR  0"]])
    assert not again


def test_one_authors_books_and_co_authors_repeat_their_own_text() -> None:
    texts = ["Henry is a hard worker. He is a tank engine."] * 5
    assert not _found(texts, [["Rev. W. Awdry"]] * 5)
    # the first author decides: co-authors of one author's books are one author
    assert not _found(texts[:3], [["Awdry", "Bell"], ["Awdry", "Spong"], ["Awdry"]])
    # books without authors are each their own
    assert _found(texts[:3], [[], [], []]).keys == {"henry is a hard worker", "he is a tank engine"}


def test_numbers_case_and_spacing_make_one_sentence() -> None:
    texts = [
        "A novel. 50,000 first printing.",
        "A poem. 100,000 First  printing.",
        "7 first printing",
    ]
    found = _found(texts, [["A"], ["B"], ["C"]])
    assert found.keys == {"# first printing"}
    assert [found.strip(t) for t in texts] == ["A novel.", "A poem.", ""]


def test_a_split_too_short_to_be_a_sentence_never_counts() -> None:
    authors = [["A"], ["B"], ["C"]]
    word = "x" * MIN_LETTERS
    assert _found([f"{word.title()}. Then {n}." for n in "abc"], authors).keys == {word}
    short = word[:-1]
    assert not _found([f"{short.title()}. Then {n}." for n in "abc"], authors)


def test_sentences_end_at_a_stop_before_a_space_or_capital_never_inside_a_number() -> None:
    text = (
        'By the author of The Virgin Suicides.Reader\'s Guide available. Sold 1.5 million! "Yes."'
    )
    assert [text[a:b] for a, b in sentence_spans(text)] == [
        "By the author of The Virgin Suicides.",
        "Reader's Guide available.",
        " Sold 1.5 million!",
        ' "Yes."',
    ]


def test_strip_leaves_the_rest() -> None:
    texts = [f"About {t}. {BLURB}" for t in ("whales", "bees", "salt")] + ["Plain.", None]
    found = Boilerplate.found(texts, [["A"], ["B"], ["C"], ["D"], ["E"]])
    assert found.keys == {"reader's guide available", "reprint", "# first printing"}
    assert found.strip(texts[0]) == "About whales."
    assert found.strip("Plain.") == "Plain."
    assert found.strip(None) is None
    assert found.strip(BLURB) == ""
    assert Boilerplate.of(sorted(found.keys)) == found


def _books(blurb_authors: list[str]) -> list[dict[str, object]]:
    books: list[dict[str, object]] = [
        {
            "id": "whales",
            "title": "Whales",
            "authors": ["Ann"],
            "description": f"About whales. {BLURB}",
        },
        {"id": "plain", "title": "Plain", "authors": ["Zed"], "description": "Nothing shared."},
    ]
    for n, a in enumerate(blurb_authors):
        books.append(
            {"id": f"b{n}", "title": f"B{n}", "authors": [a], "description": f"Topic {n}. {BLURB}"}
        )
    return books


def test_a_generation_keeps_its_boilerplate_and_renews_the_books_that_read_it_otherwise(
    engine: Engine, tmp_path: Path
) -> None:
    # generation 1: the blurb in two authors' descriptions, not boilerplate
    first = _index(engine, tmp_path / "1", _books(["Bo"]))
    assert not first.boilerplate and first.renewed == 0
    # generation 2: a third author's book holds it, and the two unchanged books are renewed
    second = _index(engine, tmp_path / "2", _books(["Bo", "Cy"]))
    assert second.renewed == 2
    with Session(engine) as session:
        two = boilerplate_rows.stored(session=session, generation=2)
        assert two.keys == {"reader's guide available", "reprint", "# first printing"}
        assert _written_in(session, 2) == {"whales", "b0", "b1"}  # "plain" holds none of it
    # generation 3: one of the three deleted, the blurb is two authors' again
    assert deletion.delete_books(engine=engine, book_ids=["b1"]).generation == 3
    with Session(engine) as session:
        assert not boilerplate_rows.stored(session=session, generation=3)
        assert _written_in(session, 3) == {"whales", "b0"}
        # a renewed book is the same record with the same vectors
        for book in ("whales", "b0"):
            old, new = (
                session.scalars(select(Book).where(Book.id == book, Book.valid_from == g)).one()
                for g in (2, 3)
            )
            assert (new.record_hash, new.description) == (old.record_hash, old.description)
            assert (old.valid_to, new.valid_to) == (3, None)
            assert _vectors(session, new.row_id) == _vectors(session, old.row_id) != set()


def _written_in(session: Session, generation: int) -> set[str]:
    return set(session.scalars(select(Book.id).where(Book.valid_from == generation)))


def _vectors(session: Session, row_id: int) -> set[tuple[str, str, int]]:
    links = select(BookVector.role, BookVector.field, BookVector.vector_id)
    return {tuple(r) for r in session.execute(links.where(BookVector.version_id == row_id))}


def test_the_index_command_names_what_it_found(engine: Engine, tmp_path: Path) -> None:
    line = _boilerplate_line(_index(engine, tmp_path, _books(["Bo", "Cy"])))
    assert line.startswith(f"boilerplate: 3 sentences recur across {MIN_AUTHORS} or more authors'")
    assert "'reprint' (3)" in line
    # the second run: the blurb is no longer boilerplate, so the unchanged book holding it is
    # renewed
    assert _boilerplate_line(_index(engine, tmp_path, _books([]))) == (
        "boilerplate (1 of the updated books renewed for it): no sentence recurs across "
        f"{MIN_AUTHORS} authors' descriptions\n"
    )


def _index(engine: Engine, folder: Path, books: list[dict[str, object]]) -> IndexReport:
    folder.mkdir(exist_ok=True)
    url = engine.url.render_as_string(hide_password=False)
    return pipeline.run(
        IndexSettings(database_url=url),
        engine=engine,
        encoder=FakeEncoder(),
        path=write_jsonl(folder / "books.jsonl", books),
        allow_mass_delete=True,
    )


# ---- end to end, the real model: shared boilerplate brings no similar book

GARDEN = "A gardener's year of pruning roses, dividing irises and keeping slugs off the hostas."
EXTRA = [
    {
        "id": "garden",
        "title": "The Rose Year",
        "authors": ["Mara Lind"],
        "description": f"{GARDEN} {BLURB}",
    },
    {
        "id": "harbour",
        "title": "Harbour Lights",
        "authors": ["Tomas Ek"],
        "description": "A lighthouse keeper's daughter solves a smuggling case on the coast. "
        + BLURB,
    },
    {
        "id": "algebra",
        "title": "Rings and Fields",
        "authors": ["Ida Berg"],
        "description": "An introduction to abstract algebra: groups, rings, fields and Galois "
        f"theory. {BLURB}",
    },
]


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    url = index_demo_with(tmp_path_factory.mktemp("boilerplate"), EXTRA)
    with TestClient(create_app(ServiceSettings(database_url=url, device="cpu"))) as client:
        yield client


@pytest.mark.model
def test_shared_boilerplate_is_no_lexical_evidence(client: TestClient) -> None:
    r = client.get("/books/garden/similar", params={"k": 20})
    assert r.status_code == 200, r.text
    lexical = {
        hit["id"]: hit["heads"]["lexical"]["probability"]
        for hit in r.json()["results"]
        if "lexical" in hit["heads"]
    }
    # the other two share only the blurb with it: nothing of the lexical head's attention
    assert lexical.get("harbour", 0.0) == 0.0
    assert lexical.get("algebra", 0.0) == 0.0


@pytest.mark.model
def test_an_explanation_leaves_the_boilerplate_out(client: TestClient) -> None:
    r = client.get("/books/garden/explain", params={"q": "reprint of a guide to roses"})
    assert r.status_code == 200, r.text
    words = {w["text"].lower() for w in r.json()["book_words"]}
    assert "roses" in words
    assert not words & {"reprint", "guide", "printing", "available"}


def test_counting_only_the_changed_sentences_again_finds_what_reading_every_book_finds(
    engine: Engine, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    rng = random.Random(7)
    lines = ["Reprint.", "Reader's Guide available.", "A first novel.", "Émile est là."]
    lines += [f"The {w} edition has maps." for w in ("blue", "red", "green")]
    names = [["Ann"], ["Bo"], ["Cy"], ["Di"], ["Ed", "Ann"], []]

    def book(n: int) -> dict[str, object]:
        own = "".join(chr(ord("a") + int(d)) for d in str(n))  # a word of its own: no number
        text = f"The tale of {own}. " + " ".join(rng.sample(lines, rng.randint(0, 3)))
        return {"id": f"b{n}", "title": own, "authors": rng.choice(names), "description": text}

    books = {n: book(n) for n in range(14)}
    for step in range(8):
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="indexer.boilerplate_rows"):
            report = _index(engine, tmp_path / str(step), list(books.values()))
        assert report.generation == step + 1
        with Session(engine) as session:
            kept = boilerplate_rows.stored(session=session, generation=step + 1)
            whole = boilerplate_rows.found(session=session, generation=step + 1)
        assert kept.authors == whole.authors
        if step:  # after the first, only the changed books' sentences were counted again
            assert "sentences of the changed books counted again" in caplog.text
        # a few books changed, one added, one removed
        for n in rng.sample(sorted(books), 3):
            books[n] = book(n)
        books[100 + step] = book(100 + step)
        del books[rng.choice(sorted(books))]
