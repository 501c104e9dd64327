"""The dev topical set and the baseline a reader would build for it (issue 29; the rules are
../shared/data/README.md's; benchmarks/relevance.py runs them as the kind `topical_dev`).

`similar_topical_dev.jsonl` holds standalone books (no series mate, no other book by their
authors), each with the books sharing two or more of its OpenLibrary headings, graded by how
many ("grades"; nDCG's gain 2^g − 1, as everywhere in the suite). The book is the query and is
left out of its own ranking. It is read from ../shared/data, never copied into the project,
and only scored: nothing is tuned to it here.

The reader's baseline rows, computed in the same run as Attend's:

- `dense_td`: cosine over one embedding of "<title>. <description>" per book (the suite's
  `Baselines.embeddings`, the same model the service uses);
- `bm25_td`: bm25s BM25 (k1 1.5, b 0.75, Lucene's idf) over "<title>. <description>", English
  stop words dropped and NO stemming, with the book's whole "<title>. <description>" as the
  query (its repeated words counted each time, as `BM25.retrieve` counts them);
- `rrf_td`: their reciprocal-rank fusion (k = 60) over each one's top 1,000.

They differ from the suite's `bm25` and `rrf` rows (title, authors and description, stemmed),
which the other kinds keep.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import bm25s
import numpy as np

from benchmarks.relevance_labels import Book, Judged, ndcg
from benchmarks.relevance_rank import Rankings, rrf, top

logger = logging.getLogger(__name__)

KIND = "topical_dev"
FILE = "similar_topical_dev.jsonl"
READER_ROWS = ("dense_td", "bm25_td", "rrf_td")
DEPTH = 1000  # each baseline's ranking before the fusion


def topical_dev(path: Path, row_of: Mapping[str, int]) -> list[Judged]:
    """The set's books as more-like-this queries, graded by its "grades" (catalog rows)."""
    out = []
    with path.open(encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            grades = {row_of[i]: int(g) for i, g in row["grades"].items() if i in row_of}
            if row["id"] in row_of and grades:
                out.append(Judged(KIND, row["id"], grades))
            else:
                logger.warning("topical_dev: %s is not in the index or has no label", row["id"])
    return out


def binary_ndcg(queries: Sequence[Judged], rankings: Sequence[Sequence[int]]) -> list[float]:
    """nDCG@10 per query with gain 1 for every relevant book, whatever its grade."""
    return [
        ndcg(ranked, dict.fromkeys(q.grades, 1))
        for q, ranked in zip(queries, rankings, strict=True)
    ]


class ReaderBaselines:
    """dense_td, bm25_td and rrf_td over the catalog's rows (index order)."""

    def __init__(self, books: Sequence[Book], embeddings: np.ndarray):
        """`embeddings`: (N, d) unit-length embeddings of each book's "<title>. <description>"."""
        t0 = time.perf_counter()
        texts = [f"{b.title}. {b.description}" for b in books]
        tokens = bm25s.tokenize(texts, stopwords="en", show_progress=False)
        self.bm25 = bm25s.BM25(k1=1.5, b=0.75)
        self.bm25.index(tokens, show_progress=False)
        words = {i: w for w, i in tokens.vocab.items()}
        # each book's query: its own tokens, as strings the index looks up in its vocabulary
        self.queries = [[words[i] for i in ids] for ids in tokens.ids]
        self.embeddings = embeddings  # (N, d)
        logger.info("reader's BM25 over %d books in %.1f s", len(texts), time.perf_counter() - t0)

    def rankings(self, rows: Sequence[int]) -> dict[str, Rankings]:
        """Each book of `rows` as the query, itself left out: per reader row, its ranking."""
        picked = np.arange(len(rows))
        dense = self.embeddings[list(rows)] @ self.embeddings.T  # (R, N)
        dense[picked, rows] = -np.inf
        lexical = np.zeros_like(dense)
        for i, row in enumerate(rows):
            if self.queries[row]:
                lexical[i] = self.bm25.get_scores(self.queries[row])
        lexical[picked, rows] = -np.inf
        out = {"dense_td": top(dense, DEPTH), "bm25_td": top(lexical, DEPTH)}
        out["rrf_td"] = rrf(out["dense_td"], out["bm25_td"])
        return out
