"""Issue 47 items 2 and 3: more exports read as they are exported, with no hand fix. Book-
Crossing's BX-Books.csv (Latin-1, `;`, its own headers, `0` for an unknown year), goodbooks-10k's
books.csv (`2008.0` years, a comma list of names with one-word ones, `language_code`), a
StoryGraph export (`ISBN/UID`, the reader's `Review`, `Tags`), a spreadsheet's ISBNs damaged by
Excel, and columns mapped to subjects and series; each written here as the tool writes it, then
indexed on both databases where what is stored matters."""

from __future__ import annotations

import csv
import gzip
import io
import json
from pathlib import Path

import pytest
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from conftest import FakeEncoder, index_file
from indexer import pipeline, store
from indexer.catalog import CatalogRecord, CatalogSnapshot, InvalidRow
from indexer.catalog.columns import cell_year, split_authors
from indexer.schema import Book
from indexer.settings import IndexSettings


def _csv(rows: list[list[str]], delimiter: str = ",", quoting: int = csv.QUOTE_MINIMAL) -> str:
    out = io.StringIO()
    csv.writer(out, delimiter=delimiter, quoting=quoting, lineterminator="\n").writerows(rows)
    return out.getvalue()


def _read(path: Path) -> tuple[list[CatalogRecord], list[InvalidRow], list[str]]:
    with CatalogSnapshot.take(path) as snapshot:
        rows = list(snapshot.scan())
        notices = snapshot.check().notices
    books = [r for r in rows if isinstance(r, CatalogRecord)]
    return books, [r for r in rows if isinstance(r, InvalidRow)], notices


BX_HEADER = ["ISBN", "Book-Title", "Book-Author", "Year-Of-Publication", "Publisher",
             "Image-URL-S", "Image-URL-M", "Image-URL-L"]  # fmt: skip


def bx_books(folder: Path) -> Path:
    """Book-Crossing's BX-Books.csv: Latin-1, `;`-separated, every field quoted."""
    rows = [BX_HEADER]
    for isbn, title, author, year in [
        ("0195153448", "Classical Mythology", "Mark P. O. Morford", "2002"),
        ("2080674722", "Les Misérables", "Victor Hugo", "0"),
        ("3442353866", "Der Fluch der Gaukler", "Gabriel García Márquez", "1998"),
        ("0375404120", "Bästa novellerna", "Åsa Ländström", "1887"),
    ]:
        rows.append([isbn, title, author, year, "Press", "http://s", "http://m", "http://l"])
    path = folder / "BX-Books.csv"
    path.write_bytes(_csv(rows, ";", csv.QUOTE_ALL).encode("latin-1"))
    return path


def test_book_crossing_is_read_as_exported(tmp_path: Path) -> None:
    path = bx_books(tmp_path)
    books, bad, notices = _read(path)
    assert bad == []
    assert [(b.id, b.title, b.authors, b.year) for b in books] == [
        ("0195153448", "Classical Mythology", ["Mark P. O. Morford"], 2002),
        ("2080674722", "Les Misérables", ["Victor Hugo"], None),  # 0: unknown
        ("3442353866", "Der Fluch der Gaukler", ["Gabriel García Márquez"], 1998),
        ("0375404120", "Bästa novellerna", ["Åsa Ländström"], 1887),
    ]
    assert notices[:4] == [
        f"{path}: not UTF-8: read as cp1252, the encoding charset-normalizer finds in it, "
        "converted to UTF-8 (--encoding NAME names another)",
        f"{path}: read as Book-Crossing's BX-Books (its header's columns say so)",
        f"{path}: read as ';'-separated (the header has no comma)",
        f"{path}: read 'Book-Title' as title, 'Book-Author' as authors, 'Year-Of-Publication' "
        "as year, 'ISBN' as the id",
    ]


