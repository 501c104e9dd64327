"""The subject headings (genres, tags) a catalog files its books under, as evidence that two
books are alike: the subjects head of similar books and recommendations
(service/engine/book_attention.py) attends over the books sharing a book's headings, by how
many and how specific the shared ones are."""

from __future__ import annotations

import math
from collections.abc import Sequence

MIN_SHARED = 0.5  # `mates`: how much two books share of headings, at the least


class SubjectHeadings:
    """Each row's distinctive headings (folded), and each heading's rows."""

    def __init__(self, headings: Sequence[tuple[str, ...]]):
        """`headings`: each row's, folded (service/engine/name_rows.py). A heading held by
        more than a quarter of the catalog (at least 10 books), "fiction" on a shelf of
        novels, is dropped: sharing it makes no two books alike."""
        n = len(headings)
        rows: dict[str, list[int]] = {}
        for row, keys in enumerate(headings):
            for key in keys:
                rows.setdefault(key, []).append(row)
        common = {k for k, rs in rows.items() if len(rs) > max(10, n // 4)}
        self._row = [
            tuple(k for k in keys if k not in common) if common else keys for keys in headings
        ]
        self._rows = {k: rs for k, rs in rows.items() if k not in common}

    def mates(self, row: int) -> dict[int, float]:
        """The other books that share one of the book's subject headings (folded; a heading
        that more than a quarter of the catalog has says nothing of a book: left out), each
        with how much they share: Σ over the shared headings of log(N / books under it) /
        log N, so two headings count more than one and a rare heading more than a broad one.
        A mate shares at least MIN_SHARED: one heading of at most √N books, or two broader ones
        ("fiction" alone, 35 of the demo's 180 books, counts 0.32: no evidence of likeness)."""
        n = max(2, len(self._row))
        shared: dict[int, float] = {}
        for key in self._row[row]:
            rows = self._rows[key]
            idf = math.log(n / len(rows)) / math.log(n)
            for r in rows:
                shared[r] = shared.get(r, 0.0) + idf
        shared.pop(row, None)
        return {r: v for r, v in sorted(shared.items()) if v >= MIN_SHARED}
