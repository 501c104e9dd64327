"""A book a reader names by its number: an ISBN typed in the search box (ISBN-10 or ISBN-13,
with or without hyphens or spaces, an `ISBN` before it) is that book, and so is its id.

Each row keeps up to PER_ROW ISBNs as ISBN-13 numbers: its id where the id is one (a catalog
without an id column takes its ISBN), then those of its metadata (indexer/store.py
`ISBN_FIELDS`: `isbn`, `isbn13`, `isbns`, StoryGraph's `ISBN/UID`, in any case). A lookup
converts what was typed to ISBN-13 (an ISBN-10's check digit checked and recomputed), so
`0-441-17271-7` finds the book a catalog lists as 9780441172719. The (N, PER_ROW) numbers move
with the rows on a swap as the other per-row columns do, and sort once for lookups, on the
first.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from models.text import normalize_id
from service.engine.bm25_postings import RowMoves

PER_ROW = 2  # a book's ISBNs kept: its hardback's and paperback's, an ISBN-10 and its ISBN-13
_NOISE = re.compile(r"[\s\-]")
_PREFIX = re.compile(r"^isbn(?:-1[03])?:?", re.IGNORECASE)
_ID_LIKE = re.compile(r"^(?=\S*\d)\S{5,}$")  # no space, a digit, 5 characters or more


def isbn13(text: str) -> int | None:
    """`text` as an ISBN-13 number where it is a valid ISBN-10 or ISBN-13 (check digit and
    all), else None: "0-441-17271-7" and "978-0-441-17271-9" are 9780441172719."""
    digits = _NOISE.sub("", _PREFIX.sub("", text.strip())).upper()
    if len(digits) == 10 and digits[:9].isdigit() and (digits[9].isdigit() or digits[9] == "X"):
        values = [int(c) for c in digits[:9]] + [10 if digits[9] == "X" else int(digits[9])]
        if sum((10 - i) * v for i, v in enumerate(values)) % 11:
            return None
        digits = "978" + digits[:9]
        return int(digits + str(_check13(digits)))
    if len(digits) == 13 and digits.isdigit() and digits[:3] in ("978", "979"):
        return int(digits) if _check13(digits[:12]) == int(digits[12]) else None
    return None


def _check13(twelve: str) -> int:
    return (10 - sum(int(c) * (3 if i % 2 else 1) for i, c in enumerate(twelve)) % 10) % 10


class IsbnRows:
    """Each row's ISBN-13 numbers, (N, PER_ROW) int64, 0 for none."""

    def __init__(self, values: np.ndarray):
        self.values = values
        self._sorted: tuple[np.ndarray, np.ndarray] | None = None
        self._lock = threading.Lock()

    @classmethod
    def of(cls, ids: Sequence[str], isbns: Sequence[Sequence[str]] | None) -> IsbnRows:
        """The numbers of books given by id and metadata ISBN texts (None: none has any)."""
        values = np.zeros((len(ids), PER_ROW), np.int64)
        for row, book_id in enumerate(ids):
            texts = [book_id, *(isbns[row] if isbns else ())]
            numbers = list(dict.fromkeys(n for t in texts if (n := isbn13(t)) is not None))
            values[row, : min(PER_ROW, len(numbers))] = numbers[:PER_ROW]
        return cls(values)

    def following(self, moves: RowMoves, changed: IsbnRows) -> IsbnRows:
        """The next generation's: these rows moved by `moves`, the changed rows' `changed`."""
        values = self.values[moves.sources.clip(0)]
        values[moves.changed] = changed.values
        return IsbnRows(values)

    def arrays(self) -> dict[str, np.ndarray]:
        return {"isbns": self.values}

    @classmethod
    def from_arrays(cls, arrays: Mapping[str, np.ndarray], n: int) -> IsbnRows:
        values = np.asarray(arrays["isbns"], np.int64)
        if values.shape != (n, PER_ROW):
            raise ValueError(f"ISBNs of shape {values.shape} for {n} books")
        return cls(values)

    def row(self, text: str) -> int | None:
        """The row of the book whose ISBN `text` is (the first, where books share one)."""
        number = isbn13(text)
        if number is None:
            return None
        numbers, rows = self._index()
        at = int(np.searchsorted(numbers, number))
        return int(rows[at]) if at < len(numbers) and numbers[at] == number else None

    def _index(self) -> tuple[np.ndarray, np.ndarray]:
        """The numbers sorted (stable: the first row first) and their rows, made once."""
        with self._lock:
            if self._sorted is None:
                flat = self.values.ravel()
                order = np.argsort(flat, kind="stable")
                order = order[flat[order] != 0]
                self._sorted = (flat[order], order // PER_ROW)
            return self._sorted


def looked_up(
    isbns: IsbnRows, row_of_id: Callable[[str], int | None], query: str
) -> tuple[int, str] | None:
    """The row a query names by ISBN or by id, and which ("isbn" or "id"); None for a query
    that names no book so. An id is looked up only when the query could be no words: one
    token of five characters or more with a digit in it ("OL10000135M", "ocm00012345")."""
    if (row := isbns.row(query)) is not None:
        return row, "isbn"
    text = query.strip()
    if _ID_LIKE.match(text) and (found := row_of_id(normalize_id(text))) is not None:
        return found, "id"
    return None
