"""Issue 25: no malformed CSV record ends the file. A stray `"` on line 12 of a 181-line CSV,
a quoted field past the row limit, a bare CR: each is reported with its line and what is
wrong; without --skip-invalid nothing is written, with it reading resumes at the next record
and the rest of the file is indexed (the issue's run indexed 9 books and removed 171). On real
files, and SQLite and PostgreSQL where a database is involved."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import Engine

from conftest import index_file
from indexer.catalog import CatalogError, CatalogRecord, InvalidRow, scan_catalog

HEADER = "id,title,description"


def _catalog(n: int = 180, quoted_every: int = 0) -> list[str]:
    """The header and `n` good rows (every `quoted_every`th with a quoted description)."""
    lines = [HEADER]
    for i in range(1, n + 1):
        description = f'"Book {i}, quoted"' if quoted_every and i % quoted_every == 0 else "plain"
        lines.append(f"b{i},Title {i},{description}")
    return lines


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _split(path: Path, **kwargs: int) -> tuple[list[str], list[InvalidRow]]:
    rows = list(scan_catalog(path, **kwargs))
    return (
        [r.id for r in rows if isinstance(r, CatalogRecord)],
        [r for r in rows if isinstance(r, InvalidRow)],
    )


@pytest.mark.parametrize(
    ("quoted_every", "why"),
    [
        pytest.param(0, "no closing quote before the end of the file", id="no-other-quote"),
        pytest.param(
            20,
            "the record breaks on line 21 (',' expected after '\"')",
            id="a-later-quoted-field",
        ),
    ],
)
def test_a_stray_quote_costs_its_row_not_the_rest_of_the_file(
    tmp_path: Path, quoted_every: int, why: str
) -> None:
    lines = _catalog(quoted_every=quoted_every)
    lines[11] = 'b11,"Title 11 with a stray quote,plain'  # line 12 of 181
    ids, bad = _split(_write(tmp_path / "books.csv", lines))
    assert [(r.line, r.reason) for r in bad] == [
        (12, f"unterminated quoted field starting on line 12: {why}; read on from line 13")
    ]
    assert ids == [f"b{i}" for i in range(1, 181) if i != 11]


def test_a_quoted_field_past_the_row_limit_is_skipped_to_its_end(tmp_path: Path) -> None:
    many = "\n".join(["y" * 1000] * 100)  # 100 kB over 100 lines, in one quoted field
    lines = [*_catalog(2), f'h,Huge,"{many}"', 'z,Z,"after, quoted"', "w,W,plain"]
    ids, bad = _split(_write(tmp_path / "books.csv", lines), max_row_bytes=64 * 1024)
    assert [(r.line, r.reason) for r in bad] == [
        (4, "row longer than 65,536 bytes (ATTEND_MAX_ROW_BYTES): lines 4–103 skipped")
    ]
    assert ids == ["b1", "b2", "z", "w"]


def test_an_unterminated_quote_past_the_row_limit_resumes_on_the_next_line(
    tmp_path: Path,
) -> None:
    lines = [*_catalog(2), 'h,Huge,"' + "y" * 100_000, *(f"c{i},C,plain" for i in range(3))]
    ids, bad = _split(_write(tmp_path / "books.csv", lines), max_row_bytes=64 * 1024)
    assert [(r.line, r.reason) for r in bad] == [
        (
            4,
            "unterminated quoted field starting on line 4: no closing quote before the end of "
            "the file; read on from line 5",
        )
    ]
    assert ids == ["b1", "b2", "c0", "c1", "c2"]


def test_a_quoted_field_past_the_csv_modules_own_limit_is_read(tmp_path: Path) -> None:
    """csv.field_size_limit() is 131,072 characters by default; a row's limit is the bound."""
    long = "x" * 500_000
    ids, bad = _split(_write(tmp_path / "books.csv", [HEADER, f'a,A,"{long}"', "b,B,plain"]))
    assert (ids, bad) == (["a", "b"], [])


def test_a_bare_carriage_return_costs_its_row_only(tmp_path: Path) -> None:
    path = tmp_path / "books.csv"
    path.write_text("id,title\na,A\nb,B\rx\nc,C\n", encoding="utf-8")
    ids, bad = _split(path)
    assert [r.line for r in bad] == [3] and "malformed CSV" in bad[0].reason
    assert ids == ["a", "c"]


def test_a_quote_inside_a_field_on_one_line_is_read_as_before(tmp_path: Path) -> None:
    path = _write(tmp_path / "books.csv", ["id,title", 'a,"The Hobbit" (illustrated)', "b,B"])
    rows = list(scan_catalog(path))
    assert [(r.id, r.title) for r in rows if isinstance(r, CatalogRecord)] == [
        ("a", "The Hobbit (illustrated)"),
        ("b", "B"),
    ]


def test_the_issues_catalog_stops_the_run_or_indexes_all_but_the_broken_row(
    engine: Engine, tmp_path: Path
) -> None:
    good = _write(tmp_path / "books.csv", _catalog())
    assert index_file(engine, good, skip_invalid=False).books == 180
    lines = _catalog()
    lines[11] = 'b11,"Title 11 with a stray quote,plain'
    broken = _write(tmp_path / "books.csv", lines)
    with pytest.raises(CatalogError, match=r"books\.csv:12: unterminated quoted field"):
        index_file(engine, broken, skip_invalid=False)
    report = index_file(engine, broken, skip_invalid=True)
    assert [r.line for r in report.rejected] == [12]
    assert (report.books, report.unchanged, report.removed) == (179, 179, 1)
    assert report.generation == 2
