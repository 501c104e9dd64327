"""Issue 33: catalogs as readers' tools export them. A Goodreads library export, a Calibre CSV, a
LibraryThing TSV, a JSON array, a gzipped JSONL and a plain TSV, each written here by hand
with four books, read with their authors, years and descriptions; then indexed by `attend
index` and searched by `attend search --author/--year-min/--year-max` (in-process, the real
model), and an edited description searched again after a re-index. Format errors in one line."""

from __future__ import annotations

import csv
import gzip
import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from conftest import FakeEncoder
from indexer.catalog import CatalogError, CatalogRecord, CatalogSnapshot, InvalidRow, scan_catalog
from models.encoder import SentenceTransformerEncoder
from service.commands.cli import main

# (title, authors, year, description): what every export below holds, in its own way
BOOKS = [
    (
        "Deep Learning",
        ["Ian Goodfellow", "Yoshua Bengio", "Aaron Courville"],
        2016,
        "A textbook on neural networks: linear algebra, optimisation and generative models.",
    ),
    ("Dune", ["Frank Herbert"], 1965, "A desert planet, its spice, and the giant sandworms."),
    ("The Hobbit", ["J. R. R. Tolkien"], 1937, "A hobbit goes with dwarves after a dragon's gold."),
    ("Emma", ["Jane Austen"], 1815, "A matchmaker in a country village meddles in romances."),
]
WHALE = "Captain Ahab hunts the white whale across the sea on a doomed ship."


def _csv(rows: list[list[str]], delimiter: str = ",") -> bytes:
    out = io.StringIO()
    csv.writer(out, delimiter=delimiter, lineterminator="\n").writerows(rows)
    return out.getvalue().encode("utf-8")


def goodreads(books: list[tuple[str, list[str], int, str]]) -> bytes:
    """Goodreads' library export: no description; ISBNs as Excel formulas; the first edition's
    year in `Original Publication Year` (empty for a new book: then `Year Published`)."""
    header = [
        "Book Id", "Title", "Author", "Author l-f", "Additional Authors", "ISBN", "ISBN13",
        "My Rating", "Average Rating", "Publisher", "Binding", "Number of Pages",
        "Year Published", "Original Publication Year", "Date Read", "Date Added", "Bookshelves",
        "Bookshelves with positions", "Exclusive Shelf", "My Review", "Spoiler", "Private Notes",
        "Read Count", "Owned Copies",
    ]  # fmt: skip
    rows = [header]
    for i, (title, authors, year, _) in enumerate(books):
        first, *more = authors
        isbn = f"04411727{i:02d}"
        original, published = ("", str(year)) if year > 2000 else (str(year), "2005")
        last_first = ", ".join(reversed(first.rsplit(" ", 1)))
        rows.append([
            str(100 + i), title, first, last_first, ", ".join(more),
            f'="{isbn}"', f'="978{isbn}"', "5", "4.1", "Ace", "Paperback", "300",
            published, original, "2020/01/02", "2019/12/01", "to-read, ml", "ml (#1)", "read",
            "", "", "", "1", "0",
        ])  # fmt: skip
    return _csv(rows)


def calibre(books: list[tuple[str, list[str], int, str]]) -> bytes:
    """Calibre's CSV export: ` & ` between authors, `comments` in HTML, `pubdate` a date."""
    rows = [
        ["title", "authors", "author_sort", "publisher", "pubdate", "isbn", "comments", "tags",
         "series", "series_index", "id", "uuid"],
    ]  # fmt: skip
    for i, (title, authors, year, description) in enumerate(books):
        html = f"<div><p>{description.replace('&', '&amp;')}</p><p><b>New</b> edition.</p></div>"
        rows.append([
            title, " & ".join(authors), authors[0], "MIT", f"{year}-11-18T08:00:00+00:00", "",
            html, "fiction, classics", "Classics", f"{i + 1}.0", str(10 + i), f"uuid-{i}",
        ])  # fmt: skip
    return _csv(rows)