def test_an_unknown_year_is_no_year_in_a_filter(engine: Engine, tmp_path: Path) -> None:
    """Stored on both databases with its accents, the `0` year as none: a search for books
    before 1900 finds the one of 1887, not Les Misérables."""
    report = index_file(engine, bx_books(tmp_path))
    assert report.added == 4
    with Session(engine) as session:
        stored = {b.id: (b.authors, b.year) for b in session.scalars(select(Book))}
    assert stored["2080674722"] == (["Victor Hugo"], None)
    assert stored["0375404120"] == (["Åsa Ländström"], 1887)


def goodbooks(folder: Path) -> Path:
    """goodbooks-10k's books.csv: years written as floats, a comma list of every name."""
    header = ["book_id", "goodreads_book_id", "isbn", "isbn13", "authors",
              "original_publication_year", "original_title", "title", "language_code",
              "average_rating", "ratings_count"]  # fmt: skip
    rows = [
        header,
        ["1", "2767052", "439023483", "9.78043902348e+12", "Suzanne Collins", "2008.0",
         "The Hunger Games", "The Hunger Games (The Hunger Games, #1)", "eng", "4.34", "4780653"],
        ["2", "3", "439554934", "9.78043955493e+12", "J.K. Rowling, Mary GrandPré", "1997.0",
         "Harry Potter and the Philosopher's Stone", "Harry Potter and the Sorcerer's Stone",
         "eng", "4.44", "4602479"],
        ["3", "1371", "140275363", "9.78014027536e+12", "Homer, Robert Fagles, E.V. Rieu",
         "-750.0", "Ἰλιάς", "The Iliad", "en-US", "3.83", "241088"],
        ["4", "5", "", "", "Unknown", "", "", "A Book Without a Year", "", "", ""],
    ]  # fmt: skip
    path = folder / "books.csv"
    path.write_text(_csv(rows), encoding="utf-8")
    return path


def test_goodbooks_is_read_as_exported(tmp_path: Path) -> None:
    path = goodbooks(tmp_path)
    books, bad, notices = _read(path)
    assert f"{path}: read as goodbooks-10k's books.csv (its header's columns say so)" in notices
    # its isbn13 column holds 9.78043902348e+12: no matter, `book_id` is the id
    assert not any("as Excel writes" in n for n in notices)
    assert bad == []
    assert [(b.id, b.authors, b.year, b.language) for b in books] == [
        ("1", ["Suzanne Collins"], 2008, "eng"),
        ("2", ["J.K. Rowling", "Mary GrandPré"], 1997, "eng"),
        ("3", ["Homer", "Robert Fagles", "E.V. Rieu"], -750, "en-US"),
        ("4", ["Unknown"], None, None),
    ]
    assert books[0].extra["ratings_count"] == "4780653"


def storygraph(folder: Path) -> Path:
    header = ["Title", "Authors", "Contributors", "ISBN/UID", "Format", "Read Status",
              "Date Added", "Star Rating", "Review", "Tags", "Owned?"]  # fmt: skip
    rows = [
        header,
        ["Piranesi", "Susanna Clarke", "", "9781635575637", "hardcover", "read", "2021/03/01",
         "5.0", "I loved the statues.", "fantasy, mystery", "Yes"],
        ["Circe", "Madeline Miller", "", "9780316556347", "paperback", "read", "2021/04/01",
         "4.0", "", "fantasy, mythology", "No"],
    ]  # fmt: skip
    path = folder / "storygraph.csv"
    path.write_text(_csv(rows), encoding="utf-8")
    return path


def test_storygraph_keeps_the_readers_review_out_of_the_description(
    engine: Engine, tmp_path: Path
) -> None:
    """The review is the reader's: metadata, not what the book is about; `ISBN/UID` the id; its
    `Tags` (any case) split at commas as the subject headings the subjects head reads."""
    path = storygraph(tmp_path)
    books, bad, notices = _read(path)
    assert f"{path}: read as a StoryGraph export (its header's columns say so)" in notices
    assert bad == []
    piranesi = books[0]
    assert (piranesi.id, piranesi.description) == ("9781635575637", None)
    assert piranesi.extra["Review"] == "I loved the statues."
    index_file(engine, path)
    with Session(engine) as session:
        extras = store.book_extras(session=session, book_ids=["9781635575637", "9780316556347"])
    assert extras.subjects == [("fantasy", "mystery"), ("fantasy", "mythology")]


