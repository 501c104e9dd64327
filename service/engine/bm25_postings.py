"""BM25 score matrices computed in numpy from each book's term counts, and a new generation's
postings made from the previous generation's: only the books that changed are tokenized again.

bm25s builds its matrix one document at a time in Python (a Counter and a set intersection per
book: 3.4 s of the 16.4 s both BM25 indexes took at a swap of 100,000 books), and each swap
tokenized every book again (most of the rest). `Postings` keeps, term by term, the rows that
hold each term and how often (the score matrix's own CSC layout, so its row numbers and offsets
are shared with the matrix), and each row's length. A new generation's postings are the
unchanged rows' (renumbered) merged with the changed rows' own (one C pass, _postings.c, where it
was built); the scores, which depend on every book (document frequencies, the average length),
are then computed for all at once.

The scores are bm25s's "lucene" BM25 (its default, what both indexes used) in its arithmetic:
idf in Python floats rounded to float32, tf / (k1 · (1 − b + b · len / avg) + tf) in float64,
their product rounded once to float32; tests/test_lexical.py holds the two to the same bytes.
The search index computes them a posting list at a time as a query reads it (`TermScores`: a
query reads a few lists; the matrix held whole was 4 bytes an entry), the more-like-this index,
whose queries read most of its lists, holds them.
"""

from __future__ import annotations

import functools
import math
from array import array
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import ModuleType

import bm25s
import numpy as np

from indexer.text_column import text_arrays, text_of_arrays


def _load() -> ModuleType | None:
    try:
        from service.engine import _postings  # type: ignore[attr-defined]
    except ImportError:  # built without a compiler: numpy's passes (setup.py)
        return None
    return _postings  # type: ignore[no-any-return]


_kernels = _load()


def kernels() -> ModuleType | None:
    """The compiled passes (service/engine/_postings.c), None where they were not built."""
    return _kernels


@dataclass(frozen=True)
class RowMoves:
    """How one generation's rows become the next's: the previous row r is row `new_row[r]`,
    unchanged (−1: gone or changed), and the rows `changed` (ascending) are new or changed."""

    new_row: np.ndarray  # (N_before,) int64
    changed: np.ndarray  # (C,) int64
    size: int  # N, the new generation's rows

    @functools.cached_property
    def sources(self) -> np.ndarray:
        """(N,) int64 each new row's previous row, −1 for a new or changed row: made once a
        swap, for every index that gathers its rows from the previous generation's."""
        stay = self.new_row >= 0
        sources = np.full(self.size, -1, np.int64)
        sources[self.new_row[stay]] = np.flatnonzero(stay)
        return sources


@dataclass(frozen=True)
class RowTokens:
    """The tokens of the rows a `Postings` was given, as term ids of those postings: row i's
    are ids[starts[i] : starts[i + 1]] with starts the running sum of `sizes`."""

    ids: np.ndarray  # (Σ tokens,) int32
    sizes: np.ndarray  # (R,) int64 tokens of each row given


