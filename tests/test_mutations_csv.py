"""A CSV record past the row limit whose quotes all close is skipped to its own line end (issue 31,
item 6: with indexer/catalog/csv_records.py counting any quote as an open one, `quotes > 0` for
`quotes % 2 == 1`, such a record was read as an unterminated quoted field that swallowed the rest
of the file, and every catalog test still passed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from indexer.catalog import CatalogRecord, InvalidRow, scan_catalog


@pytest.mark.parametrize(
    "long_row",
    [
        pytest.param('h,"Huge",' + "y" * 100_000, id="one-closed-quoted-field"),
        pytest.param('h,"Huge","Big",' + "y" * 100_000, id="two-closed-quoted-fields"),
    ],
)
def test_a_long_row_with_closed_quotes_costs_its_line_only(tmp_path: Path, long_row: str) -> None:
    path = tmp_path / "books.csv"
    lines = ["id,title,description", "a,A,plain", long_row, "b,B,plain", "c,C,plain"]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    rows = list(scan_catalog(path, max_row_bytes=64 * 1024))
    bad = [(r.line, r.reason) for r in rows if isinstance(r, InvalidRow)]
    assert bad == [(3, "row longer than 65,536 bytes (ATTEND_MAX_ROW_BYTES)")]
    assert [r.id for r in rows if isinstance(r, CatalogRecord)] == ["a", "b", "c"]


def test_doubled_quotes_inside_a_long_quoted_field_do_not_end_it(tmp_path: Path) -> None:
    """Past the limit the rest is skipped in chunks, a quote count's parity deciding whether a
    line ends the record: a line with `""` (an escaped quote, even) leaves the field open (with
    `count > 0` in `_skip_rest` its next lines were read as rows)."""
    field = "\n".join(["y" * 1000] * 80 + ['he said ""hi"" twice'] + ["y" * 1000] * 19)
    lines = ["id,title,description", "a,A,plain", f'h,Huge,"{field}"', "b,B,plain"]
    path = tmp_path / "books.csv"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    rows = list(scan_catalog(path, max_row_bytes=64 * 1024))
    bad = [(r.line, r.reason) for r in rows if isinstance(r, InvalidRow)]
    assert bad == [(3, "row longer than 65,536 bytes (ATTEND_MAX_ROW_BYTES): lines 3–102 skipped")]
    assert [r.id for r in rows if isinstance(r, CatalogRecord)] == ["a", "b"]