def test_columns_mapped_to_subjects_and_series_reach_their_heads(
    engine: Engine, tmp_path: Path
) -> None:
    path = tmp_path / "shop.csv"
    path.write_text(
        "title,author,Genre List,Saga\n"
        "Mort,Terry Pratchett,fantasy; humour,Discworld\n"
        "Dune,Frank Herbert,science fiction,\n",
        encoding="utf-8",
    )
    with CatalogSnapshot.take(path, columns={"Genre List": "subjects", "Saga": "series"}) as s:
        mort, dune = s.records()
        notices = s.check().notices
    assert mort.extra == {"subjects": "fantasy; humour", "series": "Discworld"}
    assert dune.extra == {"subjects": "science fiction"}
    assert f"{path}: read 'author' as authors, 'Genre List' as subjects, 'Saga' as series" in (
        notices
    )
    url = engine.url.render_as_string(hide_password=False)
    settings = IndexSettings(
        database_url=url, catalog_columns={"Genre List": "subjects", "Saga": "series"}
    )
    pipeline.run(settings, engine=engine, encoder=FakeEncoder(), path=path)
    with Session(engine) as session:
        ids = [mort.id, dune.id]
        extras = store.book_extras(session=session, book_ids=ids)
    assert extras.subjects == [("fantasy", "humour"), ("science fiction",)]
    assert extras.series == [("Discworld",), ()]


def test_an_isbn_excel_damaged_is_named_and_no_id(tmp_path: Path) -> None:
    path = tmp_path / "saved-by-excel.csv"
    path.write_text(
        "title,author,isbn13\nDune,Frank Herbert,9.78044E+12\nEmma,Jane Austen,9780141439587\n",
        encoding="utf-8",
    )
    books, _, notices = _read(path)
    assert [b.id for b in books] == ["dune-07b5841a02", "9780141439587"]
    assert books[0].extra == {"isbn13": "9.78044E+12"}  # kept as it came
    assert (
        f"{path}: 1 book(s) have an ISBN as Excel writes a long number (line 2: 'isbn13' is "
        "'9.78044E+12'): its digits are lost, so it is no id; format the column as text in "
        "Excel before saving, or export the catalog again from where it came"
    ) in notices


@pytest.mark.parametrize(
    ("cell", "year"),
    [
        ("2008.0", 2008),
        ("-750.0", -750),
        ("-720", -720),
        ("c1998", 1998),
        ("[1998?]", 1998),
        ("1998-2001", 1998),
        ("March 2008", 2008),
        ("2003-05-01", 2003),
        ("1999.5", "1999.5"),  # a number, no year: the row's check names it
        ("nineteen", "nineteen"),
    ],
)
def test_a_year_cell_as_exports_write_it(cell: str, year: int | str) -> None:
    assert cell_year(cell) == year


@pytest.mark.parametrize(
    ("cell", "names"),
    [
        ("Homer, Robert Fagles, E.V. Rieu", ["Homer", "Robert Fagles", "E.V. Rieu"]),
        ("Neil Gaiman, Terry Pratchett", ["Neil Gaiman", "Terry Pratchett"]),
        ("Herbert, Frank", ["Herbert, Frank"]),
        ("Tolkien, J. R. R.", ["Tolkien, J. R. R."]),
        ("Tolkien, J. R. R., 1892-1973", ["Tolkien, J. R. R., 1892-1973"]),  # a library heading
        ("Homer, Robert Fagles", ["Homer, Robert Fagles"]),  # two names or "Last, First": one
    ],
)
def test_a_cell_of_authors_is_split_as_its_commas_say(cell: str, names: list[str]) -> None:
    assert split_authors(cell) == names