@dataclass(frozen=True)
class Postings:
    """Each term's rows with its count there (CSC), each row's length, and the terms."""

    terms: list[str]  # term id → term
    indptr: np.ndarray  # (V + 1,) int64: term t's entries are [indptr[t], indptr[t + 1])
    rows: np.ndarray  # (nnz,) int32, ascending within a term
    counts: np.ndarray  # (nnz,) uint8 (uint16 past 255, int32 past 65,535) the term's count there
    lengths: np.ndarray  # (N,) int32 tokens of each row

    @classmethod
    def of(cls, tokens: Iterable[Sequence[str]], n: int) -> tuple[Postings, RowTokens]:
        """The postings of `n` rows whose tokens are `tokens` (repeats counted; an iterable,
        so a caller may tokenize a chunk at a time), and those tokens as its term ids."""
        none = np.zeros(0, np.int32)
        return _build(
            [],
            np.zeros(1, np.int64),
            none,
            none.astype(np.uint8),
            tokens=tokens,
            token_rows=np.arange(n),
            lengths=np.zeros(n, np.int32),
        )

    def moved(self, moves: RowMoves, tokens: Iterable[Sequence[str]]) -> tuple[Postings, RowTokens]:
        """The postings of the next generation: these rows moved by `moves`, the changed
        rows holding `tokens` (in `moves.changed` order), and those tokens as its term ids."""
        new_row = moves.new_row.astype(np.int32)  # a gather of 4 bytes an entry, not 8
        stay = moves.new_row >= 0
        lengths = np.zeros(moves.size, np.int32)
        lengths[moves.new_row[stay]] = self.lengths[stay]
        in_order = not np.any(np.diff(moves.new_row[stay]) < 0)  # as a swap moves them
        indptr, rows, counts = self.indptr, self.rows, self.counts
        merge = _kernels is not None and in_order  # moved as they are merged (C)
        if not merge:
            rows = new_row[self.rows]  # (nnz,) −1 for a row gone
            kept = rows >= 0
            # each term's first entry, less the entries dropped before it (a changed row's)
            indptr = self.indptr - np.searchsorted(np.flatnonzero(~kept), self.indptr)
            rows, counts = rows[kept], self.counts[kept]
            del kept
            if not in_order:  # sorted again
                term = np.repeat(np.arange(len(self.terms)), np.diff(indptr))
                order = np.lexsort((rows, term))
                rows, counts = rows[order], counts[order]
        return _build(
            self.terms,
            indptr,
            rows,
            counts,
            tokens=tokens,
            token_rows=moves.changed,
            lengths=lengths,
            new_row=new_row if merge else None,
        )

    def arrays(self) -> dict[str, np.ndarray]:
        """The postings as arrays, for a file (service/engine/served_form.py)."""
        return {
            **text_arrays("terms", self.terms),
            "indptr": self.indptr,
            "rows": self.rows,
            "counts": self.counts,
            "lengths": self.lengths,
        }

    @classmethod
    def from_arrays(cls, arrays: Mapping[str, np.ndarray]) -> Postings:
        """The postings `arrays()` gave, checked to be whole: the scores index them."""
        postings = cls(
            terms=list(text_of_arrays(arrays, "terms")),
            # the file's pages, not copies: nothing writes postings (a swap makes new ones)
            indptr=np.asarray(arrays["indptr"], np.int64),
            rows=np.asarray(arrays["rows"], np.int32),
            counts=np.asarray(arrays["counts"]),
            lengths=np.asarray(arrays["lengths"], np.int32),
        )
        nnz, n = len(postings.rows), len(postings.lengths)
        if (
            len(postings.indptr) != len(postings.terms) + 1
            or postings.indptr[0] != 0
            or postings.indptr[-1] != nnz
            or len(postings.counts) != nnz
            or (nnz and not 0 <= postings.rows.min() <= postings.rows.max() < n)
        ):
            raise ValueError("BM25 postings that do not hold together")
        return postings

    def term_ids(self) -> dict[str, int]:
        return {t: i for i, t in enumerate(self.terms)}


