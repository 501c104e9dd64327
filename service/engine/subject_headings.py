"""The subject headings (genres, tags) a catalog files its books under, as evidence that two
books are alike: the subjects head of similar books and recommendations
(service/engine/book_attention.py) attends over the books sharing a book's headings, by how
many and how specific the shared ones are."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from indexer.text_column import text_arrays, text_of_arrays
from service.engine.row_lists import lists_arrays, lists_of

MIN_SHARED = 0.5  # `mates`: how much two books share of headings, at the least


class SubjectHeadings:
    """Each row's distinctive headings (folded), and each heading's rows."""

    def __init__(
        self, subjects: Sequence[Sequence[str]] | None, n: int, fold: Callable[[str], list[str]]
    ):
        self._row, self._rows = _index(subjects, n, fold)

    def arrays(self) -> dict[str, np.ndarray]:
        """The headings kept and each row's, as arrays (service/engine/served_form.py)."""
        keys = list(self._rows)
        number = {key: i for i, key in enumerate(keys)}
        rows = [[number[k] for k in row] for row in self._row]
        return {**text_arrays("headings", keys), **lists_arrays("row", rows)}

    @classmethod
    def from_arrays(cls, arrays: Mapping[str, np.ndarray]) -> SubjectHeadings:
        """The headings `arrays()` gave."""
        keys = list(text_of_arrays(arrays, "headings"))
        headings = cls.__new__(cls)
        headings._row = [tuple(keys[i] for i in ids) for ids in lists_of(arrays, "row", len(keys))]
        headings._rows = {key: [] for key in keys}
        for row, held in enumerate(headings._row):
            for key in held:
                headings._rows[key].append(row)
        return headings

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


def _index(
    subjects: Sequence[Sequence[str]] | None, n: int, fold: Callable[[str], list[str]]
) -> tuple[list[tuple[str, ...]], dict[str, list[int]]]:
    """Each row's distinctive headings (folded), and each heading's rows. A heading held by
    more than a quarter of the catalog (at least 10 books), "fiction" on a shelf of novels, is
    dropped: sharing it makes no two books alike."""
    rows: dict[str, list[int]] = {}
    folded = []
    for row, heads in enumerate(subjects or [()] * n):
        keys = tuple(dict.fromkeys(k for h in heads if (k := " ".join(fold(h)))))
        folded.append(keys)
        for key in keys:
            rows.setdefault(key, []).append(row)
    common = {k for k, rs in rows.items() if len(rs) > max(10, n // 4)}
    kept = [tuple(k for k in keys if k not in common) for keys in folded]
    return kept, {k: rs for k, rs in rows.items() if k not in common}
