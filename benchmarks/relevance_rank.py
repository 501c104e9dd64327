"""The relevance suite's rankings: Attend through the service's own code, and the plain dense
search, BM25 and their reciprocal-rank fusion over the same catalog and model
(benchmarks/relevance.py scores them).

Every function returns, per row of the suite (`ROWS`), one ranking per query: catalog rows,
best first, at most `K` of them.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from benchmarks.relevance_books import Pair
from benchmarks.relevance_labels import Book, Judged
from models.encoder import Encoder
from service.config.head_weights import HEADS, BookHeads, parse_heads
from service.engine import book_ranking
from service.engine.lexical import LexicalIndex
from service.engine.results import RankedBook, Recommended
from service.engine.searcher import Searcher
from service.engine.served_index import ServedIndex
from service.engine.tickets import SearchOptions

logger = logging.getLogger(__name__)

K = 100  # every ranking is cut here: recall@100
RRF_K = 60
ROWS = ("attend", *HEADS, "dense", "bm25", "rrf")
Rankings = list[list[int]]


def top(scores: np.ndarray, k: int) -> Rankings:
    """(Q, N) scores → each row's top k rows, best first (ties: the lower row)."""
    k = min(k, scores.shape[1])
    idx = np.argpartition(-scores, k - 1, axis=1)[:, :k]
    part = np.take_along_axis(scores, idx, axis=1)
    order = np.lexsort((idx, -part), axis=1)
    ranked: Rankings = np.take_along_axis(idx, order, axis=1).tolist()
    return ranked


def rrf(*rankings: Rankings, k: int = RRF_K) -> Rankings:
    out = []
    for lists in zip(*rankings, strict=True):
        fused: dict[int, float] = {}
        for ranked in lists:
            for rank, row in enumerate(ranked, 1):
                fused[row] = fused.get(row, 0.0) + 1.0 / (k + rank)
        out.append(sorted(fused, key=lambda r: (-fused[r], r))[:K])
    return out


class Baselines:
    """The plain dense search and BM25 a user gets elsewhere, over the same catalog and model."""

    def __init__(self, books: Sequence[Book], encoder: Encoder, cache: Path):
        texts = [f"{b.title}. {b.description}" for b in books]
        digest = hashlib.sha256((encoder.name + "\n" + "\n".join(texts)).encode()).hexdigest()
        path = cache / f"dense-{digest[:16]}.npy"
        if path.exists():
            self.embeddings = np.load(path)
        else:
            t0 = time.perf_counter()
            self.embeddings = encoder.encode(texts).numpy()
            np.save(path, self.embeddings)
            logger.info("embedded %d books in %.0f s", len(texts), time.perf_counter() - t0)
        self.encoder = encoder
        self.documents = [f"{b.title} {' '.join(b.authors)} {b.description}" for b in books]
        self.bm25 = LexicalIndex(self.documents)

    def dense(self, q: np.ndarray, exclude: Sequence[int] | None = None) -> Rankings:
        s = q @ self.embeddings.T  # (Q, N)
        if exclude is not None:
            s[np.arange(len(exclude)), exclude] = -np.inf
        return top(s, 1000)

    def lexical(self, texts: list[str], exclude: Sequence[int] | None = None) -> Rankings:
        s = self.bm25.scores(texts)
        if exclude is not None:
            s[np.arange(len(exclude)), exclude] = -np.inf
        return top(s, 1000)


SLOTS = "attend slots"  # Attend's rankings as slots, one a work (its works figures; not scored)


def slots_of(results: Sequence[RankedBook | Recommended], row_of: dict[str, int]) -> list[int]:
    return [row_of[hit.book.id] for hit in results]


def as_read(results: Sequence[RankedBook | Recommended], row_of: dict[str, int]) -> list[int]:
    """A response's books in the order a reader reads them: each result, then the other
    editions of its work listed under it (a work takes one slot; the labels count editions
    apart, so a ranking that shows them under one slot must not lose their credit)."""
    return [row_of[b.id] for hit in results for b in (hit.book, *hit.editions)]


def search_rankings(
    searcher: Searcher, base: Baselines, queries: Sequence[Judged]
) -> dict[str, Rankings]:
    texts = [q.query for q in queries]
    rows = {book_id: i for i, book_id in enumerate(searcher.index.books.ids)}

    def attend(heads: dict[str, float] | None) -> Rankings:
        responses = searcher.search_now(texts, SearchOptions(k=K, heads=heads))
        if heads is None:
            out[SLOTS] = [slots_of(r.results, rows) for r in responses]
        return [as_read(r.results, rows)[:K] for r in responses]

    out: dict[str, Rankings] = {}
    out |= {"attend": attend(None)} | {h: attend(parse_heads(f"{h}:1")) for h in HEADS}
    out["dense"] = base.dense(base.encoder.encode(texts).numpy())
    out["bm25"] = base.lexical(texts)
    out["rrf"] = rrf(out["dense"], out["bm25"])
    return out


