"""Issue 47: a shop's workbook (.xlsx) read as it is kept, with openpyxl: the first sheet, its
header found below the title rows above it, ISBNs stored as numbers read as their 13 digits
(where a CSV saved by Excel holds 9.78044E+12), years and dates as years; the same title rows
above a CSV's header; then indexed on both databases and through the admin API."""

from __future__ import annotations

import datetime as dt
import io
import zipfile
from pathlib import Path

import openpyxl
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from conftest import FakeEncoder, finished_job, index_file
from indexer.catalog import CatalogError, CatalogRecord, CatalogSnapshot, InvalidRow
from indexer.catalog.xlsx_records import _text
from indexer.schema import Book
from service.api.main import create_app
from service.config.settings import ServiceSettings


def workbook(rows: list[list[object]]) -> bytes:
    book = openpyxl.Workbook()
    sheet = book.active
    assert sheet is not None
    for row in rows:
        sheet.append(row)
    sheet["J1"] = ""  # a formatted cell far right of the table: the sheet is that wide
    book.create_sheet("Notes").append(["not", "read"])
    out = io.BytesIO()
    book.save(out)
    return out.getvalue()


STOCK = [
    ["Winter stock list"],
    ["printed", dt.date(2026, 12, 1)],
    [],
    ["Title", "Author", "ISBN", "Year", "Published", "Price", "Description"],
    ["Dune", "Frank Herbert", 9780441172719, 1965, None, 9.99, "A desert planet and its spice."],
    ["Emma", "Jane Austen", 9780141439587, None, dt.datetime(1815, 12, 23), 7.5, None],
    ["Mort", "Terry Pratchett", "0552131067", 1987.0, None, None, "Death takes an apprentice."],
]


def _read(path: Path) -> tuple[list[CatalogRecord], list[InvalidRow], list[str]]:
    with CatalogSnapshot.take(path) as snapshot:
        rows = list(snapshot.scan())
        notices = snapshot.check().notices
    return (
        [r for r in rows if isinstance(r, CatalogRecord)],
        [r for r in rows if isinstance(r, InvalidRow)],
        notices,
    )


def test_a_workbook_is_read_below_its_title_rows(tmp_path: Path) -> None:
    path = tmp_path / "stock.xlsx"
    path.write_bytes(workbook(STOCK))
    books, bad, notices = _read(path)
    assert bad == []
    assert [(b.id, b.title, b.authors, b.year, b.line) for b in books] == [
        ("9780441172719", "Dune", ["Frank Herbert"], 1965, 5),
        ("9780141439587", "Emma", ["Jane Austen"], 1815, 6),  # the date's year
        ("0552131067", "Mort", ["Terry Pratchett"], 1987, 7),
    ]
    assert books[0].extra == {"Price": "9.99"}
    assert books[0].description == "A desert planet and its spice."
    assert (
        f"{path}: the header is the first row with a title column: line(s) 1-2 above it (a "
        "spreadsheet's title rows) were not read"
    ) in notices
    assert not any("have no name" in n for n in notices)  # the sheet's width past the table


def test_a_workbook_named_csv_is_known_by_its_bytes(tmp_path: Path) -> None:
    path = tmp_path / "stock.csv"
    path.write_bytes(workbook(STOCK))
    books, _, notices = _read(path)
    assert [b.title for b in books] == ["Dune", "Emma", "Mort"]
    assert notices[0] == (
        f"{path}: read as an Excel workbook (its bytes are a zip, as a workbook's)"
    )


def test_a_csv_saved_by_excel_with_title_rows_is_read_below_them(tmp_path: Path) -> None:
    path = tmp_path / "stock.csv"
    path.write_text(
        "Winter stock list,,\nprinted 2026-12-01,,\n,,\ntitle,author,isbn\nDune,Frank Herbert,"
        "9780441172719\n",
        encoding="utf-8",
    )
    books, bad, notices = _read(path)
    assert ([b.id for b in books], bad) == (["9780441172719"], [])
    assert any("line(s) 1-2 above it" in n for n in notices)


def test_a_header_with_no_title_column_is_still_named_at_its_line(tmp_path: Path) -> None:
    """Eleven rows and no title column: the first row is the header, and its problem named."""
    path = tmp_path / "names.csv"
    path.write_text("name,author\n" + "Dune,Frank Herbert\n" * 11, encoding="utf-8")
    with pytest.raises(CatalogError, match=r"names.csv:1: CSV header has no 'title' column"):
        _read(path)


@pytest.mark.parametrize(("above", "found"), [(10, True), (11, False)])
def test_the_header_is_looked_for_ten_rows_down(tmp_path: Path, above: int, found: bool) -> None:
    path = tmp_path / "books.csv"
    path.write_text("a title row,\n" * above + "title,author\nDune,Frank Herbert\n")
    if found:
        assert [b.title for b in _read(path)[0]] == ["Dune"]
    else:
        with pytest.raises(CatalogError, match=r"books.csv:1: CSV header has no 'title' column"):
            _read(path)


def test_a_zip_that_is_no_workbook_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "stock.xlsx"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("hello.txt", "hello")
    with pytest.raises(CatalogError, match=r"stock.xlsx: not a readable Excel workbook"):
        _read(path)


def test_a_workbook_is_indexed_and_uploaded(engine: Engine, tmp_path: Path) -> None:
    path = tmp_path / "stock.xlsx"
    path.write_bytes(workbook(STOCK))
    assert index_file(engine, path).added == 3
    with Session(engine) as session:
        years = {b.id: b.year for b in session.scalars(select(Book))}
    assert years == {"9780441172719": 1965, "9780141439587": 1815, "0552131067": 1987}
    url = engine.url.render_as_string(hide_password=False)
    token = "xlsx-admin-token-0123456"
    settings = ServiceSettings(
        database_url=url, device="cpu", admin_token=token, generation_poll_s=0
    )
    auth = {"Authorization": f"Bearer {token}"}
    more = workbook([*STOCK, ["Sourcery", "Terry Pratchett", 9780552131070, 1988]])
    with TestClient(create_app(settings, encoder=FakeEncoder())) as client:
        r = client.post("/admin/reindex", files={"catalog": ("stock.xlsx", more)}, headers=auth)
        assert r.status_code == 202, r.text
        job = finished_job(client, r.json()["id"], auth)
        assert job["state"] == "succeeded", job
        assert client.get("/books/9780552131070").json()["title"] == "Sourcery"


def test_a_number_cell_is_the_text_excel_would_show_unrounded() -> None:
    """Excel writes a 13-digit number into the sheet's XML as 9.780441172719E12: read back a
    float, it is still the ISBN's digits."""
    assert _text(9.780441172719e12) == "9780441172719"
    assert (_text(1987.0), _text(9.99), _text(None), _text(True)) == ("1987", "9.99", "", "TRUE")
    assert _text(dt.date(1815, 12, 23)) == "1815-12-23"
