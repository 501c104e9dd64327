"""The catalog's names (service/engine/catalog_names.py): whole author names, series keys, and a
typed query that names an author, over a small catalog written for the cases."""

from __future__ import annotations

import random

import pytest

from models.text import fold
from service.engine.catalog_names import CatalogNames
from service.engine.name_rows import series_keys
from service.engine.row_lists import rows_by_key

BOOKS = [  # (title, authors, description)
    ("Neuromancer", ["William Gibson"], "a hacker in cyberspace"),
    ("Count Zero", ["William Gibson"], "cyberspace and corporations"),
    ("The Rise and Fall of the Third Reich", ["William L. Shirer"], "nazi germany"),
    ("Mort (Discworld, #4)", ["Terry Pratchett"], "death takes an apprentice"),
    ("Small Gods (Discworld  #13)", ["Terry Pratchett"], "a tortoise god"),
    ("Good Omens", ["Terry Pratchett", "Neil Gaiman"], "the end of the world"),
    ("Lords and Ladies (Discworld  #14; Witches #4)", ["Terry Pratchett"], "elves return"),
    ("The Left Hand of Darkness", ["Ursula K. Le Guin"], "a planet of ambisexual people"),
    ("The Call of the Wild", ["Jack London"], "a dog in the Klondike"),
    ("White Fang", ["Jack London"], "a wolf dog"),
    ("Oliver Twist", ["Charles Dickens"], "an orphan in London"),
    ("London Fields", ["Martin Amis"], "a murder in London"),
    ("Victorian London Streets", ["H. Mayhew"], "the poor of London"),
    ("Beloved", ["Toni Morrison"], "a former slave haunted by her daughter"),
    ("Sula", ["Toni Morrison"], "two friends in Ohio"),
    ("Toni Morrison: A Life", ["A. Biographer"], "the life of the novelist Toni Morrison"),
    ("The Hobbit", ["J.R.R. Tolkien"], "a hobbit and a dragon"),
    ("The Silmarillion", ["J. R. R. Tolkien"], "the elder days"),
]


@pytest.fixture(scope="module")
def names() -> CatalogNames:
    titles, authors, descriptions = zip(*BOOKS, strict=True)
    return CatalogNames.of(list(titles), [list(a) for a in authors], list(descriptions))


def words_of_catalog(word: str) -> bool:
    """Whether `word` is a word of the catalog's text (what the lexical index says)."""
    return any(word in fold(" ".join([t, *a, d])) for t, a, d in BOOKS)


def row(title: str) -> int:
    return next(i for i, (t, _, _) in enumerate(BOOKS) if t == title)


def test_an_author_is_a_whole_name_not_its_words(names: CatalogNames) -> None:
    assert names.author_mates(row("Neuromancer")) == [row("Count Zero")]  # not Shirer
    assert fold("J.R.R. Tolkien") == fold("J. R. R. Tolkien") == ["j", "r", "r", "tolkien"]
    assert names.author_mates(row("The Hobbit")) == [row("The Silmarillion")]
    assert fold("García Márquez") == ["garcia", "marquez"]


def test_a_series_is_the_key_of_the_titles_marker(names: CatalogNames) -> None:
    assert series_keys("Mort (Discworld, #4)") == series_keys("Small Gods (Discworld  #13)")
    assert series_keys("Harry Potter Boxed Set (Harry Potter, #1-7)") == ("harry potter",)
    assert series_keys("Lords and Ladies (Discworld  #14; Witches #4)") == ("discworld", "witches")
    assert series_keys("Good Omens") == () == series_keys("Catch-22 (a novel)")
    assert names.series_mates(row("Mort (Discworld, #4)")) == [
        row("Small Gods (Discworld  #13)"),
        row("Lords and Ladies (Discworld  #14; Witches #4)"),
    ]
    assert names.series_mates(row("Good Omens")) == []  # Pratchett's, but of no series