def similar_rankings(
    index: ServedIndex, default: BookHeads, base: Baselines, queries: Sequence[Judged]
) -> dict[str, Rankings]:
    row_of = {book_id: i for i, book_id in enumerate(index.books.ids)}
    rows = [row_of[q.query] for q in queries]

    def attend(heads: BookHeads) -> Rankings:
        answers = [book_ranking.similar(index, q.query, k=K, heads=heads) for q in queries]
        if heads is default:
            out[SLOTS] = [slots_of(a.results, row_of) for a in answers]
        return [as_read(a.results, row_of)[:K] for a in answers]

    out: dict[str, Rankings] = {}
    out["attend"] = attend(default)
    out |= {h: attend(BookHeads({h: 1.0}, default.scales)) for h in HEADS}
    out["dense"] = base.dense(base.embeddings[rows].copy(), exclude=rows)
    out["bm25"] = base.lexical([base.documents[r] for r in rows], exclude=rows)
    out["rrf"] = rrf(out["dense"], out["bm25"])
    return out


def recommend_rankings(
    index: ServedIndex, default: BookHeads, base: Baselines, pairs: Sequence[Pair]
) -> dict[str, Rankings]:
    """Two liked books each; every row's ranking less the liked books and every book by their
    authors (`Pair.removed`), cut to K. Attend is asked for K more than it will lose, so each
    of its rankings keeps K books. `dense` is the normalised mean of the two liked books'
    embeddings, `bm25` the sum of the two liked documents' scores."""
    ids = index.books.ids
    row_of = {book_id: i for i, book_id in enumerate(ids)}

    def attend(heads: BookHeads) -> Rankings:
        answers = [
            book_ranking.recommend(
                index, [ids[r] for r in p.liked], [], k=K + len(p.removed), heads=heads
            )
            for p in pairs
        ]
        if heads is default:
            slots[SLOTS] = [slots_of(a.results, row_of) for a in answers]
        return [as_read(a.results, row_of) for a in answers]

    def drop(scores: np.ndarray) -> Rankings:
        for i, p in enumerate(pairs):
            scores[i, [*p.liked, *p.removed]] = -np.inf
        return top(scores, 1000)

    slots: dict[str, Rankings] = {}
    out = {"attend": attend(default)}
    out |= {h: attend(BookHeads({h: 1.0}, default.scales)) for h in HEADS}
    out |= slots
    liked = np.array([p.liked for p in pairs])  # (P, 2)
    mean = base.embeddings[liked].mean(axis=1)  # (P, d)
    mean /= np.linalg.norm(mean, axis=1, keepdims=True)
    out["dense"] = drop(mean @ base.embeddings.T)
    lexical = base.bm25.scores([base.documents[r] for r in liked.ravel()])  # (2P, N)
    out["bm25"] = drop(lexical.reshape(len(pairs), 2, -1).sum(axis=1))
    out = {row: [_without(r, p) for r, p in zip(rs, pairs, strict=True)] for row, rs in out.items()}
    out["rrf"] = rrf(out["dense"], out["bm25"])  # over their top 1,000, as everywhere
    return {row: [r[:K] for r in rs] for row, rs in out.items()}


def served_recommend(
    index: ServedIndex, default: BookHeads, base: Baselines, pairs: Sequence[Pair]
) -> dict[str, Rankings]:
    """Each pair's top 10 as a reader asking with the service's defaults sees it: Attend's
    `book_ranking.recommend` with the default similar heads and k = 10 (the route's default),
    and the baselines' rankings less only the liked books themselves (the liked authors' other
    books stay, unlike in `recommend_rankings`)."""
    ids = index.books.ids
    row_of = {book_id: i for i, book_id in enumerate(ids)}
    answers = [
        book_ranking.recommend(index, [ids[r] for r in p.liked], [], k=10, heads=default)
        for p in pairs
    ]
    liked = np.array([p.liked for p in pairs])  # (P, 2)
    mean = base.embeddings[liked].mean(axis=1)  # (P, d)
    mean /= np.linalg.norm(mean, axis=1, keepdims=True)
    dense = mean @ base.embeddings.T  # (P, N)
    lexical = base.bm25.scores([base.documents[r] for r in liked.ravel()])  # (2P, N)
    lexical = lexical.reshape(len(pairs), 2, -1).sum(axis=1)
    for scores in (dense, lexical):
        scores[np.arange(len(pairs))[:, None], liked] = -np.inf
    out = {
        "attend": [[row_of[hit.book.id] for hit in a.results] for a in answers],
        "dense": top(dense, 1000),
        "bm25": top(lexical, 1000),
    }
    out["rrf"] = rrf(out["dense"], out["bm25"])
    return {row: [r[:10] for r in rs] for row, rs in out.items()}


def _without(ranked: list[int], pair: Pair) -> list[int]:
    gone = {*pair.liked, *pair.removed}
    return [r for r in ranked if r not in gone]


def buried(queries: Sequence[Judged], rankings: dict[str, Rankings]) -> int:
    """Queries where a head alone had a relevant book in its top 10 and `attend` had none."""
    return sum(
        not any(r in q.grades for r in rankings["attend"][i][:10])
        and any(any(r in q.grades for r in rankings[h][i][:10]) for h in HEADS)
        for i, q in enumerate(queries)
    )
