"""Reading an Excel workbook (.xlsx), as a shop keeps its stock list: the first sheet's rows, as
openpyxl streams them (read-only, values not formulas), each as the cells of a CSV record.

Reading the workbook, not a CSV Excel saved from it, keeps what the CSV loses: an ISBN stored as
a number is its 13 digits (`9780441172719`, not `9.78044E+12`), a date cell is a date. So a
cell becomes the text a CSV of it would hold had Excel not rounded it: an integral number its
digits, another number as Python writes it, a date its ISO form, an empty cell "". The header
row is found as a CSV's is (indexer/catalog/scan.py: below title rows, if a sheet has some).
"""

from __future__ import annotations

import datetime as dt
import zipfile
from collections.abc import Iterator
from typing import IO, Any

import openpyxl
from openpyxl.utils.exceptions import InvalidFileException

from indexer.catalog.jsonl_records import too_long
from indexer.catalog.records import CatalogError


def xlsx_rows(f: IO[bytes], limit: int, name: str) -> Iterator[tuple[int, list[str] | str]]:
    """(row number, its cells as text) for each row of the first sheet, or (row number, why it
    cannot be read: longer than `limit`). CatalogError for a file that is no workbook."""
    try:
        workbook = openpyxl.load_workbook(f, read_only=True, data_only=True)
    except (InvalidFileException, zipfile.BadZipFile, KeyError, OSError) as e:
        raise CatalogError(
            [], f"{name}: not a readable Excel workbook ({e}); save it as .xlsx or CSV UTF-8"
        ) from None
    try:
        sheet = workbook.worksheets[0]
        for number, values in enumerate(sheet.iter_rows(values_only=True), start=1):
            cells = [_text(v) for v in values]
            while cells and not cells[-1]:  # a sheet's empty columns past the table
                cells.pop()
            if sum(len(c) for c in cells) > limit:
                yield number, too_long(limit)
            else:
                yield number, cells
    finally:
        workbook.close()


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**63:
        return str(int(value))  # an ISBN, a year, a count stored as a number
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    return str(value)
