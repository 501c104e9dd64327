"""A word after an author's name can make the query about them (issue 31, item 6: with
service/engine/catalog_names.py reading only the words before the name, `_asks_about(words[:i],
())`, "toni morrison biography" was read as a "by" query and every test still passed)."""

from __future__ import annotations

import pytest

from models.text import fold
from service.engine.catalog_names import CatalogNames

BOOKS = [  # (title, authors, description)
    ("Beloved", ["Toni Morrison"], "a former slave haunted by her daughter"),
    ("Sula", ["Toni Morrison"], "two friends in Ohio"),
    ("Toni Morrison: A Life", ["A. Biographer"], "the life of the novelist"),
    ("Mort (Discworld, #4)", ["Terry Pratchett"], "death takes an apprentice"),
    ("Small Gods (Discworld  #13)", ["Terry Pratchett"], "a tortoise god"),
]


@pytest.fixture(scope="module")
def names() -> CatalogNames:
    titles, authors, descriptions = zip(*BOOKS, strict=True)
    return CatalogNames.of(list(titles), [list(a) for a in authors], list(descriptions))


def known(word: str) -> bool:
    return any(word in fold(" ".join([t, *a, d])) for t, a, d in BOOKS)


@pytest.mark.parametrize(
    ("query", "author", "intent"),
    [
        ("toni morrison biography", "Toni Morrison", "about"),
        ("terry pratchett companion", "Terry Pratchett", "about"),
        ("toni morrison criticism", "Toni Morrison", "about"),
        ("pratchett guide", "Terry Pratchett", "about"),
        # the same names with a word after them that asks for their books
        ("toni morrison novels", "Toni Morrison", "by"),
        ("pratchett books", "Terry Pratchett", "by"),
    ],
)
def test_a_word_after_the_name_decides_about_or_by(
    names: CatalogNames, query: str, author: str, intent: str
) -> None:
    named = names.recognise(query, known)
    assert named is not None, query
    assert (named.name, named.intent) == (author, intent)