def librarything(books: list[tuple[str, list[str], int, str]]) -> bytes:
    """LibraryThing's TSV export: `Primary Author` and one `Secondary Author`, a `Date`, the
    description in `Summary`, and the reader's `Review` of the last book."""
    header = [
        "Book Id", "Title", "Sort Character", "Primary Author", "Primary Author Role",
        "Secondary Author", "Secondary Author Roles", "Publication", "Date", "Review", "Rating",
        "Comment", "Private Comment", "Summary", "Media", "Tags", "Languages", "ISBN",
    ]  # fmt: skip
    rows = [header]
    for i, (title, authors, year, description) in enumerate(books):
        last = i == len(books) - 1
        rows.append([
            str(7000 + i), title, "1", authors[0], "Author", " ".join(authors[1:2]), "",
            f"Ace ({year})", f"c{year}", "Loved every page." if last else "", "5", "", "",
            description, "Book", "", "English", f"[04411727{i:02d}]",
        ])  # fmt: skip
    return _csv(rows, delimiter="\t")


def _objects(books: list[tuple[str, list[str], int, str]]) -> list[dict[str, Any]]:
    return [
        {"id": f"b{i}", "title": t, "authors": a, "year": y, "description": d}
        for i, (t, a, y, d) in enumerate(books)
    ]


def json_array(books: list[tuple[str, list[str], int, str]]) -> bytes:
    return json.dumps(_objects(books), indent=2).encode("utf-8")


def gzipped_jsonl(books: list[tuple[str, list[str], int, str]]) -> bytes:
    return gzip.compress("".join(json.dumps(o) + "\n" for o in _objects(books)).encode("utf-8"))


def plain_tsv(books: list[tuple[str, list[str], int, str]]) -> bytes:
    rows = [["Title", "Author", "Year", "Description"]]
    rows += [[t, "; ".join(a), str(y), d] for t, a, y, d in books]
    return _csv(rows, delimiter="\t")


Export = Callable[[list[tuple[str, list[str], int, str]]], bytes]
EXPORTS: dict[str, tuple[str, Export]] = {
    "goodreads": ("goodreads_library_export.csv", goodreads),
    "calibre": ("calibre.csv", calibre),
    "librarything": ("librarything_export.tsv", librarything),
    "json-array": ("books.json", json_array),
    "gzip": ("books.jsonl.gz", gzipped_jsonl),
    "tsv": ("books.txt", plain_tsv),
}
WITH_DESCRIPTIONS = [name for name in EXPORTS if name != "goodreads"]


def write_export(folder: Path, name: str, books: list[tuple[str, list[str], int, str]]) -> Path:
    file, export = EXPORTS[name]
    path = folder / file
    path.write_bytes(export(books))
    return path


def _books(path: Path) -> list[CatalogRecord]:
    rows = list(scan_catalog(path))
    assert [r for r in rows if isinstance(r, InvalidRow)] == []
    return [r for r in rows if isinstance(r, CatalogRecord)]


@pytest.mark.parametrize("name", EXPORTS)
def test_each_export_is_read_with_its_authors_years_and_descriptions(
    tmp_path: Path, name: str
) -> None:
    books = _books(write_export(tmp_path, name, BOOKS))
    assert [b.title for b in books] == [t for t, _, _, _ in BOOKS]
    for book, (_, authors, year, description) in zip(books, BOOKS, strict=True):
        assert book.year == year, (book.title, book.year)
        if name == "librarything":  # its one secondary author
            assert book.authors == authors[:2]
        else:
            assert book.authors == authors
        if name == "goodreads":
            assert book.description is None  # the export has none
        elif name == "calibre":  # the HTML as text, a line per paragraph
            assert book.description == f"{description}\nNew edition."
        else:
            assert book.description == description


def test_goodreads_keeps_its_shelves_and_unwraps_its_excel_cells(tmp_path: Path) -> None:
    dl, dune, *_ = _books(write_export(tmp_path, "goodreads", BOOKS))
    assert (dl.id, dl.extra["ISBN"], dl.extra["ISBN13"]) == ("100", "0441172700", "9780441172700")
    assert dl.extra["Bookshelves"] == "to-read, ml"
    assert dune.extra["Year Published"] == 2005  # the first edition's year is the year


def test_calibre_keeps_its_tags_and_series(tmp_path: Path) -> None:
    dl, *_ = _books(write_export(tmp_path, "calibre", BOOKS))
    assert dl.id == "10"
    assert {k: dl.extra[k] for k in ("tags", "series", "series_index")} == {
        "tags": "fiction, classics",
        "series": "Classics",
        "series_index": "1.0",
    }


