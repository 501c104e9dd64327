"""A batch of queries' BM25 over every row, written into (B, N) rows the caller gives.

bm25s's `get_scores` makes a fresh (N,) array per query and adds each term's posting list with
`np.add.at`, from an array of that list's scores made for it (`TermScores` computes them as it
is read): at 1,000,000 books a batch of 32 spent most of its lexical head there, and a fresh
(B, N) array is a page fault per 4 KiB on its first write. `query_scores` adds the same
entries in the same order in one C pass per query (service/engine/_postings.c), so its rows are
bm25s's bytes (tests/test_lexical.py), into a buffer that outlives the batch; without the
compiled part it asks bm25s.
"""

from __future__ import annotations

from collections.abc import Sequence

import bm25s
import numpy as np

from service.engine.bm25_postings import TermScores, kernels


def query_scores(
    bm25: bm25s.BM25, queries: Sequence[Sequence[int] | np.ndarray], out: np.ndarray
) -> None:
    """out (B, N) float32, C-contiguous: row b the BM25 of query b's term ids (a list or an
    integer array) over the index's N rows (a term repeated counts twice, as bm25s counts it;
    no terms: zeros)."""
    B, N = out.shape  # noqa: N806
    n = bm25.scores["num_docs"]
    if len(queries) != B or n != N:
        raise ValueError(f"{len(queries)} queries over {n} rows into {out.shape}")
    if out.dtype != np.float32 or not out.flags.c_contiguous:
        raise ValueError("query scores are written into C-contiguous float32 rows")
    data = bm25.scores["data"]
    compiled = kernels()
    if compiled is None:
        for b, terms in enumerate(queries):
            out[b] = bm25.get_scores_from_ids(list(terms)) if len(terms) else 0.0
        return
    indptr = np.ascontiguousarray(bm25.scores["indptr"], np.int64)
    rows = np.ascontiguousarray(bm25.scores["indices"], np.int32)
    flat = np.concatenate([np.zeros(0, np.int64), *(np.asarray(q, np.int64) for q in queries)])
    starts = np.zeros(B + 1, np.int64)
    np.cumsum([len(q) for q in queries], out=starts[1:])
    if isinstance(data, TermScores):  # computed as the query reads them
        counts, idf, norm = data.arrays()
        counts = np.ascontiguousarray(counts)
        idf, norm = np.ascontiguousarray(idf, np.float32), np.ascontiguousarray(norm, np.float64)
        held = 0
        count_bytes = counts.dtype.itemsize
        pointers = (counts.ctypes.data, idf.ctypes.data, norm.ctypes.data)
    else:  # held: every entry's score
        held_scores = np.ascontiguousarray(data, np.float32)
        held, count_bytes, pointers = held_scores.ctypes.data, 4, (0, 0, 0)
    compiled.query_scores(
        B,
        N,
        count_bytes,
        indptr.ctypes.data,
        rows.ctypes.data,
        *pointers,
        held,
        flat.ctypes.data,
        starts.ctypes.data,
        out.ctypes.data,
    )
