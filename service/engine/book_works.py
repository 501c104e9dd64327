"""What a book is beyond its row: its principal authors, and its work (the editions of one book).

**Principal authors.** A catalog credits every contributor: a foreword writer (*Nineteen
Eighty-Four* with Thomas Pynchon's foreword), a translator, the eighteen writers of an
anthology. As evidence that two books are alike only the principal authors count: the first
credited name, and any other name credited on most of the first one's books (Margaret Weis and
Tracy Hickman, who write together). So Pynchon's novels are not *Nineteen Eighty-Four*'s author
mates, nor is it theirs.

**Works.** Editions of one book (a paperback and a hardcover, a reissue) are one work: the same
title (folded, its closing parenthetical, "(Discworld #4)" or "(Penguin Classics)", dropped)
or the same description, by the same first principal author (each book's keys:
service/engine/name_rows.py `work_keys`). The catalog alone says it, at load; a ranking gives a
work one slot, its best edition, and lists the others under it.
"""

from __future__ import annotations

from array import array
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

AuthorKey = tuple[str, ...]  # a name's folded words (service/engine/name_rows.py fold)


def principal_authors(
    row_authors: Sequence[Sequence[AuthorKey]], author_rows: Mapping[AuthorKey, Sequence[int]]
) -> list[tuple[AuthorKey, ...]]:
    """Each row's principal authors, from every row's credited names in order (distinct within
    a row) and each name's rows: the first name, and each other name credited on more than
    half of the first name's rows."""
    # The rows crediting both a first name and another, counted once over the distinct credits:
    # intersecting the first name's rows for each of its books read a prolific author's rows
    # again per book, O(N² / authors): on the growth benchmark's synthetic catalogs (5,117
    # authors) 0.30 → 0.02 s at 100,000 books, 37.1 → 0.16 s at 1,000,000, the same answers.
    credits = Counter(tuple(keys) for keys in row_authors if len(keys) >= 2)
    firsts = {credit[0] for credit in credits}
    both: Counter[tuple[AuthorKey, AuthorKey]] = Counter()
    for credit, n in credits.items():
        for a in firsts.intersection(credit):
            for b in credit:
                if b != a:
                    both[a, b] += n
    of: dict[tuple[AuthorKey, ...], tuple[AuthorKey, ...]] = {}  # credit → its principal
    one: dict[tuple[AuthorKey, ...], tuple[AuthorKey, ...]] = {}  # one tuple per distinct one
    for credit in credits:
        first = len(author_rows[credit[0]])
        principal = (credit[0], *(k for k in credit[1:] if 2 * both[credit[0], k] > first))
        of[credit] = one.setdefault(principal, principal)
    # a row's one name is its principal author: its own tuple
    return [of[tuple(keys)] if len(keys) >= 2 else tuple(keys) for keys in row_authors]


class Works:
    """Each row's work: rows with one work id are editions of one book."""

    @classmethod
    def of_keys(cls, keys: np.ndarray) -> Works:
        """The works of rows whose work keys are `keys` ((N, K) int64, 0 for none: the
        digests of service/engine/name_rows.py `work_keys`): two rows sharing a key are one
        work, and so is any chain of them. A work's id is its first row."""
        n = len(keys)
        label = np.arange(n)  # each row's least row known to be of its work
        groups = []  # per key column: its rows by key, and where each key's rows start
        for column in keys.T:
            rows = np.flatnonzero(column)
            rows = rows[np.argsort(column[rows], kind="stable")]
            starts = np.flatnonzero(np.r_[True, column[rows][1:] != column[rows][:-1]])
            groups.append((rows, starts, np.diff(np.r_[starts, len(rows)])))
        # the least label of each key's rows given to all of them, and each label followed to
        # its own (pointer jumping), until nothing moves: a chain of k keys takes O(log k)
        # rounds of O(N) numpy
        while True:
            before = label.copy()
            for rows, starts, sizes in groups:
                if len(rows):
                    label[rows] = np.repeat(np.minimum.reduceat(label[rows], starts), sizes)
            label = label[label]
            if np.array_equal(label, before):
                break
        return cls.from_work(label.astype(np.int32))

    @classmethod
    def from_work(cls, work: np.ndarray) -> Works:
        """The works of rows whose work ids are `work` ((N,) int32, the `work` of works built
        from the catalog: a row's work id is one of its rows)."""
        if len(work) and not 0 <= int(work.min()) <= int(work.max()) < len(work):
            raise ValueError("work ids that are not rows")
        works = cls.__new__(cls)
        works._group(array("i", np.ascontiguousarray(work, np.int32).tobytes()))
        return works

    def _group(self, work: array[int]) -> None:
        self.work = work
        # the works of two or more editions only: most books are their work's one edition
        # (a list each of those was 170 bytes a book)
        many = {w for w, count in Counter(self.work).items() if count > 1}
        self._editions: dict[int, list[int]] = {}
        for row, w in enumerate(self.work):
            if w in many:
                self._editions.setdefault(w, []).append(row)

    def editions(self, row: int) -> list[int]:
        """The other editions of the row's work, in catalog order."""
        return [r for r in self._editions.get(self.work[row], ()) if r != row]

    def one_slot(self, rows: Iterable[int]) -> list[tuple[int, list[int]]]:
        """Ranked rows (best first) → one entry a work: its best-ranked row and the work's
        other rows among `rows`, in their order."""
        slots: dict[int, tuple[int, list[int]]] = {}
        for row in rows:
            work = self.work[row]
            if work in slots:
                slots[work][1].append(row)
            else:
                slots[work] = (row, [])
        return list(slots.values())


def own_authors_of(principal: Sequence[Sequence[AuthorKey]], rows: Iterable[int]) -> set[AuthorKey]:
    """The principal authors of the books `rows`."""
    return {key for r in rows for key in principal[r]}


def pick_slots(
    works: Works,
    principal: Sequence[Sequence[AuthorKey]],
    ranked: Sequence[int],
    k: int,
    *,
    own: set[AuthorKey] | None = None,
    own_limit: int | None = None,
) -> tuple[list[tuple[int, list[int]]], int]:
    """The first k works of the ranked rows, each as (its position in `ranked`, the positions
    of its other editions), and how many works were held back to make room for others: at
    most `own_limit` of the works whose principal authors include one of `own` (a
    recommendation's liked authors) take a slot."""
    at = {row: i for i, row in enumerate(ranked)}
    out: list[tuple[int, list[int]]] = []
    taken = held = 0
    for row, editions in works.one_slot(ranked):
        if len(out) == k:
            break
        if own and own_limit is not None and own.intersection(principal[row]):
            if taken >= own_limit:
                held += 1
                continue
            taken += 1
        out.append((at[row], [at[r] for r in editions]))
    return out, held