def _build(
    terms: list[str],
    indptr: np.ndarray,
    rows: np.ndarray,
    counts: np.ndarray,
    *,
    tokens: Iterable[Sequence[str]],
    token_rows: np.ndarray,
    lengths: np.ndarray,
    new_row: np.ndarray | None = None,
) -> tuple[Postings, RowTokens]:
    """Postings of the entries given (CSC: `indptr` over `terms`, each term's rows ascending,
    `counts` beside them) and of the rows `token_rows` holding `tokens` (their lengths written
    into `lengths`, (N,)), and those tokens as its term ids; terms no row holds are dropped.
    The given entries are copied a few times (O(entries) numpy), the tokens read once; with
    `new_row` ((N_before,) int32, ascending over the rows kept, −1 for the others) they are
    the previous generation's, moved and merged with the new ones in one pass (C)."""
    ids = {t: i for i, t in enumerate(terms)}
    vocab = list(terms)
    # 4 bytes a token, not a list of int objects (36): a start's 100,000 books hold ~10M
    flat = array("i")
    sizes = array("q")
    for doc in tokens:  # the one loop over tokens: only the changed rows' at a swap
        for t in doc:
            i = ids.get(t)
            if i is None:
                i = ids[t] = len(vocab)
                vocab.append(t)
            flat.append(i)
        sizes.append(len(doc))
    del ids
    given = np.frombuffer(flat, np.int32) if len(flat) else np.zeros(0, np.int32)
    row_sizes = np.frombuffer(sizes, np.int64) if len(sizes) else np.zeros(0, np.int64)
    lengths[token_rows] = row_sizes
    n, v = len(lengths), len(vocab)
    # (term, row) pairs of the new tokens, counted: one int64 key term · N + row each
    new_keys = given.astype(np.int64) * n + np.repeat(np.asarray(token_rows, np.int64), row_sizes)
    new_keys, new_counts = np.unique(new_keys, return_counts=True)
    new_term, new_rows = np.divmod(new_keys, n) if n else (new_keys, new_keys)
    top = max(int(counts.max()) if len(counts) else 0, int(new_counts.max(initial=0)))
    count_type = np.uint8 if top < 1 << 8 else np.uint16 if top < 1 << 16 else np.int32
    if new_row is not None:
        all_rows, all_counts, df = _merged(
            indptr,
            rows,
            counts.astype(count_type, copy=False),
            new_row=new_row,
            new_term=new_term,
            new_rows=new_rows.astype(np.int32),
            new_counts=new_counts.astype(count_type),
            v=v,
        )
    else:
        # the new entries merged into the given ones, which are in the CSC order (by term,
        # then row) already: O(entries), where sorting them all again took most of a 1M-book
        # swap's BM25 builds. A new key is a (term, row) the given entries lack: a changed
        # row's.
        df = np.zeros(v, np.int64)
        df[: len(terms)] = np.diff(indptr)
        if len(rows):
            old_keys = np.repeat(np.arange(len(terms), dtype=np.int64) * n, df[: len(terms)])
            at = np.searchsorted(old_keys + rows, new_keys)
            del old_keys
        else:
            at = np.zeros(len(new_keys), np.int64)
        df += np.bincount(new_term, minlength=v)
        all_rows = np.insert(rows.astype(np.int32, copy=False), at, new_rows.astype(np.int32))
        all_counts = np.insert(
            counts.astype(count_type, copy=False), at, new_counts.astype(count_type)
        )
    used = df > 0
    out = np.zeros(int(used.sum()) + 1, np.int64)
    np.cumsum(df[used], out=out[1:])
    renumber = (np.cumsum(used) - 1).astype(np.int32)  # a term's id once the unused are gone
    postings = Postings(
        terms=[t for t, u in zip(vocab, used, strict=True) if u],
        indptr=out,
        rows=all_rows,
        counts=all_counts,
        lengths=lengths,
    )
    return postings, RowTokens(renumber[given], row_sizes.copy())