@pytest.mark.parametrize(
    ("query", "author", "intent"),
    [
        ("Terry Pratchett", "Terry Pratchett", "by"),
        ("books by toni morrison", "Toni Morrison", "by"),
        ("ursula le guin", "Ursula K. Le Guin", "by"),  # without the middle initial
        ("le guin", "Ursula K. Le Guin", "by"),  # a surname with its particle
        ("tolkein novels", "J.R.R. Tolkien", "by"),  # one swap from the catalog's word
        ("terry pratchet", "Terry Pratchett", "by"),  # one letter short
        ("novels about toni morrison", "Toni Morrison", "about"),
        ("a biography of toni morrison", "Toni Morrison", "about"),
        ("the life of toni morrison", "Toni Morrison", "about"),
        ("the novels of toni morrison", "Toni Morrison", "by"),
        ("jack london stories", "Jack London", "by"),  # the whole name is a name
    ],
)
def test_a_query_that_names_an_author(
    names: CatalogNames, query: str, author: str, intent: str
) -> None:
    named = names.recognise(query, words_of_catalog)
    assert named is not None, query
    assert (named.name, named.intent) == (author, intent)
    assert all(author in BOOKS[r][1] or author == "J.R.R. Tolkien" for r in named.rows)


@pytest.mark.parametrize(
    "query",
    [
        "victorian london",  # London is more a word of the catalog than Jack London's name
        "a murder in london",
        "william",  # a first name alone
        "the dog",
        "cyberspace",
    ],
)
def test_a_subject_that_contains_a_name_names_no_author(names: CatalogNames, query: str) -> None:
    assert names.recognise(query, words_of_catalog) is None


def test_a_misspelling_is_read_only_when_it_is_no_word_and_one_author_word_is_near() -> None:
    catalog = CatalogNames.of(["A", "B", "C"], [["Ann Patchett"], ["Terry Pratchett"], ["X"]])
    # "pratchet" is one edit from Pratchett, two from Patchett: read as Pratchett
    named = catalog.recognise("pratchet", lambda w: False)
    assert named is not None and named.name == "Terry Pratchett"
    # a word of the catalog is never corrected, even one edit from a name
    assert catalog.recognise("pratchet", lambda w: True) is None


def test_a_bare_name_the_catalog_holds_mostly_as_a_subject_names_no_author() -> None:
    """One book by Lincoln and three about him: "abraham lincoln" alone is the subject, while
    "books by abraham lincoln" still asks for his book."""
    books = [
        ("Selected Speeches", ["Abraham Lincoln"], "the president's speeches"),
        ("Team of Rivals", ["Doris Kearns Goodwin"], "Abraham Lincoln and his cabinet"),
        ("Lincoln at Gettysburg", ["Garry Wills"], "Abraham Lincoln's address"),
        ("Lincoln", ["Gore Vidal"], "a novel of Abraham Lincoln in the White House"),
    ]
    titles, authors, descriptions = zip(*books, strict=True)
    catalog = CatalogNames.of(list(titles), [list(a) for a in authors], list(descriptions))

    def holding(text: str) -> list[int]:
        words = set(fold(text))
        return [r for r, (t, a, d) in enumerate(books) if words <= set(fold(" ".join([t, *a, d])))]

    assert catalog.recognise("abraham lincoln", lambda w: True, holding) is None
    named = catalog.recognise("books by abraham lincoln", lambda w: True, holding)
    assert named is not None and named.intent == "by" and named.rows == (0,)
    assert catalog.recognise("abraham lincoln", lambda w: True) is not None  # no texts: a name


def test_a_name_misspelt_as_another_word_is_read_from_the_words_before_it(
    names: CatalogNames,
) -> None:
    """ "toni morrisson" and "william gibsen" are read whole: the first name fixes whose surname
    is meant, even where the surname as typed is a word of the catalog."""
    named = names.recognise("toni morrisson", lambda w: True)  # every word "known"
    assert named is not None and named.name == "Toni Morrison"
    assert names.recognise("william gibsen", lambda w: True) is not None
    assert names.recognise("william tell", lambda w: True) is None  # not two edits, not a name


@pytest.mark.parametrize(
    "query",
    [
        "terry pratchett and toni morrison",
        "books by toni morrison and terry pratchett",
        "pratchett & morrison",
        "terry pratchett or toni morrison",
        "morrison or pratchett novels",
    ],
)
def test_a_query_naming_two_authors_is_evidence_for_both(names: CatalogNames, query: str) -> None:
    named = names.recognise(query, words_of_catalog)
    assert named is not None and named.intent == "by", query
    by = {a for r in named.rows for a in BOOKS[r][1]}
    assert {"Terry Pratchett", "Toni Morrison"} <= by, (query, named)
    word = " or " if " or " in query else " and "
    assert set(named.name.split(word)) == {"Terry Pratchett", "Toni Morrison"}
    assert not {"Jack London", "William Gibson"} & by
    # one part of the author head per name: each author's own books (Good Omens is Pratchett's)
    parts = sorted([BOOKS[r][0].split()[0] for r in part] for part in named.parts)
    assert parts == [["Beloved", "Sula"], ["Mort", "Small", "Good", "Lords"]]


