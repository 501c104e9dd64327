"""A column of strings held as one UTF-8 buffer and its offsets, and a lookup of a row by value.

A list of a million str objects costs ~50 bytes of object header a string past its text, and
a dict from a million ids to their rows ~60 bytes an entry more (its slots, a Python int per
row). The served index keeps its books' ids and titles as `TextColumn`s (the text, plus 8 bytes
a row) and finds an id's row by `RowLookup` (12 bytes a row): a string is decoded when a
response asks for it, a few per result.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator, Mapping, Sequence
from itertools import pairwise
from typing import overload

import numpy as np

TAKE_CHUNK = 1 << 16  # rows `take` gathers at a time


class TextColumn(Sequence[str]):
    """An immutable sequence of strings: row i is `blob[starts[i]:starts[i + 1]]`, decoded."""

    __slots__ = ("_blob", "_starts")

    def __init__(self, blob: bytes, starts: array[int]) -> None:
        """`starts`: (n + 1) offsets into `blob`, the first 0 and the last len(blob)."""
        self._blob = blob
        self._starts = starts

    @classmethod
    def of(cls, strings: Iterable[str]) -> TextColumn:
        if isinstance(strings, TextColumn):
            return strings
        encoded = [s.encode() for s in strings]
        starts = array("q", [0])
        total = 0
        for e in encoded:
            total += len(e)
            starts.append(total)
        return cls(b"".join(encoded), starts)

    def __len__(self) -> int:
        return len(self._starts) - 1

    @overload
    def __getitem__(self, i: int) -> str: ...

    @overload
    def __getitem__(self, i: slice) -> TextColumn: ...

    def __getitem__(self, i: int | slice) -> str | TextColumn:
        if isinstance(i, slice):
            start, stop, step = i.indices(len(self))
            if step != 1:
                return TextColumn.of([self[j] for j in range(start, stop, step)])
            stop = max(start, stop)
            a, b = self._starts[start], self._starts[stop]
            rebased = array("q", (s - a for s in self._starts[start : stop + 1]))
            return TextColumn(self._blob[a:b], rebased)
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"row {i} of a column of {n}")
        return self._blob[self._starts[i] : self._starts[i + 1]].decode()

    def __iter__(self) -> Iterator[str]:
        blob, starts = self._blob, self._starts
        for a, b in pairwise(starts):
            yield blob[a:b].decode()

    def take(self, rows: Sequence[int] | np.ndarray) -> TextColumn:
        """The rows `rows`, in that order: their bytes gathered (numpy), nothing decoded."""
        rows = np.asarray(rows, np.int64)
        starts = np.frombuffer(self._starts, np.int64)
        sizes = starts[rows + 1] - starts[rows]
        offsets = np.zeros(len(rows) + 1, np.int64)
        np.cumsum(sizes, out=offsets[1:])
        text = np.frombuffer(self._blob, np.uint8)
        blob = np.empty(int(offsets[-1]), np.uint8)
        # each byte's source, TAKE_CHUNK rows at a time: 8 bytes a byte of text taken
        for a in range(0, len(rows), TAKE_CHUNK):
            b = min(a + TAKE_CHUNK, len(rows))
            lo, hi = offsets[a], offsets[b]
            shift = np.repeat(starts[rows[a:b]] - offsets[a:b], sizes[a:b])
            blob[lo:hi] = text[np.arange(lo, hi) + shift]
        out = array("q")
        out.frombytes(offsets.tobytes())
        return TextColumn(blob.tobytes(), out)

    def __add__(self, other: Sequence[str]) -> TextColumn:
        """These rows, then `other`'s."""
        other = TextColumn.of(other)
        shift = len(self._blob)
        starts = array("q", self._starts)
        starts.extend(s + shift for s in other._starts[1:])
        return TextColumn(self._blob + other._blob, starts)

    def __radd__(self, other: Sequence[str]) -> TextColumn:
        """`other`'s rows, then these."""
        return TextColumn.of(other) + self

    def __eq__(self, other: object) -> bool:
        if isinstance(other, TextColumn):
            return self._blob == other._blob and self._starts == other._starts
        if isinstance(other, Sequence) and not isinstance(other, str):
            return len(other) == len(self) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # equal to lists, so unhashable as they are

    def __repr__(self) -> str:
        return f"TextColumn({len(self)} rows, {len(self._blob)} bytes)"

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """The column as two arrays, (bytes,) uint8 text and (n + 1,) int64 offsets, for a
        file (service/engine/served_form.py); `from_arrays` reads them back."""
        return np.frombuffer(self._blob, np.uint8), np.frombuffer(self._starts, np.int64)

    @classmethod
    def from_arrays(cls, blob: np.ndarray, starts: np.ndarray) -> TextColumn:
        """The column of `arrays()`, copied out of them (they may be a file's memory map)."""
        offsets = array("q")
        offsets.frombytes(np.ascontiguousarray(starts, np.int64).tobytes())
        if len(offsets) < 1 or offsets[0] != 0 or offsets[-1] != len(blob):
            raise ValueError("a text column's offsets do not span its text")
        return cls(np.ascontiguousarray(blob, np.uint8).tobytes(), offsets)

    @property
    def nbytes(self) -> int:
        """The column's own bytes: its text and offsets."""
        return len(self._blob) + self._starts.itemsize * len(self._starts)


def text_arrays(name: str, column: Sequence[str]) -> dict[str, np.ndarray]:
    """`column` as `{name}.text` and `{name}.starts` (`TextColumn.arrays`)."""
    blob, starts = TextColumn.of(column).arrays()
    return {f"{name}.text": blob, f"{name}.starts": starts}


def text_of_arrays(arrays: Mapping[str, np.ndarray], name: str) -> TextColumn:
    """The column `text_arrays(name, …)` put in `arrays`."""
    return TextColumn.from_arrays(arrays[f"{name}.text"], arrays[f"{name}.starts"])


class RowLookup:
    """The row of a value among `values`, by a sorted array of the values' hashes: 12 bytes a
    row, where a dict took ~60. Equal hashes (collisions) are told apart by the values
    themselves. Where a value repeats, the first row of it is found (the served index's ids are
    unique)."""

    _order: np.ndarray  # (N,) int32 rows by hash
    _hashes: np.ndarray  # (N,) int64 sorted

    def __init__(
        self, values: Sequence[str], *, follows: tuple[RowLookup, np.ndarray] | None = None
    ) -> None:
        """`follows`: the lookup of the generation before, and where each value's row was
        there ((N,) int64, −1 for a new value): its hashes moved, only the new values hashed
        (Python's str hash, salted per process: a lookup lives in its process)."""
        if follows is None:
            hashes = np.fromiter((hash(v) for v in values), dtype=np.int64, count=len(values))
        else:
            before, sources = follows
            by_row = np.empty(len(before._hashes), np.int64)  # the previous rows' hashes
            by_row[before._order] = before._hashes
            hashes = by_row[sources.clip(0)]
            new = np.flatnonzero(sources < 0)
            hashes[new] = np.fromiter((hash(values[r]) for r in new.tolist()), np.int64, len(new))
        self._order = np.argsort(hashes, kind="stable").astype(np.int32)  # (N,) rows by hash
        self._hashes = hashes[self._order]  # (N,) sorted
        self._values = values

    def get(self, value: str) -> int | None:
        h = hash(value)
        at = int(np.searchsorted(self._hashes, h))
        hashes, order, n = self._hashes, self._order, len(self._hashes)
        while at < n and hashes[at] == h:
            row = int(order[at])
            if self._values[row] == value:
                return row
            at += 1
        return None