OPEN_LIBRARY = [
    {
        "type": "/type/edition",
        "key": "/books/OL10000135M",
        "title": "Gardens of the Sun",
        "subtitle": "a history",
        "publishers": ["Bernan Press"],
        "isbn_10": ["0890423838"],
        "isbn_13": ["9780890423837"],
        "authors": [{"key": "/authors/OL2674389A"}],
        "publish_date": "March 2008",
        "languages": [{"key": "/languages/fre"}],
        "works": [{"key": "/works/OL8218745W"}],
        "description": {"type": "/type/text", "value": "Plants and the light they need."},
        "subjects": ["Gardening", "Sun"],
        "series": ["Bernan garden books"],
    },
    {"type": "/type/author", "key": "/authors/OL2674389A", "name": "Ann Gardener"},
    {
        "type": "/type/work",
        "key": "/works/OL8218745W",
        "title": "Gardens of the Sun",
        "authors": [{"type": {"key": "/type/author_role"}, "author": {"key": "/authors/OL1A"}}],
        "description": "About gardens in the sun.",
        "first_publish_date": "2003-05-01",
    },
    {"type": "/type/redirect", "key": "/books/OL3M", "location": "/books/OL10000135M"},
]


def open_library(folder: Path) -> Path:
    """An Open Library dump as its site publishes it: gzipped, tab-separated, JSON last."""
    text = "".join(
        f"{r['type']}\t{r['key']}\t3\t2010-04-24T17:54:01.503315\t{json.dumps(r)}\n"
        for r in OPEN_LIBRARY
    )
    path = folder / "ol_dump_editions_2026-11-30.txt.gz"
    path.write_bytes(gzip.compress(text.encode()))
    return path


def test_an_open_library_dump_is_read_as_published(engine: Engine, tmp_path: Path) -> None:
    path = open_library(tmp_path)
    books, bad, notices = _read(path)
    assert bad == []
    edition, work = books
    assert (edition.id, edition.title, edition.year, edition.language) == (
        "OL10000135M",
        "Gardens of the Sun: a history",
        2008,
        "fre",
    )
    assert edition.description == "Plants and the light they need."
    assert edition.authors == []  # named by key only: the authors dump has the names
    assert edition.extra == {
        "isbn": "9780890423837",
        "author_keys": ["OL2674389A"],
        "publisher": "Bernan Press",
        "subjects": ["Gardening", "Sun"],
        "works": ["OL8218745W"],
        "other_series": ["Bernan garden books"],
    }
    assert (work.id, work.year, work.description) == (
        "OL8218745W",
        2003,
        "About gardens in the sun.",
    )
    assert work.extra["author_keys"] == ["OL1A"]
    assert notices == [
        f"{path}: decompressed (gzip)",
        f"{path}: read as an Open Library dump (its lines are type, key, revision, date and JSON)",
        f"{path}: 2 line(s) of other types than editions and works (authors, redirects, "
        "deletions) are no books: skipped",
    ]
    assert index_file(engine, path).added == 2


def test_a_quote_escaped_with_a_backslash_is_a_quote(tmp_path: Path) -> None:
    """BX-Books.csv writes a quote inside a quoted field as \\" (a CSV reader reads the field's
    end there, and kept the backslash); elsewhere a backslash stays a backslash."""
    path = tmp_path / "BX-Books.csv"
    path.write_bytes(
        b'"ISBN";"Book-Title";"Book-Author"\n'
        b'"0001";"The \\"Beauty\\" Book";"Ann Lee"\n'
        b'"0002";"C:\\\\new and C:\\temp";"Bob Ray"\n'
    )
    books, bad, _ = _read(path)
    assert bad == []
    assert [b.title for b in books] == ['The "Beauty" Book', "C:\\\\new and C:\\temp"]