def test_or_between_a_name_and_another_word_names_one_author(names: CatalogNames) -> None:
    named = names.recognise("toni morrison or something else", words_of_catalog)
    assert named is not None and named.name == "Toni Morrison"


def test_a_foreword_writer_is_no_principal_author() -> None:
    """Principal authors: the first credited name, and a co-author credited on most of the first
    one's books; a name credited once beside an author of many books is not."""
    books = [
        ("Nineteen Eighty-Four", ["George Orwell", "Thomas Pynchon"], "the party"),
        ("Animal Farm", ["George Orwell"], "the pigs"),
        ("Homage to Catalonia", ["George Orwell"], "spain"),
        ("V.", ["Thomas Pynchon"], "a search"),
        ("Dragons of Autumn Twilight", ["Margaret Weis", "Tracy Hickman"], "lance"),
        ("Dragons of Winter Night", ["Margaret Weis", "Tracy Hickman"], "lance"),
        ("The Soulforge", ["Margaret Weis"], "raistlin"),
    ]
    titles, authors, descriptions = zip(*books, strict=True)
    names = CatalogNames.of(list(titles), [list(a) for a in authors], list(descriptions))
    orwell, v, weis = 0, 3, 4
    assert names.author_mates(orwell) == [1, 2]
    assert orwell not in names.author_mates(v) and names.author_mates(v) == []
    assert names.author_mates(weis) == [5, 6]


def test_each_authors_rows_are_the_rows_crediting_it_in_order() -> None:
    """`rows_by_key` groups the credits in numpy by the rows' shared tuples: the same rows,
    keys in the order the rows first credit them, as a loop over every credit gives, where
    rows share a tuple object, hold equal tuples apart, or credit no one."""
    rng = random.Random(0)
    keys = [(f"a{i}", "writer") for i in range(30)]
    shared = [tuple(rng.sample(keys, rng.randint(0, 3))) for _ in range(20)]
    rows = [
        rng.choice(shared) if rng.random() < 0.7 else tuple(rng.sample(keys, rng.randint(0, 3)))
        for _ in range(500)
    ]
    expected: dict[tuple[str, ...], list[int]] = {}
    for row, credited in enumerate(rows):
        for key in credited:
            expected.setdefault(key, []).append(row)
    got = rows_by_key(rows)
    assert got == expected
    assert list(got) == list(expected)


def test_an_author_querys_own_books_leave_out_collections_of_many_principal_authors() -> None:
    # an editor whose two anthologies credit the same contributors makes each of them principal
    crew = ["Ed Itor", "Ann A", "Bea B", "Stephen King"]
    books = [
        ("Carrie", ["Stephen King"]),
        ("Dark Tales", crew),  # four principal authors
        ("Darker Tales", crew),
        ("Three Hands", ["Pat Q", "Quin R", "Stephen King"]),  # three: its authors' own
        ("Four Hands", ["Rae S", "Sol T", "Tam U", "Stephen King"]),  # four
    ]
    titles, authors = zip(*books, strict=True)
    catalog = CatalogNames.of(list(titles), [list(a) for a in authors])
    assert [len(catalog.principal[r]) for r in range(len(books))] == [1, 4, 4, 3, 4]
    named = catalog.recognise("stephen king novels", lambda w: True)
    assert named is not None
    assert named.rows == (0, 1, 2, 3, 4)  # every book crediting him
    (own,) = named.parts
    assert [titles[r] for r in own] == ["Carrie", "Three Hands"]
    # the first credited (the editor) keeps the collections
    editor = catalog.recognise("ed itor", lambda w: True)
    assert editor is not None
    assert [[titles[r] for r in p] for p in editor.parts] == [["Dark Tales", "Darker Tales"]]
    # an author principal on no book of few principal authors keeps every book crediting them
    ann = catalog.recognise("ann a", lambda w: True)
    assert ann is not None and ann.parts == (ann.rows,) and len(ann.rows) == 2
    # joined, each keeps its own part
    both = catalog.recognise("ann a or stephen king", lambda w: True)
    assert both is not None and both.parts == (ann.rows, own)