def _merged(
    indptr: np.ndarray,
    rows: np.ndarray,
    counts: np.ndarray,
    *,
    new_row: np.ndarray,
    new_term: np.ndarray,
    new_rows: np.ndarray,
    new_counts: np.ndarray,
    v: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The previous entries (`indptr` over its terms, `rows`, `counts`) moved by `new_row`
    and the new ones (sorted by term, then row) merged in: rows, counts and each of the `v`
    terms' number of entries."""
    assert _kernels is not None
    indptr, rows = np.ascontiguousarray(indptr, np.int64), np.ascontiguousarray(rows, np.int32)
    counts, new_row = np.ascontiguousarray(counts), np.ascontiguousarray(new_row, np.int32)
    new_term = np.ascontiguousarray(new_term, np.int64)
    bound = len(rows) + len(new_rows)
    out_indptr = np.empty(v + 1, np.int64)
    out_rows, out_counts = np.empty(bound, np.int32), np.empty(bound, counts.dtype)
    written = _kernels.merge_postings(
        len(indptr) - 1,
        v,
        len(new_rows),
        counts.dtype.itemsize,
        *(a.ctypes.data for a in (indptr, rows, counts, new_row, new_term, new_rows, new_counts)),
        out_indptr.ctypes.data,
        out_rows.ctypes.data,
        out_counts.ctypes.data,
    )
    # the entries of rows gone or changed leave the bound's end unwritten: views, not copies
    # (what they keep beyond the end is what the previous generation held of those rows)
    return out_rows[:written], out_counts[:written], np.diff(out_indptr)


class TermScores:
    """The score matrix's data, (nnz,) float32 in the postings' order, computed a slice at a
    time as bm25s reads it: `data[start:end]`, one query term's posting list. Held whole it was
    4 bytes an entry (37 MiB of the two indexes at 100,000 books), for the few posting lists a
    query reads. Entry by entry the arithmetic of the matrix built whole, so the same bytes:
    idf[term] · (tf / (norm[row] + tf)) in float64, rounded once to float32."""

    def __init__(self, postings: Postings, idf: np.ndarray, norm: np.ndarray):
        """`idf`: (V,) float32; `norm`: (N,) float64 k1 · ((1 − b) + b · len / avg)."""
        self._indptr, self._rows, self._counts = postings.indptr, postings.rows, postings.counts
        self._idf, self._norm = idf, norm

    def __len__(self) -> int:
        return len(self._rows)

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """What an entry's score is computed from: the counts (nnz,), idf (V,), norm (N,)."""
        return self._counts, self._idf, self._norm

    def __getitem__(self, span: slice) -> np.ndarray:
        start, stop, step = span.indices(len(self._rows))
        if step != 1:
            raise IndexError("TermScores are read in posting lists: data[start:end]")
        if stop <= start:
            return np.zeros(0, np.float32)
        # the terms of entries [start, stop): one for a posting list, as bm25s asks
        first = int(np.searchsorted(self._indptr, start, side="right")) - 1
        if stop <= self._indptr[first + 1]:  # one term's: its idf, broadcast
            idf = self._idf[first : first + 1]
        else:
            last = int(np.searchsorted(self._indptr, stop - 1, side="right")) - 1
            bounds = np.clip(self._indptr[first : last + 2], start, stop)
            idf = np.repeat(self._idf[first : last + 1], np.diff(bounds))  # (stop − start,)
        tf = self._counts[start:stop].astype(np.float32)
        out: np.ndarray = (idf * (tf / (self._norm[self._rows[start:stop]] + tf))).astype(
            np.float32
        )
        return out


def _all_scores(postings: Postings, idf: np.ndarray, norm: np.ndarray) -> np.ndarray:
    """(nnz,) float32 every entry's score, `TermScores`' arithmetic in one pass (C)."""
    assert _kernels is not None
    counts = np.ascontiguousarray(postings.counts)
    out = np.empty(len(postings.rows), np.float32)
    arrays = (
        np.ascontiguousarray(postings.indptr, np.int64),
        np.ascontiguousarray(postings.rows, np.int32),
        counts,
        np.ascontiguousarray(idf, np.float32),
        np.ascontiguousarray(norm, np.float64),
        out,
    )
    _kernels.bm25_scores(len(idf), counts.dtype.itemsize, *(a.ctypes.data for a in arrays))
    return out


def lucene_bm25(
    postings: Postings,
    *,
    held: bool = False,
    scores: np.ndarray | None = None,
    k1: float = 1.5,
    b: float = 0.75,
) -> bm25s.BM25:
    """A bm25s index (queried with its own `get_scores`) over the postings' scores: each
    computed when a query reads it (`TermScores`), or all at once and held (`held`: for the
    more-like-this index, whose queries, a book's every word, read long posting lists; computed
    as they read them, its scores of a book took 3.8× as long at 30,000 books); `scores`: those
    held scores, computed before (a served form's)."""
    n = len(postings.lengths)
    df = np.diff(postings.indptr)
    # idf as bm25s computes it, in Python floats, one log per distinct document frequency
    distinct, which = np.unique(df, return_inverse=True)
    idf_of = np.array(
        [math.log(1 + (n - int(d) + 0.5) / (int(d) + 0.5)) for d in distinct], dtype=np.float32
    )
    idf = idf_of[which]  # (V,) float32
    norm = np.zeros(n, np.float64)
    if len(postings.rows):  # some row has a word (none: bm25s divided by a length of 0)
        avg = postings.lengths.mean()  # float64, as bm25s's np.array([...]).mean()
        # k1 · ((1 − b) + b · len / avg) per row, in float64 as bm25s's scalars make it
        norm = k1 * ((1 - b) + (b * postings.lengths.astype(np.float64)) / avg)
    data = TermScores(postings, idf, norm)
    if held and scores is None:
        scores = _all_scores(postings, idf, norm) if _kernels is not None else data[:]
    index = bm25s.BM25(k1=k1, b=b)
    index.nonoccurrence_array = None  # Lucene's BM25 has none
    index.scores = {
        "data": scores if held else data,
        "indices": postings.rows,
        "indptr": postings.indptr,
        "num_docs": n,
    }
    index.vocab_dict = postings.term_ids()
    index.unique_token_ids_set = set(index.vocab_dict.values())
    return index
