"""BM25 score matrices computed in numpy from each book's term counts, and a new generation's
postings made from the previous generation's: only the books that changed are tokenized again.

bm25s builds its matrix one document at a time in Python (a Counter and a set intersection per
book: 3.4 s of the 16.4 s both BM25 indexes took at a swap of 100,000 books), and each swap
tokenized every book again (most of the rest). `Postings` keeps, term by term, the rows that
hold each term and how often (the score matrix's own CSC layout, so its row numbers and offsets
are shared with the matrix), and each row's length. A new generation's postings are the
unchanged rows' (renumbered) merged with the changed rows' own; the scores, which depend on
every book (document frequencies, the average length), are then computed for all at once.

The scores are bm25s's "lucene" BM25 (its default, what both indexes used) in its arithmetic:
idf in Python floats rounded to float32, tf / (k1 · (1 − b + b · len / avg) + tf) in float64,
their product rounded once to float32; tests/test_lexical.py holds the two to the same bytes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import bm25s
import numpy as np


@dataclass(frozen=True)
class RowMoves:
    """How one generation's rows become the next's: the previous row r is row `new_row[r]`,
    unchanged (−1: gone or changed), and the rows `changed` (ascending) are new or changed."""

    new_row: np.ndarray  # (N_before,) int64
    changed: np.ndarray  # (C,) int64
    size: int  # N, the new generation's rows


@dataclass(frozen=True)
class Postings:
    """Each term's rows with its count there (CSC), each row's length, and the terms."""

    terms: list[str]  # term id → term
    indptr: np.ndarray  # (V + 1,) int64: term t's entries are [indptr[t], indptr[t + 1])
    rows: np.ndarray  # (nnz,) int32, ascending within a term
    counts: np.ndarray  # (nnz,) uint16 (int32 past 65,535) occurrences of the term in the row
    lengths: np.ndarray  # (N,) int64 tokens of each row

    @classmethod
    def of(cls, tokens: Sequence[Sequence[str]]) -> Postings:
        """The postings of rows whose tokens are `tokens` (repeats counted)."""
        none = np.zeros(0, np.int64)
        n = len(tokens)
        return _build(
            [],
            none,
            none,
            none,
            tokens=tokens,
            token_rows=np.arange(n),
            lengths=np.zeros(n, np.int64),
        )

    def moved(self, moves: RowMoves, tokens: Sequence[Sequence[str]]) -> Postings:
        """The postings of the next generation: these rows moved by `moves`, the changed
        rows holding `tokens` (in `moves.changed` order)."""
        term = np.repeat(np.arange(len(self.terms), dtype=np.int64), np.diff(self.indptr))
        rows = moves.new_row[self.rows]  # (nnz,) −1 for a row gone
        kept = rows >= 0
        lengths = np.zeros(moves.size, np.int64)
        stay = moves.new_row >= 0
        lengths[moves.new_row[stay]] = self.lengths[stay]
        counts = self.counts[kept]
        return _build(
            self.terms,
            term[kept],
            rows[kept],
            counts,
            tokens=tokens,
            token_rows=moves.changed,
            lengths=lengths,
        )

    def term_ids(self) -> dict[str, int]:
        return {t: i for i, t in enumerate(self.terms)}


def _build(
    terms: list[str],
    term: np.ndarray,
    rows: np.ndarray,
    counts: np.ndarray,
    *,
    tokens: Sequence[Sequence[str]],
    token_rows: np.ndarray,
    lengths: np.ndarray,
) -> Postings:
    """Postings of the entries (term, row, count) given and of the rows `token_rows` holding
    `tokens` (their lengths written into `lengths`, (N,)); terms no row holds are dropped."""
    ids = {t: i for i, t in enumerate(terms)}
    vocab = list(terms)
    flat: list[int] = []
    for doc in tokens:  # the one loop over tokens: only the changed rows' at a swap
        for t in doc:
            i = ids.get(t)
            if i is None:
                i = ids[t] = len(vocab)
                vocab.append(t)
            flat.append(i)
    sizes = np.fromiter((len(doc) for doc in tokens), np.int64, len(tokens))
    lengths[token_rows] = sizes
    n, v = len(lengths), len(vocab)
    # (term, row) pairs of the new tokens, counted: one int64 key term · N + row each
    new_keys = np.asarray(flat, np.int64) * n + np.repeat(np.asarray(token_rows, np.int64), sizes)
    new_keys, new_counts = np.unique(new_keys, return_counts=True)
    keys = np.concatenate([term * n + rows, new_keys])
    all_counts = np.concatenate([counts.astype(np.int64), new_counts])
    order = np.argsort(keys, kind="stable")  # by term, then row: the CSC order
    keys, all_counts = keys[order], all_counts[order]
    term_of, row_of = np.divmod(keys, n) if n else (keys, keys)
    df = np.bincount(term_of, minlength=v)
    used = df > 0
    indptr = np.zeros(int(used.sum()) + 1, np.int64)
    np.cumsum(df[used], out=indptr[1:])
    count_type = np.uint16 if not len(all_counts) or all_counts.max() < 1 << 16 else np.int32
    return Postings(
        terms=[t for t, u in zip(vocab, used, strict=True) if u],
        indptr=indptr,
        rows=row_of.astype(np.int32),
        counts=all_counts.astype(count_type),
        lengths=lengths,
    )


def lucene_bm25(postings: Postings, *, k1: float = 1.5, b: float = 0.75) -> bm25s.BM25:
    """A bm25s index (queried with its own `get_scores`) holding the postings' scores."""
    n = len(postings.lengths)
    df = np.diff(postings.indptr)
    # idf as bm25s computes it, in Python floats, one log per distinct document frequency
    distinct, which = np.unique(df, return_inverse=True)
    idf_of = np.array(
        [math.log(1 + (n - int(d) + 0.5) / (int(d) + 0.5)) for d in distinct], dtype=np.float32
    )
    idf = idf_of[which]  # (V,) float32
    data = np.zeros(0, np.float32)
    if len(postings.rows):  # some row has a word (none: bm25s divided by a length of 0)
        avg = postings.lengths.mean()  # float64, as bm25s's np.array([...]).mean()
        # k1 · ((1 − b) + b · len / avg) per row, in float64 as bm25s's scalars make it
        norm = k1 * ((1 - b) + (b * postings.lengths.astype(np.float64)) / avg)
        tf = postings.counts.astype(np.float32)
        term = np.repeat(np.arange(len(df)), df)
        data = (idf[term] * (tf / (norm[postings.rows] + tf))).astype(np.float32)
    index = bm25s.BM25(k1=k1, b=b)
    index.nonoccurrence_array = None  # Lucene's BM25 has none
    index.scores = {
        "data": data,
        "indices": postings.rows,
        "indptr": postings.indptr,
        "num_docs": n,
    }
    index.vocab_dict = postings.term_ids()
    index.unique_token_ids_set = set(index.vocab_dict.values())
    return index