def test_the_notices_name_each_mapping(tmp_path: Path) -> None:
    path = write_export(tmp_path, "calibre", BOOKS)
    with CatalogSnapshot.take(path) as snapshot:
        notices = snapshot.check().notices
    assert f"{path}: read 'pubdate' as year, 'comments' as description" in notices
    path = write_export(tmp_path, "goodreads", BOOKS)
    with CatalogSnapshot.take(path) as snapshot:
        (known, read, *_) = snapshot.check().notices
    assert known == f"{path}: read as a Goodreads library export (its header's columns say so)"
    assert "'Additional Authors' as more authors" in read
    assert "'Original Publication Year' as year" in read and "'Year Published' as year" in read


@pytest.fixture(scope="module")
def real_encoder() -> SentenceTransformerEncoder:
    """The packaged model on torch (no wait for the ONNX export)."""
    return SentenceTransformerEncoder(backend="torch", device="cpu", batch_size=64)


@pytest.fixture
def attend(
    database_url: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    real_encoder: SentenceTransformerEncoder,
) -> Callable[..., str]:
    """`attend ARGS…` in-process on an empty database, the real model loaded once for the
    module; its stdout (a failed command fails the test)."""
    monkeypatch.setenv("ATTEND_DATABASE_URL", database_url)
    monkeypatch.setattr("service.engine.startup.build_encoder", lambda settings: real_encoder)

    def run(*args: str) -> str:
        status = main(list(args))
        out, err = capsys.readouterr()
        assert status == 0, err
        return out

    return run


def _titles(attend: Callable[..., str], query: str, *options: str) -> list[str]:
    response = json.loads(attend("search", query, "--here", "--json", *options))
    return [hit["title"] for hit in response["results"]]


@pytest.mark.model
@pytest.mark.parametrize("name", EXPORTS)
def test_each_export_is_indexed_and_searched_by_author_and_year(
    attend: Callable[..., str], tmp_path: Path, name: str
) -> None:
    out = attend("index", str(write_export(tmp_path, name, BOOKS)))
    assert "4 books: 4 added" in out
    assert _titles(attend, "neural networks", "--author", "bengio") == ["Deep Learning"]
    assert _titles(attend, "a book", "--year-min", "2015") == ["Deep Learning"]
    assert _titles(attend, "a book", "--year-max", "1900") == ["Emma"]
    assert set(_titles(attend, "a book", "--year-min", "1930", "--year-max", "1970")) == {
        "Dune",
        "The Hobbit",
    }


@pytest.mark.model
@pytest.mark.parametrize("name", WITH_DESCRIPTIONS)
def test_an_edited_description_changes_the_answer_after_a_re_index(
    attend: Callable[..., str], tmp_path: Path, name: str
) -> None:
    attend("index", str(write_export(tmp_path, name, BOOKS)))
    assert _titles(attend, "hunting a whale at sea", "-k", "1") != ["Emma"]
    edited = [(t, a, y, WHALE if t == "Emma" else d) for t, a, y, d in BOOKS]
    out = attend("index", str(write_export(tmp_path, name, edited)))
    assert "1 updated" in out
    assert _titles(attend, "hunting a whale at sea", "-k", "1") == ["Emma"]


def test_an_indented_array_named_jsonl_is_read_as_one_and_its_error_is_one_line(
    tmp_path: Path,
) -> None:
    path = tmp_path / "books.jsonl"
    path.write_text(json.dumps(_objects(BOOKS), indent=2), encoding="utf-8")
    assert [b.title for b in _books(path)] == [t for t, _, _, _ in BOOKS]
    text = json.dumps(_objects(BOOKS), indent=2).replace('"year": 1965', '"year": ')
    path.write_text(text, encoding="utf-8")
    rows = list(scan_catalog(path))
    bad = [r for r in rows if isinstance(r, InvalidRow)]
    assert len(bad) == 1, bad
    assert "broken JSON in the JSON array on line" in bad[0].reason
    assert [r.title for r in rows if isinstance(r, CatalogRecord)] == ["Deep Learning"]
    with CatalogSnapshot.take(path) as snapshot:
        assert f"{path}: read as a JSON array (its first character is '[')" in (
            snapshot.check().notices
        )


