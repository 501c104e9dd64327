"""Unit tests of the catalog reader (indexer/catalog/), on real files in tmp_path."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import SHARED_CATALOG, write_jsonl
from indexer.catalog import (
    CatalogError,
    CatalogHeaderError,
    CatalogRecord,
    InvalidRow,
    read_catalog,
    scan_catalog,
)
from indexer.data import DEMO_CATALOG

Row = CatalogRecord | InvalidRow


def scan(path: Path) -> list[Row]:
    return list(scan_catalog(path))


def records(rows: list[Row]) -> list[CatalogRecord]:
    return [r for r in rows if isinstance(r, CatalogRecord)]


def invalid(rows: list[Row]) -> list[InvalidRow]:
    return [r for r in rows if isinstance(r, InvalidRow)]


def only_invalid(path: Path) -> InvalidRow:
    rows = scan(path)
    bad = invalid(rows)
    assert len(bad) == 1, rows
    return bad[0]


def write_csv(path: Path, text: str) -> Path:
    path.write_bytes(text.encode("utf-8"))
    return path


# --- JSONL happy path ---------------------------------------------------------------------


def test_jsonl_fields_parsed_and_unknown_fields_kept_in_extra(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "books.jsonl",
        [
            {
                "id": "b1",
                "title": "Dune",
                "description": "Spice.",
                "authors": ["Frank Herbert"],
                "year": 1965,
                "language": "en",
                "publisher": "Chilton",
                "subjects": ["sf", "desert"],
            },
        ],
    )
    (book,) = list(read_catalog(path))
    assert book == CatalogRecord(
        id="b1",
        title="Dune",
        description="Spice.",
        authors=["Frank Herbert"],
        year=1965,
        language="en",
        extra={"publisher": "Chilton", "subjects": ["sf", "desert"]},
        line=1,
    )


def test_jsonl_minimal_record_has_defaults(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "books.jsonl", [{"id": "b1", "title": "T"}])
    (book,) = list(read_catalog(path))
    assert book.description is None
    assert book.authors == []
    assert book.year is None
    assert book.language is None
    assert book.extra == {}


def test_jsonl_whitespace_stripped(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "books.jsonl",
        [
            {
                "id": "  b1 ",
                "title": "\tDune \n",
                "description": "  Spice.  ",
                "authors": ["  Frank Herbert ", "   "],
                "language": " en ",
            }
        ],
    )
    (book,) = list(read_catalog(path))
    assert book.id == "b1"
    assert book.title == "Dune"
    assert book.description == "Spice."
    assert book.authors == ["Frank Herbert"]
    assert book.language == "en"


def test_jsonl_authors_as_semicolon_string(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "books.jsonl", [{"id": "b1", "title": "T", "authors": "A; B ;"}])
    (book,) = list(read_catalog(path))
    assert book.authors == ["A", "B"]


def test_jsonl_blank_lines_skipped_and_line_numbers_counted(tmp_path: Path) -> None:
    path = tmp_path / "books.jsonl"
    path.write_text(
        '\n{"id": "a", "title": "A"}\n   \n\r\n{"id": "b", "title": "B"}\n\n',
        encoding="utf-8",
    )
    rows = scan(path)
    assert invalid(rows) == []
    assert [(r.id, r.line) for r in records(rows)] == [("a", 2), ("b", 5)]


@pytest.mark.parametrize("suffix", [".jsonl", ".ndjson", ".JSONL"])
def test_jsonl_suffixes_accepted(tmp_path: Path, suffix: str) -> None:
    path = write_jsonl(tmp_path / f"books{suffix}", [{"id": "a", "title": "A"}])
    assert [r.id for r in read_catalog(path)] == ["a"]


def test_empty_jsonl_file_has_no_rows(tmp_path: Path) -> None:
    path = tmp_path / "books.jsonl"
    path.write_bytes(b"")
    assert scan(path) == []


# --- CSV happy path -----------------------------------------------------------------------


def test_csv_fields_parsed(tmp_path: Path) -> None:
    path = write_csv(
        tmp_path / "books.csv",
        "id,title,description,authors,year,language,publisher\n"
        "b1,Dune,Spice.,Frank Herbert; Brian Herbert ,1999,en,Chilton\n",
    )
    (book,) = list(read_catalog(path))
    assert book == CatalogRecord(
        id="b1",
        title="Dune",
        description="Spice.",
        authors=["Frank Herbert", "Brian Herbert"],
        year=1999,
        language="en",
        extra={"publisher": "Chilton"},
        line=2,
    )
    assert isinstance(book.year, int)


def test_csv_empty_cells_are_none_or_absent(tmp_path: Path) -> None:
    path = write_csv(
        tmp_path / "books.csv",
        "id,title,description,authors,year,language,publisher\nb1,Dune,,,,  ,\n",
    )
    (book,) = list(read_catalog(path))
    assert book.description is None
    assert book.authors == []
    assert book.year is None
    assert book.language is None
    assert book.extra == {}


def test_csv_cells_and_header_stripped(tmp_path: Path) -> None:
    path = write_csv(tmp_path / "books.csv", " id , title , isbn10 \n  b1 ,  Dune  , 0441 \n")
    (book,) = list(read_catalog(path))
    assert (book.id, book.title, book.extra) == ("b1", "Dune", {"isbn10": "0441"})


def test_csv_quoted_field_over_two_lines_keeps_following_line_numbers(tmp_path: Path) -> None:
    path = write_csv(
        tmp_path / "books.csv",
        'id,title,description\na,A,"first line\nsecond line"\nb,B,plain\n\nc,C,plain\n',
    )
    rows = scan(path)
    assert invalid(rows) == []
    got = records(rows)
    assert [(r.id, r.line) for r in got] == [("a", 2), ("b", 4), ("c", 6)]
    assert got[0].description == "first line\nsecond line"


def test_csv_line_numbers_after_multiline_header(tmp_path: Path) -> None:
    path = write_csv(tmp_path / "books.csv", 'id,"title"\n"a",A\nb,B\n')
    assert [(r.id, r.line) for r in read_catalog(path)] == [("a", 2), ("b", 3)]


def test_csv_crlf_line_endings(tmp_path: Path) -> None:
    path = write_csv(tmp_path / "books.csv", "id,title\r\na,A\r\nb,B\r\n")
    assert [(r.id, r.title, r.line) for r in read_catalog(path)] == [("a", "A", 2), ("b", "B", 3)]


def test_csv_utf8_bom_in_header(tmp_path: Path) -> None:
    path = tmp_path / "books.csv"
    path.write_bytes(b"\xef\xbb\xbfid,title,year\nb1,Caf\xc3\xa9,2001\n")
    (book,) = list(read_catalog(path))
    assert (book.id, book.title, book.year, book.line) == ("b1", "Café", 2001, 2)
    assert book.extra == {}


def test_csv_utf8_bom_before_quoted_header(tmp_path: Path) -> None:
    path = tmp_path / "books.csv"
    path.write_bytes(b'\xef\xbb\xbf"id","title"\n"b1","Dune"\n')
    assert [r.id for r in read_catalog(path)] == ["b1"]


def test_csv_long_description_is_read(tmp_path: Path) -> None:
    long = "x" * 200_000
    path = write_csv(tmp_path / "books.csv", f"id,title,description\na,A,{long}\nb,B,short\n")
    got = list(read_catalog(path))
    assert [r.id for r in got] == ["a", "b"]
    assert got[0].description == long


def test_empty_csv_file_has_no_rows(tmp_path: Path) -> None:
    path = tmp_path / "books.csv"
    path.write_bytes(b"")
    assert scan(path) == []


# --- bad rows -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("bad", "words"),
    [
        pytest.param({"id": None, "title": "T"}, ["missing", "id"], id="null-id"),
        pytest.param({"id": "  ", "title": "T"}, ["id", "empty"], id="blank-id"),
        pytest.param({"id": 1.5, "title": "T"}, ["id", "string", "number"], id="float-id"),
        pytest.param({"id": "x" * 257, "title": "T"}, ["id", "256"], id="long-id"),
        pytest.param({"id": "a\tb", "title": "T"}, ["id", "printable"], id="control-in-id"),
        pytest.param({"id": "x"}, ["missing", "title"], id="missing-title"),
        pytest.param({"id": "x", "title": ""}, ["title"], id="empty-title"),
        pytest.param({"id": "x", "title": "   "}, ["title"], id="blank-title"),
        pytest.param({"id": "x", "title": 5}, ["title", "string"], id="int-title"),
        pytest.param(
            {"id": "x", "title": "T", "year": "1999"},
            ["year", "integer", "'1999'"],
            id="string-year",
        ),
        pytest.param(
            {"id": "x", "title": "T", "year": 3.5}, ["year", "integer", "3.5"], id="float-year"
        ),
        pytest.param(
            {"id": "x", "title": "T", "year": True}, ["year", "integer", "boolean"], id="bool-year"
        ),
        pytest.param(
            {"id": "x", "title": "T", "authors": ["A", 1]},
            ["authors", "list of strings"],
            id="int-in-authors",
        ),
        pytest.param(
            {"id": "x", "title": "T", "authors": {"name": "A"}},
            ["authors", "object"],
            id="object-authors",
        ),
        pytest.param(
            {"id": "x", "title": "T", "description": 42},
            ["description", "string"],
            id="int-description",
        ),
        pytest.param(
            {"id": "x", "title": "T", "description": ["a"]},
            ["description", "list"],
            id="list-description",
        ),
        pytest.param(
            {"id": "x", "title": "T", "language": 1}, ["language", "string"], id="int-language"
        ),
    ],
)
def test_jsonl_bad_row(tmp_path: Path, bad: dict[str, object], words: list[str]) -> None:
    path = write_jsonl(tmp_path / "books.jsonl", [{"id": "ok", "title": "Fine"}, bad])
    row = only_invalid(path)
    assert row.path == str(path)
    assert row.line == 2
    for word in words:
        assert word in row.reason


@pytest.mark.parametrize(
    ("line", "words"),
    [
        pytest.param('{"id": "x", "title": ', ["broken JSON"], id="truncated"),
        pytest.param("{'id': 'x'}", ["broken JSON"], id="single-quotes"),
        pytest.param('["x", "T"]', ["JSON object", "list"], id="array"),
        pytest.param('"just text"', ["JSON object", "string"], id="string"),
        pytest.param("null", ["JSON object", "null"], id="null"),
    ],
)
def test_jsonl_unparseable_line(tmp_path: Path, line: str, words: list[str]) -> None:
    path = tmp_path / "books.jsonl"
    path.write_text(
        f'{{"id": "a", "title": "A"}}\n\n{line}\n{{"id": "b", "title": "B"}}\n', encoding="utf-8"
    )
    rows = scan(path)
    (row,) = invalid(rows)
    assert row.line == 3
    for word in words:
        assert word in row.reason
    assert [r.id for r in records(rows)] == ["a", "b"]


def test_jsonl_invalid_utf8(tmp_path: Path) -> None:
    path = tmp_path / "books.jsonl"
    path.write_bytes(
        b'{"id": "a", "title": "A"}\n'
        b'{"id": "b", "title": "B\xff\xfe"}\n'
        b'{"id": "c", "title": "Caf\xc3\xa9"}\n'
    )
    rows = scan(path)
    (row,) = invalid(rows)
    assert row.line == 2
    assert "UTF-8" in row.reason
    assert "byte 23" in row.reason  # 0-based offset within the line
    assert [(r.id, r.title) for r in records(rows)] == [("a", "A"), ("c", "Café")]


def test_jsonl_duplicate_id_names_first_line(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "books.jsonl",
        [
            {"id": "a", "title": "A"},
            {"id": "b", "title": "B"},
            {"id": " a ", "title": "A again"},
            {"id": "a", "title": "A thrice"},
        ],
    )
    rows = scan(path)
    assert [r.id for r in records(rows)] == ["a", "b"]
    bad = invalid(rows)
    assert [r.line for r in bad] == [3, 4]
    for row in bad:
        assert "duplicate id 'a'" in row.reason
        assert "line 1" in row.reason


def test_bad_row_does_not_claim_its_id(tmp_path: Path) -> None:
    """An id on a rejected row is not 'seen': a later good row with it is not a duplicate."""
    path = write_jsonl(
        tmp_path / "books.jsonl",
        [
            {"id": "a", "title": "A", "year": "1999"},
            {"id": "a", "title": "A", "year": 1999},
        ],
    )
    rows = scan(path)
    assert [r.line for r in invalid(rows)] == [1]
    assert [(r.id, r.line) for r in records(rows)] == [("a", 2)]


def test_good_rows_after_bad_rows_still_yielded_in_order(tmp_path: Path) -> None:
    path = tmp_path / "books.jsonl"
    path.write_bytes(
        b'{"id": "a", "title": "A"}\n'
        b"not json\n"
        b'{"id": "b", "title": "B"}\n'
        b'{"id": "c"}\n'
        b'{"id": "d", "title": 5}\n'
        b'{"id": "e", "title": "E"}\n'
    )
    rows = scan(path)
    assert [(type(r).__name__, r.line) for r in rows] == [
        ("CatalogRecord", 1),
        ("InvalidRow", 2),
        ("CatalogRecord", 3),
        ("InvalidRow", 4),
        ("InvalidRow", 5),
        ("CatalogRecord", 6),
    ]


@pytest.mark.parametrize(
    ("row", "words"),
    [
        pytest.param(",Title,", ["missing", "id"], id="missing-id"),
        pytest.param("x,,", ["missing", "title"], id="missing-title"),
        pytest.param('x,"  ",', ["title"], id="blank-title"),
        pytest.param("x,T,nineteen", ["year", "integer", "'nineteen'"], id="word-year"),
        pytest.param("x,T,1999.5", ["year", "integer"], id="decimal-year"),
        pytest.param("x,T", ["expected 3 columns, got 2"], id="too-few-columns"),
        pytest.param("x,T,1999,extra", ["expected 3 columns, got 4"], id="too-many-columns"),
    ],
)
def test_csv_bad_row(tmp_path: Path, row: str, words: list[str]) -> None:
    path = write_csv(tmp_path / "books.csv", f"id,title,year\nok,Fine,2000\n{row}\nz,Z,1\n")
    rows = scan(path)
    (bad,) = invalid(rows)
    assert bad.path == str(path)
    assert bad.line == 3
    for word in words:
        assert word in bad.reason
    assert [r.id for r in records(rows)] == ["ok", "z"]


def test_csv_invalid_utf8_row(tmp_path: Path) -> None:
    path = tmp_path / "books.csv"
    path.write_bytes(b"id,title\na,A\nb,B\xff\xfeC\nc,Caf\xc3\xa9\n")
    rows = scan(path)
    (bad,) = invalid(rows)
    assert bad.line == 3
    assert "UTF-8" in bad.reason
    assert [(r.id, r.title) for r in records(rows)] == [("a", "A"), ("c", "Café")]


def test_csv_duplicate_id_names_first_line(tmp_path: Path) -> None:
    path = write_csv(tmp_path / "books.csv", 'id,title\na,A\n"b","B\nB"\na,A2\n')
    rows = scan(path)
    (bad,) = invalid(rows)
    assert bad.line == 5
    assert "duplicate id 'a'" in bad.reason
    assert "line 2" in bad.reason


@pytest.mark.parametrize("header", ["id,description", "name,heading", "Author,ISBN"])
def test_csv_header_without_a_title_column_is_named_and_stops_the_read(
    tmp_path: Path, header: str
) -> None:
    path = write_csv(tmp_path / "books.csv", f"{header}\na,b\n")
    with pytest.raises(CatalogHeaderError) as info:
        scan(path)
    (bad,) = info.value.rows
    assert bad.line == 1
    assert "header has no 'title' column" in bad.reason
    assert "name the column that holds the book titles 'title'" in bad.reason
    for column in header.split(","):
        assert repr(column) in bad.reason  # the columns it has
    assert str(info.value) == f"{path}:1: {bad.reason}"


# --- read_catalog and CatalogError --------------------------------------------------------


def test_read_catalog_raises_at_first_bad_row(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "books.jsonl",
        [
            {"id": "a", "title": "A"},
            {"id": "b"},
            {"id": 7, "title": "C"},
        ],
    )
    seen: list[str] = []
    with pytest.raises(CatalogError) as info:
        for book in read_catalog(path):
            seen.append(book.id)
    assert seen == ["a"]
    err = info.value
    assert len(err.rows) == 1
    assert err.rows[0].path == str(path)
    assert err.rows[0].line == 2
    assert "title" in err.rows[0].reason
    assert f"{path}:2" in str(err)
    assert "1 invalid row(s)" in str(err)


def test_read_catalog_error_for_csv_names_path_and_line(tmp_path: Path) -> None:
    path = write_csv(tmp_path / "books.csv", "id,title\na,A\nb\n")
    with pytest.raises(CatalogError, match="columns") as info:
        list(read_catalog(path))
    assert (info.value.rows[0].path, info.value.rows[0].line) == (str(path), 3)
    assert f"{path}:3" in str(info.value)


def test_catalog_error_is_a_value_error() -> None:
    assert issubclass(CatalogError, ValueError)


@pytest.mark.parametrize("name", ["books.mrk", "books.xls", "books", "books.csv.zip"])
def test_unknown_suffix_raises(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    path.write_text('{"id": "a", "title": "A"}\n', encoding="utf-8")
    with pytest.raises(CatalogError, match="unknown catalog format") as info:
        list(scan_catalog(path))
    assert ".jsonl" in str(info.value)
    assert ".csv" in str(info.value)
    assert info.value.rows == []


@pytest.mark.parametrize("name", ["missing.jsonl", "missing.csv"])
def test_missing_file_raises(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    with pytest.raises(CatalogError, match="no such file") as info:
        list(read_catalog(path))
    assert str(path) in str(info.value)
    assert info.value.rows == []


def test_directory_is_not_a_catalog(tmp_path: Path) -> None:
    path = tmp_path / "books.jsonl"
    path.mkdir()
    with pytest.raises(CatalogError, match="no such file"):
        list(scan_catalog(path))


def test_catalog_error_lists_at_most_20_rows(tmp_path: Path) -> None:
    rows = [InvalidRow("cat.jsonl", n, f"problem {n}") for n in range(1, 26)]
    message = str(CatalogError(rows))
    assert message.startswith("25 invalid row(s):")
    assert "cat.jsonl:20: problem 20" in message
    assert "cat.jsonl:21:" not in message
    assert sum(1 for line in message.splitlines() if line.strip().startswith("cat.jsonl:")) == 20
    assert "and 5 more" in message


def test_catalog_error_with_exactly_20_rows_says_no_more() -> None:
    rows = [InvalidRow("c.csv", n, "bad") for n in range(1, 21)]
    message = str(CatalogError(rows))
    assert "c.csv:20: bad" in message
    assert "more" not in message


def test_catalog_error_explicit_message() -> None:
    err = CatalogError([], "something specific")
    assert str(err) == "something specific"
    assert err.rows == []


def test_invalid_row_str() -> None:
    assert str(InvalidRow("a/b.jsonl", 7, "broken")) == "a/b.jsonl:7: broken"


# --- real catalogs ------------------------------------------------------------------------


def test_shared_catalog_parses() -> None:
    if not SHARED_CATALOG.is_file():
        pytest.skip(f"shared catalog not present at {SHARED_CATALOG}")
    rows = scan(SHARED_CATALOG)
    assert invalid(rows) == []
    books = records(rows)
    assert len(books) == 5194
    assert len({b.id for b in books}) == len(books)
    assert all(isinstance(b.authors, list) for b in books)
    assert all(isinstance(a, str) for b in books for a in b.authors)
    assert any(b.year is not None for b in books)
    assert any(b.language is not None for b in books)
    assert all({"publisher", "isbn10"} <= b.extra.keys() for b in books)


def test_demo_catalog_is_valid() -> None:
    rows = scan(DEMO_CATALOG)
    assert invalid(rows) == []
    books = records(rows)
    assert len(books) >= 150
    assert all(b.description for b in books)
    assert len({b.id for b in books}) == len(books)
    assert all(b.title for b in books)


def test_demo_catalog_lines_match_file() -> None:
    lines = DEMO_CATALOG.read_text(encoding="utf-8").splitlines()
    for book in read_catalog(DEMO_CATALOG):
        assert json.loads(lines[book.line - 1])["id"] == book.id


def test_jsonl_byte_order_mark_is_ignored(tmp_path: Path) -> None:
    path = tmp_path / "books.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"id": "b1", "title": "Dune"}\n{"id": "b2", "title": "Emma"}\n')
    assert [r.id for r in read_catalog(path)] == ["b1", "b2"]


def test_csv_record_the_reader_cannot_parse_is_reported_with_its_line(tmp_path: Path) -> None:
    path = write_csv(tmp_path / "books.csv", "id,title\na,A\nb,B\rx\nc,C\n")  # a bare CR
    rows = scan(path)
    assert isinstance(rows[0], CatalogRecord) and rows[0].id == "a"
    assert isinstance(rows[1], InvalidRow) and rows[1].line == 3
    assert "malformed CSV" in rows[1].reason
