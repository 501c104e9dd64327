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
