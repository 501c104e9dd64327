"""Issue 24: catalogs as exports have them. A `title,author,description,isbn` CSV, a CSV with a
byte-order mark and CRLF line ends, a JSONL of `author_name` without ids: each indexed and then
searched with its authors filled in; a header without `title` names it; a row's problems all
at once; columns read under another name, derived ids and metadata named in notices. On real
files, and SQLite and PostgreSQL where a database is involved."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine

from conftest import FakeEncoder, index_file, write_jsonl
from indexer.catalog import CatalogError, CatalogRecord, CatalogSnapshot, InvalidRow, scan_catalog

# as a spreadsheet exports it: ISBNs with hyphens, a comma list of two full names, "Last,
# First" (one name), a book without an ISBN, a column that is no book field
EXPORT_CSV = (
    "title,author,description,isbn,publisher\n"
    "Dune,Frank Herbert,A desert planet and its spice.,978-0-441-17271-9,Chilton\n"
    'Good Omens,"Neil Gaiman, Terry Pratchett",An angel and a demon avert the apocalypse.,'
    "0-06-085398-4,Workman\n"
    'The Hobbit,"Tolkien, J. R. R.",A hobbit goes there and back again.,,Allen\n'
)


def _rows(path: Path) -> list[CatalogRecord | InvalidRow]:
    return list(scan_catalog(path))


def _books(path: Path) -> list[CatalogRecord]:
    rows = _rows(path)
    assert [r for r in rows if isinstance(r, InvalidRow)] == []
    return [r for r in rows if isinstance(r, CatalogRecord)]


def _notices(path: Path) -> list[str]:
    with CatalogSnapshot.take(path) as snapshot:
        return snapshot.check().notices


def test_a_title_author_description_isbn_csv_is_read_with_its_authors(tmp_path: Path) -> None:
    path = tmp_path / "export.csv"
    path.write_text(EXPORT_CSV, encoding="utf-8")
    dune, omens, hobbit = _books(path)
    assert (dune.id, dune.title, dune.authors) == ("9780441172719", "Dune", ["Frank Herbert"])
    assert dune.description == "A desert planet and its spice."
    assert dune.extra == {"publisher": "Chilton"}
    assert (omens.id, omens.authors) == ("0060853984", ["Neil Gaiman", "Terry Pratchett"])
    assert hobbit.authors == ["Tolkien, J. R. R."]
    assert hobbit.id.startswith("the-hobbit-")  # no ISBN: derived from title and authors
    assert hobbit.extra == {"publisher": "Allen"}  # the empty ISBN is no value
    notices = _notices(path)
    assert notices == [
        f"{path}: read 'author' as authors, 'isbn' as the id",
        f"{path}: 1 book(s) without an id or ISBN got an id derived from title and authors "
        f"(line 4: {hobbit.id!r}); it stays the same while they do",
        f"{path}: kept as metadata, not as book fields: 'publisher' "
        "(the fields: id, title, description, authors, year, language)",
    ]


def test_a_csv_with_a_byte_order_mark_and_crlf_line_ends(tmp_path: Path) -> None:
    path = tmp_path / "excel.csv"
    text = (
        "Title,Authors,Year\r\n"
        + 'Dune,"Frank Herbert",1965\r\n'
        + 'Good Omens,"Neil Gaiman; Terry Pratchett",1990\r\n'
        + '"Caf\u00e9 Stories","Ann Smith, Bob Jones",2001\r\n'
    )
    path.write_bytes(b"\xef\xbb\xbf" + text.encode("utf-8"))
    books = _books(path)
    assert [(b.title, b.authors, b.year, b.line) for b in books] == [
        ("Dune", ["Frank Herbert"], 1965, 2),
        ("Good Omens", ["Neil Gaiman", "Terry Pratchett"], 1990, 3),
        ("Café Stories", ["Ann Smith", "Bob Jones"], 2001, 4),
    ]
    assert all(b.extra == {} for b in books)
    assert f"{path}: read 'Title' as title, 'Authors' as authors, 'Year' as year" in _notices(path)


def test_a_jsonl_of_author_name_without_ids_gets_stable_ids(tmp_path: Path) -> None:
    rows: list[dict[str, object]] = [
        {"title": "Dune", "author_name": ["Frank Herbert"], "first_publish_year": 1965},
        {"title": "Good Omens", "author_name": "Neil Gaiman; Terry Pratchett"},
        {"title": "Emma", "author": "Jane Austen", "isbn13": 9780141439587},
    ]
    first = _books(write_jsonl(tmp_path / "a.jsonl", rows))
    assert [b.authors for b in first] == [
        ["Frank Herbert"],
        ["Neil Gaiman", "Terry Pratchett"],
        ["Jane Austen"],
    ]
    assert (first[0].year, first[0].extra) == (1965, {})  # Open Library's year
    assert first[2].id == "9780141439587"
    # the same books in another order, other case and spacing: the same ids
    again = [
        {"title": "good omens ", "author_name": ["Neil  Gaiman", "terry pratchett"]},
        {"title": "DUNE", "author_name": ["Frank Herbert"]},
    ]
    second = _books(write_jsonl(tmp_path / "b.jsonl", again))
    assert {b.id for b in second} == {first[0].id, first[1].id}
    assert len({b.id for b in first}) == 3


def test_every_problem_of_a_row_is_reported_at_once(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "books.jsonl",
        [{"id": "a", "title": 5, "year": "nineteen", "authors": {"n": 1}, "language": "x" * 65}],
    )
    (bad,) = _rows(path)
    assert isinstance(bad, InvalidRow) and bad.line == 1
    for problem in (
        "'title' must be a string, got an integer",
        "'year' must be an integer, got a string 'nineteen'",
        "'authors' must be a string or a list of strings, got an object",
        "'language' must be at most 64 characters",
    ):
        assert problem in bad.reason, bad.reason
    csv_path = tmp_path / "books.csv"
    csv_path.write_text("id,title,year\n,,1999.5\n", encoding="utf-8")
    (bad,) = _rows(csv_path)
    assert isinstance(bad, InvalidRow)
    assert "missing 'title'" in bad.reason
    assert "'year' must be an integer" in bad.reason
    assert "missing 'id'" in bad.reason  # a catalog with an id column: every row has one


def test_books_with_the_same_title_and_authors_and_no_id_are_told_apart_by_an_id(
    tmp_path: Path,
) -> None:
    path = tmp_path / "books.csv"
    path.write_text("title,author\nDune,Frank Herbert\ndune,Frank Herbert\n", encoding="utf-8")
    rows = _rows(path)
    assert isinstance(rows[1], InvalidRow) and rows[1].line == 3
    assert "duplicate id" in rows[1].reason and "(first on line 2)" in rows[1].reason
    assert "give the books an 'id' or 'isbn' column" in rows[1].reason


@contextmanager
def _served(engine: Engine) -> Iterator[TestClient]:
    from service.api.main import create_app
    from service.config.settings import ServiceSettings

    url = engine.url.render_as_string(hide_password=False)
    settings = ServiceSettings(database_url=url, device="cpu", generation_poll_s=0)
    with TestClient(create_app(settings, encoder=FakeEncoder())) as client:
        yield client


def _found(client: TestClient, q: str, author: str) -> list[tuple[str, list[str]]]:
    got = client.get("/search", params={"q": q, "author": author, "k": 5})
    assert got.status_code == 200, got.text
    return [(r["title"], r["authors"]) for r in got.json()["results"]]


def test_each_export_is_indexed_and_searched_by_author(engine: Engine, tmp_path: Path) -> None:
    export = tmp_path / "export.csv"
    export.write_text(EXPORT_CSV, encoding="utf-8")
    report = index_file(engine, export)
    assert (report.books, report.added, report.rejected) == (3, 3, [])
    with _served(engine) as client:
        assert _found(client, "desert spice", "Herbert") == [("Dune", ["Frank Herbert"])]
        assert _found(client, "angel", "pratchett") == [
            ("Good Omens", ["Neil Gaiman", "Terry Pratchett"])
        ]
        book = client.get("/books/9780441172719").json()
        assert (book["title"], book["metadata"]) == ("Dune", {"publisher": "Chilton"})

        excel = tmp_path / "excel.csv"
        excel.write_bytes(
            b"\xef\xbb\xbfTitle,Author,Description\r\n"
            b'Emma,Jane Austen,"A matchmaker in Highbury,\r\nwrong each time."\r\n'
            b"Persuasion,Jane Austen,A second chance at love.\r\n"
        )
        report = index_file(engine, excel)
        assert (report.books, report.added, report.removed) == (2, 2, 3)
        client.app.state.watcher.check()  # type: ignore[attr-defined]
        assert {t for t, _ in _found(client, "matchmaker", "austen")} == {"Emma", "Persuasion"}

        jsonl = write_jsonl(
            tmp_path / "openlibrary.jsonl",
            [
                {"title": "Emma", "author_name": ["Jane Austen"], "subject": ["courtship"]},
                {"title": "Dracula", "author_name": ["Bram Stoker"]},
            ],
        )
        report = index_file(engine, jsonl)
        # Emma's id is derived from the same title and author both times: Emma is updated (a
        # new description), not removed and added again
        assert (report.books, report.added, report.updated, report.removed) == (2, 1, 1, 1)
        client.app.state.watcher.check()  # type: ignore[attr-defined]
        assert _found(client, "dracula", "stoker") == [("Dracula", ["Bram Stoker"])]


def test_a_header_without_title_stops_even_skip_invalid_and_writes_nothing(
    engine: Engine, tmp_path: Path
) -> None:
    path = tmp_path / "export.csv"
    path.write_text("name,author,isbn\nDune,Frank Herbert,1\n", encoding="utf-8")
    for skip_invalid in (False, True):
        with pytest.raises(CatalogError, match="header has no 'title' column"):
            index_file(engine, path, skip_invalid=skip_invalid)
    dune = write_jsonl(tmp_path / "dune.jsonl", [{"id": "d", "title": "Dune"}])
    assert index_file(engine, dune).generation == 1  # the refused runs took no generation


def test_a_catalog_record_keeps_its_json_kinds(tmp_path: Path) -> None:
    """Integer ids (a database's keys exported as JSON) are ids; metadata stays as it was."""
    path = tmp_path / "books.jsonl"
    path.write_text(json.dumps({"id": 42, "title": "T", "tags": [1, "a"]}) + "\n", "utf-8")
    (book,) = _books(path)
    assert (book.id, book.extra) == ("42", {"tags": [1, "a"]})


@pytest.mark.parametrize("sep", [";", "\t"])
def test_a_semicolon_or_tab_separated_export_is_read_and_said_so(tmp_path: Path, sep: str) -> None:
    """Excel writes `;` where the comma is the decimal sign; a header without a comma but with
    `;` (or tabs) is read with it."""
    path = tmp_path / "excel.csv"
    lines = [["Title", "Author", "Year"], ["Good Omens", "Neil Gaiman, Terry Pratchett", "1990"]]
    path.write_bytes(
        b"\xef\xbb\xbf" + "".join(sep.join(cells) + "\r\n" for cells in lines).encode("utf-8")
    )
    (book,) = _books(path)
    assert (book.title, book.authors, book.year) == (
        "Good Omens",
        ["Neil Gaiman", "Terry Pratchett"],
        1990,
    )
    shown = "tab" if sep == "\t" else "';'"
    assert _notices(path)[0] == f"{path}: read as {shown}-separated (the header has no comma)"


def test_a_file_of_another_encoding_is_read_as_it_and_said(tmp_path: Path) -> None:
    """A Windows spreadsheet's "ANSI" CSV (cp1252) or Book-Crossing's Latin-1: read as the
    encoding charset-normalizer finds, in a notice; `--encoding` names it outright."""
    path = tmp_path / "ansi.csv"
    text = "title,author\nCafé Society,Ann Smith\nLes Misérables,Victor Hugo\nDune,F. Herbert\n"
    path.write_bytes(text.encode("cp1252"))
    assert [(b.line, b.title) for b in _books(path)] == [
        (2, "Café Society"),
        (3, "Les Misérables"),
        (4, "Dune"),
    ]
    assert _notices(path)[0] == (
        f"{path}: not UTF-8: read as cp1252, the encoding charset-normalizer finds in it, "
        "converted to UTF-8 (--encoding NAME names another)"
    )
    with CatalogSnapshot.take(path, encoding="latin-1") as snapshot:
        assert next(b.title for b in snapshot.records()) == "Café Society"
        assert snapshot.notices == [f"{path}: read as iso8859-1 (--encoding), converted to UTF-8"]
    with pytest.raises(CatalogError, match="--encoding 'klingon': no such encoding"):
        CatalogSnapshot.take(path, encoding="klingon")
    with pytest.raises(CatalogError, match=r"not ascii \(ordinal not in range"):
        CatalogSnapshot.take(path, encoding="ascii")


def test_a_utf8_file_with_a_few_rows_of_another_encoding_keeps_its_accents(
    tmp_path: Path,
) -> None:
    """Most of its accented rows are UTF-8: read as another encoding every one of them would be
    garbled, so the file stays UTF-8 and the odd row is named, at its line."""
    path = tmp_path / "mixed.csv"
    good = "title,author\nCafé Society,Ann Smith\nLes Misérables,Victor Hugo\n".encode()
    path.write_bytes(good + "Über Alles,Jörg Fauser\n".encode("cp1252") + b"Dune,F. Herbert\n")
    rows = _rows(path)
    assert [r.title for r in rows if isinstance(r, CatalogRecord)] == [
        "Café Society",
        "Les Misérables",
        "Dune",
    ]
    (bad,) = [r for r in rows if isinstance(r, InvalidRow)]
    assert (bad.line, bad.reason) == (
        4,
        "invalid UTF-8 (save the file as UTF-8: Excel's 'CSV UTF-8')",
    )


def test_a_goodreads_export_is_read_with_its_book_ids(tmp_path: Path) -> None:
    path = tmp_path / "goodreads_library_export.csv"
    path.write_text(
        "Book Id,Title,Author,Author l-f,ISBN,ISBN13,My Rating\n"
        '234225,Dune,Frank Herbert,"Herbert, Frank","=""0441172717""","=""9780441172719""",5\n'
        '12067,Good Omens,Terry Pratchett,"Pratchett, Terry","=""""","=""""",4\n',
        encoding="utf-8",
    )
    dune, omens = _books(path)
    assert (dune.id, dune.title, dune.authors) == ("234225", "Dune", ["Frank Herbert"])
    assert dune.extra["Author l-f"] == "Herbert, Frank"
    assert (omens.id, omens.authors) == ("12067", ["Terry Pratchett"])
    assert _notices(path)[0] == (
        f"{path}: read 'Book Id' as id, 'Title' as title, 'Author' as authors"
    )


def test_an_isbn_is_the_id_without_its_spreadsheet_formula(tmp_path: Path) -> None:
    path = tmp_path / "export.csv"
    path.write_text('Title,ISBN13\nDune,"=""978-0441172719"""\n', encoding="utf-8")
    (dune,) = _books(path)
    assert dune.id == "9780441172719"


def test_a_cyrillic_code_page_is_not_read_as_a_western_one(tmp_path: Path) -> None:
    path = tmp_path / "magazin.csv"
    text = "title,author\nВойна и мир,Лев Толстой\nПреступление и наказание,Фёдор Достоевский\n"
    path.write_bytes(text.encode("cp1251"))
    assert [(b.title, b.authors) for b in _books(path)] == [
        ("Война и мир", ["Лев Толстой"]),
        ("Преступление и наказание", ["Фёдор Достоевский"]),
    ]
    assert "read as cp1251" in _notices(path)[0]