def test_gzip_is_known_by_its_bytes_whatever_the_name(tmp_path: Path) -> None:
    path = tmp_path / "books.jsonl"  # gzipped, but not named so
    path.write_bytes(gzipped_jsonl(BOOKS))
    assert len(_books(path)) == 4
    broken = tmp_path / "cut.jsonl.gz"
    broken.write_bytes(gzipped_jsonl(BOOKS)[:30])
    with pytest.raises(CatalogError, match="not a readable gzip file"):
        list(scan_catalog(broken))


def test_utf16_with_a_bom_is_read_and_without_one_refused_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "books.tsv"
    text = plain_tsv(BOOKS).decode("utf-8").replace("Emma", "Émma")
    path.write_bytes(text.encode("utf-16"))  # with its byte-order mark
    assert [b.title for b in _books(path)][-1] == "Émma"
    path.write_bytes(text.encode("utf-16-le"))
    with pytest.raises(CatalogError) as info:
        list(scan_catalog(path))
    assert str(info.value) == (
        f"{path}: the file looks like UTF-16 without a byte-order mark; save it as UTF-8 (or "
        "UTF-16 with a BOM)"
    )


def test_a_column_that_looks_like_a_field_is_named_with_the_option_that_maps_it(
    tmp_path: Path,
    database_url: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = tmp_path / "books.csv"
    path.write_text("Title,Writer,Pub Year\nDune,Frank Herbert,1965\n", encoding="utf-8")
    with CatalogSnapshot.take(path) as snapshot:
        notices = snapshot.check().notices
    assert notices[-1] == (
        f"{path}: not read, though they look like book fields: 'Writer' (authors?), 'Pub Year' "
        "(year?); to read one, map it: attend index --column Writer=authors (or "
        """ATTEND_CATALOG_COLUMNS='{"Writer": "authors"}'); the books keep their ids"""
    )
    (unmapped,) = snapshot_records(path)
    with CatalogSnapshot.take(path, columns={"writer": "authors", "Pub Year": "year"}) as mapped:
        (dune,) = mapped.records()
        assert (dune.authors, dune.year, dune.extra) == (["Frank Herbert"], 1965, {})
        assert dune.id == unmapped.id  # the id derived from the same names either way
        assert not any("look like" in n for n in mapped.check().notices)
    with pytest.raises(CatalogError, match="mapped to 'writers', which is none of"):
        CatalogSnapshot.take(path, columns={"Writer": "writers"})
    monkeypatch.setenv("ATTEND_DATABASE_URL", database_url)
    monkeypatch.setattr("service.engine.startup.build_encoder", lambda settings: FakeEncoder())
    monkeypatch.setattr(
        "service.commands.index_commands.index_encoder", lambda settings: FakeEncoder()
    )
    assert main(["index", str(path)]) == 0  # first as it is, then as the notice says
    capsys.readouterr()
    assert (
        main(["index", str(path), "--column", "Writer=authors", "--column", "Pub Year=year"]) == 0
    )
    out = capsys.readouterr().out
    assert f"{path}: read 'Title' as title, 'Writer' as authors, 'Pub Year' as year\n" in out
    assert "1 books: 0 added, 1 updated, 0 unchanged, 0 removed" in out
    assert main(["search", "dune", "--here", "--json", "--author", "herbert"]) == 0
    (hit,) = json.loads(capsys.readouterr().out)["results"]
    assert (hit["title"], hit["authors"], hit["year"]) == ("Dune", ["Frank Herbert"], 1965)
    assert main(["index", str(path), "--column", "Writer"]) == 2
    assert "--column 'Writer': write it HEADER=FIELD" in capsys.readouterr().err


def snapshot_records(path: Path) -> list[CatalogRecord]:
    with CatalogSnapshot.take(path) as snapshot:
        return list(snapshot.records())


@pytest.mark.parametrize(
    ("name", "export"),
    [
        ("goodreads", "a Goodreads library export"),
        ("calibre", "a Calibre export"),
        ("librarything", "a LibraryThing export"),
        ("tsv", None),
    ],
)
def test_a_known_export_is_named_by_its_header(
    tmp_path: Path, name: str, export: str | None
) -> None:
    path = write_export(tmp_path, name, BOOKS)
    with CatalogSnapshot.take(path) as snapshot:
        notices = snapshot.check().notices
    said = [n for n in notices if "header's columns say so" in n]
    assert said == (
        [] if export is None else [f"{path}: read as {export} (its header's columns say so)"]
    )
