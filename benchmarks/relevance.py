"""The relevance suite: Attend's rankings beside the hybrids a user could pick instead, on the
shared catalog and the same model, per kind of query (benchmarks/relevance_labels.py).

    .venv/bin/python -m benchmarks.relevance                 # the table
    .venv/bin/python -m benchmarks.relevance --json out.json # and every figure, per query too

Indexes the shared catalog into the database first when it holds no books. Rows:

- `attend`: the service's defaults (ATTEND_HEADS for a search, ATTEND_SIMILAR_HEADS for more
  like this), through the service's own code (Searcher, book_ranking.similar);
- `title`, `description`, `lexical`: each head alone, through the same code;
- `dense`: cosine over one embedding of "title. description" per book (the plain dense search);
- `bm25`: bm25s over title, authors and description, each once (stemmed, stop words dropped);
- `rrf`: reciprocal-rank fusion (k = 60) of `dense` and `bm25`, over their top 1,000.

For more like this, the book is the query: its own keys (or embedding) and, for BM25, its title
and authors (Attend's lexical head) or its whole text (`bm25`). Columns per kind: nDCG@10,
MRR@10, recall@100, and `buried`: queries where a head alone had a relevant book in its top 10
and `attend` had none. Then a paired bootstrap 95% interval of attend − rrf in nDCG@10 per kind
(a difference counts only when the interval excludes 0), and the match strength behind
`no_strong_match` on the labelled queries against nonsense ones.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from sqlalchemy.orm import Session

from benchmarks.relevance_labels import (
    KINDS,
    Book,
    Judged,
    Scored,
    bootstrap,
    judged_queries,
    load_books,
    score,
)
from benchmarks.relevance_queries import NONSENSE
from indexer import db, pipeline, store
from indexer.settings import IndexSettings
from models.encoder import Encoder
from service.engine import book_ranking
from service.engine.head_weights import HEADS, BookHeads, parse_heads
from service.engine.lexical import LexicalIndex
from service.engine.searcher import NO_STRONG_MATCH_BELOW, Searcher, SearchOptions
from service.engine.served_index import ServedIndex
from service.engine.startup import build_encoder, build_searcher
from service.settings import ServiceSettings

logger = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"
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
    return np.take_along_axis(idx, order, axis=1).tolist()


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


def search_rankings(
    searcher: Searcher, base: Baselines, queries: Sequence[Judged]
) -> dict[str, Rankings]:
    texts = [q.query for q in queries]
    rows = {book_id: i for i, book_id in enumerate(searcher.index.books.ids)}

    def attend(heads: dict[str, float] | None) -> Rankings:
        responses = searcher.search_now(texts, SearchOptions(k=K, heads=heads))
        return [[rows[hit.book.id] for hit in r.results] for r in responses]

    out = {"attend": attend(None)} | {h: attend(parse_heads(f"{h}:1")) for h in HEADS}
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
        return [[row_of[hit.book.id] for hit in a.results] for a in answers]

    out = {"attend": attend(default)}
    out |= {h: attend(BookHeads({h: 1.0}, default.scales)) for h in HEADS}
    out["dense"] = base.dense(base.embeddings[rows].copy(), exclude=rows)
    out["bm25"] = base.lexical([base.documents[r] for r in rows], exclude=rows)
    out["rrf"] = rrf(out["dense"], out["bm25"])
    return out


def buried(queries: Sequence[Judged], rankings: dict[str, Rankings]) -> int:
    """Queries where a head alone had a relevant book in its top 10 and `attend` had none."""
    return sum(
        not any(r in q.grades for r in rankings["attend"][i][:10])
        and any(any(r in q.grades for r in rankings[h][i][:10]) for h in HEADS)
        for i, q in enumerate(queries)
    )


def ensure_index(database_url: str, catalog: Path) -> None:
    engine = db.create_db_engine(database_url)
    db.upgrade(engine)
    with Session(engine) as session:
        empty = store.count_books(session=session) == 0
    if empty:
        settings = IndexSettings(database_url=database_url)
        pipeline.run(settings, engine=engine, encoder=build_encoder(settings), path=catalog)
    engine.dispose()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database-url", default="sqlite:///benchmarks/results/books.db")
    parser.add_argument("--catalog", type=Path, default=SHARED / "books.jsonl")
    parser.add_argument("--subjects", type=Path, default=SHARED / "subject_queries.jsonl")
    parser.add_argument("--json", type=Path, help="also write every figure here")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    results = ROOT / "benchmarks" / "results"
    results.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()

    ensure_index(args.database_url, args.catalog)
    settings = ServiceSettings(database_url=args.database_url, device="cpu")
    engine = db.create_db_engine(args.database_url)
    searcher = build_searcher(settings, engine=engine)
    index = searcher.index
    by_id = {b.id: b for b in load_books(args.catalog)}
    books = [by_id[i] for i in index.books.ids]
    queries = judged_queries(books, args.subjects)
    base = Baselines(books, searcher.encoder, results)

    table: dict[str, dict[str, Scored]] = {}
    counts: dict[str, int] = {}
    buried_by_kind: dict[str, int] = {}
    for kind in KINDS:
        qs = [q for q in queries if q.kind == kind]
        if not qs:
            continue
        if kind == "similar":
            rankings = similar_rankings(index, settings.similar, base, qs)
        else:
            rankings = search_rankings(searcher, base, qs)
        table[kind] = {row: score(qs, rankings[row]) for row in ROWS}
        counts[kind] = len(qs)
        buried_by_kind[kind] = buried(qs, rankings)
    labelled = [q.query for q in queries if q.kind != "similar"]
    strengths = {
        name: [
            (r.match_strength, r.no_strong_match)
            for r in searcher.search_now(qs, SearchOptions(k=1))
        ]
        for name, qs in (("labelled", labelled), ("nonsense", NONSENSE))
    }
    engine.dispose()
    intervals = {
        kind: bootstrap(rows["attend"].ndcg, rows["rrf"].ndcg) for kind, rows in table.items()
    }
    sys.stdout.write(
        report(settings, len(books), counts, table, buried_by_kind, intervals, strengths)
        + f"\n({time.perf_counter() - t0:.0f} s)\n"
    )
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "catalog_size": len(books),
                    "defaults": {
                        "heads": settings.heads,
                        "head_scales": settings.head_scales,
                        "similar_heads": settings.similar_heads,
                        "similar_head_scales": settings.similar_head_scales,
                    },
                    "queries": counts,
                    "means": {
                        k: {r: s.means() for r, s in rows.items()} for k, rows in table.items()
                    },
                    "per_query": {
                        k: {r: s.ndcg for r, s in rows.items()} for k, rows in table.items()
                    },
                    "buried": buried_by_kind,
                    "attend_minus_rrf_ndcg_95": intervals,
                    "match_strength": strengths,
                }
            )
            + "\n"
        )
    return 0


def report(  # noqa: PLR0917
    settings: ServiceSettings,
    size: int,
    counts: dict[str, int],
    table: dict[str, dict[str, Scored]],
    buried_by_kind: dict[str, int],
    intervals: dict[str, tuple[float, float]],
    strengths: dict[str, list[tuple[float, bool]]],
) -> str:
    kinds = list(table)
    lines = [
        f"Relevance on {size} books: {', '.join(f'{counts[k]} {k}' for k in kinds)} queries",
        f"attend: search heads {settings.heads} (scales {settings.head_scales}); "
        f"similar heads {settings.similar_heads} (scales {settings.similar_head_scales})",
        "",
        f"{'':<12}" + "".join(f"{k:^27}" for k in kinds),
        f"{'':<12}" + "".join(f"{'nDCG@10':>9}{'MRR@10':>9}{'R@100':>9}" for _ in kinds),
    ]
    for row in ROWS:
        cells = ""
        for k in kinds:
            m = table[k][row].means()
            cells += f"{m['ndcg@10']:>9.3f}{m['mrr@10']:>9.3f}{m['recall@100']:>9.3f}"
        lines.append(f"{row:<12}{cells}")
    lines += [
        "",
        "buried (a head alone had a relevant book in its top 10, attend none): "
        + ", ".join(f"{k} {buried_by_kind[k]}/{counts[k]}" for k in kinds),
        "attend − rrf, nDCG@10, paired bootstrap 95%: "
        + ", ".join(
            f"{k} {_mean_diff(table[k]):+.3f} [{lo:+.3f}, {hi:+.3f}]"
            for k, (lo, hi) in intervals.items()
        ),
        f"no_strong_match (strength < {NO_STRONG_MATCH_BELOW} or no query word in the catalog): "
        f"{_flagged(strengths['labelled'])} of the labelled and subject queries; "
        f"{_flagged(strengths['nonsense'])} of the nonsense ones ("
        + ", ".join(f"{s:.2f}{'*' if f else ''}" for s, f in strengths["nonsense"])
        + "; * flagged)",
    ]
    return "\n".join(lines)


def _flagged(strengths: list[tuple[float, bool]]) -> str:
    values = [s for s, _ in strengths]
    return (
        f"{sum(f for _, f in strengths)}/{len(strengths)} (strength min {min(values):.2f}, "
        f"median {statistics.median(values):.2f})"
    )


def _mean_diff(rows: dict[str, Scored]) -> float:
    return statistics.fmean(rows["attend"].ndcg) - statistics.fmean(rows["rrf"].ndcg)


if __name__ == "__main__":
    raise SystemExit(main())
