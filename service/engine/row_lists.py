"""Each row's list of ids (its authors, series, subject headings, as numbers into a table of
them) as two arrays, for a served form (service/engine/served_form.py): the ids one row after
another, and where each row's start: a list per row without an object per row. A part's arrays
under its name in the whole's (`nested`, `part_of`). A row-aligned list moved to the next
generation's rows (`moved`), and each key's rows from each row's keys (`rows_by_key`)."""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from itertools import accumulate, pairwise
from typing import Any, TypeVar

import numpy as np

from service.engine.bm25_postings import RowMoves

T = TypeVar("T")
K = TypeVar("K", bound=Hashable)


def lists_arrays(name: str, lists: Sequence[Sequence[int]]) -> dict[str, np.ndarray]:
    """`lists` as `{name}.ids` ((Σ len,) int32) and `{name}.starts` ((R + 1,) int64)."""
    starts = np.fromiter(accumulate(map(len, lists), initial=0), np.int64, len(lists) + 1)
    ids = np.fromiter((i for one in lists for i in one), np.int32, int(starts[-1]))
    return {f"{name}.ids": ids, f"{name}.starts": starts}


def lists_of(arrays: Mapping[str, np.ndarray], name: str, bound: int) -> list[tuple[int, ...]]:
    """The lists `lists_arrays` gave, a tuple each. ValueError where they do not span their ids
    or an id is not below `bound` (the size of its table)."""
    ids, starts = arrays[f"{name}.ids"], arrays[f"{name}.starts"].tolist()
    if not starts or starts[0] != 0 or starts[-1] != len(ids):
        raise ValueError(f"{name}: lists that do not span their ids")
    if len(ids) and not 0 <= int(ids.min()) <= int(ids.max()) < bound:
        raise ValueError(f"{name}: ids out of their table")
    every = ids.tolist()
    return [tuple(every[a:b]) for a, b in pairwise(starts)]


def nested(name: str, arrays: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """`arrays` as a part of a larger whole: each under `{name}.`."""
    return {f"{name}.{key}": a for key, a in arrays.items()}


def part_of(arrays: Mapping[str, np.ndarray], name: str) -> dict[str, np.ndarray]:
    """The arrays `nested(name, …)` put in `arrays`, under their own names again."""
    prefix = f"{name}."
    return {k.removeprefix(prefix): a for k, a in arrays.items() if k.startswith(prefix)}


def moved(before: Sequence[T], moves: RowMoves, changed: Sequence[T]) -> list[T]:
    """A row-aligned list of the next generation: `before`'s entries at the rows `moves` moves
    them to, `changed`'s at `moves.changed` (in its order). O(N) moves of references."""
    out: list[Any] = [None] * moves.size
    stay = moves.new_row >= 0
    for old, new in zip(np.flatnonzero(stay).tolist(), moves.new_row[stay].tolist(), strict=True):
        out[new] = before[old]
    for new, value in zip(moves.changed.tolist(), changed, strict=True):
        out[new] = value
    return out


def rows_by_key(row_keys: Sequence[Sequence[K]]) -> dict[K, list[int]]:
    """Each key's rows, ascending, from each row's keys. Rows share their tuple of keys (one
    object per distinct tuple: service/engine/name_rows.py), so the keys are numbered once per
    distinct tuple and each row's credits expanded and grouped in numpy: a Python step per
    credit took seconds at a million books."""
    n = len(row_keys)
    # rows holding one tuple object: the same keys (equal tuples held apart number alike)
    _, first, group = np.unique(
        np.fromiter(map(id, row_keys), np.int64, n), return_index=True, return_inverse=True
    )
    number: dict[K, int] = {}  # in the order the rows first credit them
    keys: list[list[int]] = [[] for _ in first]
    for g in np.argsort(first).tolist():
        keys[g] = [number.setdefault(k, len(number)) for k in row_keys[int(first[g])]]
    sizes = np.fromiter(map(len, keys), np.int64, len(keys))  # each group's keys
    starts = np.concatenate([[0], np.cumsum(sizes)])
    flat = np.fromiter((k for ks in keys for k in ks), np.int64, int(starts[-1]))
    per_row = sizes[group]  # (N,) keys of each row
    credit_row = np.repeat(np.arange(n), per_row)  # (credits,) ascending
    within = np.arange(len(credit_row)) - np.repeat(np.cumsum(per_row) - per_row, per_row)
    credit_key = flat[np.repeat(starts[group], per_row) + within]
    order = np.argsort(credit_key, kind="stable")  # by key, each key's rows in row order
    bounds = np.searchsorted(credit_key[order], np.arange(len(number) + 1)).tolist()
    grouped = credit_row[order].tolist()
    return {key: grouped[bounds[i] : bounds[i + 1]] for key, i in number.items()}
