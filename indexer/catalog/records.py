"""What reading a catalog yields: a book (`CatalogRecord`), a row that is not one
(`InvalidRow`), and the errors that stop a run (`CatalogError`, `CatalogHeaderError`,
`CatalogTooLargeError`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class CatalogRecord:
    id: str
    title: str
    description: str | None = None
    authors: list[str] = field(default_factory=list)
    year: int | None = None
    language: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    line: int = 0


@dataclass(frozen=True)
class InvalidRow:
    path: str
    line: int
    reason: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.reason}"


class CatalogError(ValueError):
    """The catalog cannot be indexed as it is; `rows` says where and why."""

    def __init__(self, rows: list[InvalidRow], message: str | None = None):
        self.rows = rows
        if message is None:
            shown = "\n  ".join(str(r) for r in rows[:20])
            more = f"\n  … and {len(rows) - 20} more" if len(rows) > 20 else ""
            message = f"{len(rows)} invalid row(s):\n  {shown}{more}"
        super().__init__(message)


class CatalogTooLargeError(CatalogError):
    """A catalog whose bytes, decoded (a gzip upload inflated), pass the limit its reader set."""

    def __init__(self, name: str, limit: int):
        super().__init__([], f"{name}: larger than the limit of {limit:,} bytes once decompressed")


class CatalogHeaderError(CatalogError):
    """The CSV header cannot be read as a catalog's: no row can be, so skipping invalid rows
    cannot help. The message names the problem and what to change."""

    def __init__(self, row: InvalidRow):
        super().__init__([row], str(row))
