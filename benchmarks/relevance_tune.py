"""How the default heads were chosen: each head's temperature calibrated to a common mean
entropy, then a coarse grid of head weights scored on the relevance suite (every kind at once).

    .venv/bin/python -m benchmarks.relevance_tune              # target 4 nats, grid step 0.1
    .venv/bin/python -m benchmarks.relevance_tune --target 4.5

A head's softmax is sharper the larger its scale, and the heads differ: at one scale of 20 the
title head (short texts) is far peakier than the description head, so in a mixture it takes
the weight whatever π says. Calibrated, every head's softmax has the same mean entropy over the
suite's queries (for the search kinds; separately for more like this, where a book is the
query), so π means what it says. Then every π on the grid is scored exactly as the service
mixes (Σ_h π_h softmax_h; the lexical head over the books with a query term, abstaining without
one), here as (Q, N) matrices in numpy, which is exact for this catalog's size. The table
lists the best grid points by their worst margin over RRF's nDCG@10 across the search kinds.
Grid points are coarse on purpose: the differences between neighbours are inside the suite's
bootstrap intervals (benchmarks/relevance.py), so only what wins on every kind is kept.
"""

from __future__ import annotations

import argparse
import itertools
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from benchmarks.relevance import Baselines, rrf, top
from benchmarks.relevance_labels import Judged, judged_queries, score
from benchmarks.relevance_served import serve, suite_arguments
from models.keys import LocalKeys
from service.config.head_weights import DENSE_HEADS, LEXICAL

SEARCH_KINDS = ("names", "subjects", "intents")
# the heads this grid weighs: the two dense ones and BM25 (the names heads came later, and ask
# with what a query names, not a weight a grid finds)
HEADS = (*DENSE_HEADS, LEXICAL)
Scores = dict[str, np.ndarray]  # head → (Q, N) raw scores (q·k, or BM25)


def softmax(logits: np.ndarray) -> np.ndarray:
    z = logits - logits.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def head_probs(name: str, scores: np.ndarray, scale: float, mask: np.ndarray) -> np.ndarray:
    """(Q, N) one head's softmax; the lexical head over the books with a query term (every book
    for a row without any: it abstains there, see `mix`)."""
    if name != LEXICAL:
        return softmax(np.where(mask, -np.inf, scores * scale))
    evidence = (scores > 0) & ~mask
    some = evidence.any(axis=1, keepdims=True)
    logits = np.where(evidence, scores * scale, -np.inf)
    return softmax(np.where(some, logits, np.where(mask, -np.inf, 0.0)))


def entropies_of(p: np.ndarray) -> np.ndarray:
    """(Q,) each row's entropy in nats."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.asarray(-(np.where(p > 0, p * np.log(p), 0.0)).sum(axis=1))


def calibrate(name: str, runs: Sequence[tuple[Scores, np.ndarray]], target: float) -> float:
    """The scale at which head `name` has mean entropy `target` over every query of `runs`
    (each query counts once; bisection on a log scale, entropy falls as the scale grows)."""
    lo, hi = (1e-3, 50.0) if name == LEXICAL else (0.5, 500.0)
    for _ in range(40):
        mid = (lo * hi) ** 0.5
        entropies = [entropies_of(head_probs(name, s[name], mid, m)) for s, m in runs]
        h = float(np.concatenate(entropies).mean())
        lo, hi = (mid, hi) if h > target else (lo, mid)
    return (lo * hi) ** 0.5


def mix(probs: dict[str, np.ndarray], evidence: np.ndarray, pi: dict[str, float]) -> np.ndarray:
    """Σ_h π_h p_h, the lexical head's π dropped (and the rest renormalised) where it has no
    evidence."""
    w, total = 0.0, 0.0
    for name, weight in pi.items():
        if weight <= 0:
            continue
        row_pi = np.where(evidence, weight, 0.0)[:, None] if name == LEXICAL else weight
        w, total = w + row_pi * probs[name], total + row_pi
    return np.asarray(w) / np.maximum(total, 1e-300)


def grid(step: float) -> list[dict[str, float]]:
    n = round(1 / step)
    out = []
    for a, b in itertools.product(range(n + 1), repeat=2):
        if a + b <= n:
            out.append(dict(zip(HEADS, (a * step, b * step, (n - a - b) * step), strict=True)))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    suite_arguments(parser)
    parser.add_argument("--target", type=float, default=4.0, help="mean entropy, nats")
    parser.add_argument("--step", type=float, default=0.1, help="the search π grid's step")
    parser.add_argument(
        "--similar-step", type=float, default=0.025, help="the more-like-this π grid's step"
    )
    parser.add_argument("--show", type=int, default=12, help="grid points listed")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    served = serve(args.database_url, args.catalog)
    searcher, books = served.searcher, served.books
    index = searcher.index
    ids = index.books.ids
    queries = judged_queries(books, args.subjects)
    assert isinstance(index.keys, LocalKeys)  # the keys in this process
    keys = index.keys.host()  # field → (N, d) float32
    runs: dict[str, tuple[list[Judged], Scores, np.ndarray]] = {}
    for kind in (*SEARCH_KINDS, "similar"):
        qs = [q for q in queries if q.kind == kind]
        mask = np.zeros((len(qs), len(index)), dtype=bool)
        if kind == "similar":  # the book is the query: its keys, its title and authors
            rows = [ids.index(q.query) for q in qs]
            mask[np.arange(len(rows)), rows] = True
            s = {f: keys[f][rows] @ keys[f].T for f in keys}
            # the lexical head as `similar` asks: the book's title and description (LikeThisIndex)
            s[LEXICAL] = index.like_this.scores(rows)
        else:
            q = searcher.encoder.encode([x.query for x in qs]).numpy()
            s = {f: q @ keys[f].T for f in keys}
            s[LEXICAL] = index.lexical.scores([x.query for x in qs])
        runs[kind] = (qs, s, mask)

    out = [f"calibrated to a mean entropy of {args.target} nats:"]
    base = Baselines(books, searcher.encoder, Path("benchmarks/results"))
    out += tune("search", SEARCH_KINDS, args.step, runs, base, args.target, args.show)
    out += tune("similar", ("similar",), args.similar_step, runs, base, args.target, args.show)
    sys.stdout.write("\n".join(out) + "\n")
    return 0


Runs = dict[str, tuple[list[Judged], Scores, np.ndarray]]


def tune(  # noqa: PLR0917
    uses: str,
    kinds: Sequence[str],
    step: float,
    runs: Runs,
    base: Baselines,
    target: float,
    show: int,
) -> list[str]:
    """Calibrated scales for `kinds`, then the π grid: the points at least as good as RRF on
    every kind, best mean nDCG@10 first, among those that give every head a weight (a query one
    head cannot answer, such as a book with no series or author mates, is then still ranked by
    the others)."""
    scales = {h: calibrate(h, [(runs[k][1], runs[k][2]) for k in kinds], target) for h in HEADS}
    out = [f"  {uses}: scales " + ",".join(f"{h}:{v:.3g}" for h, v in scales.items())]
    probs = {
        k: {h: head_probs(h, runs[k][1][h], scales[h], runs[k][2]) for h in HEADS} for k in kinds
    }
    rrf_ndcg = {k: _rrf(base, runs[k][0], runs[k][2], k) for k in kinds}
    out.append(f"  {uses}: rrf nDCG@10 " + ", ".join(f"{k} {v:.3f}" for k, v in rrf_ndcg.items()))
    scored = []
    for pi in grid(step):
        if not all(w > 0 for w in pi.values()):
            continue
        row = {}
        for k in kinds:
            qs, s, mask = runs[k]
            evidence = ((s[LEXICAL] > 0) & ~mask).any(axis=1)
            row[k] = score(qs, top(mix(probs[k], evidence, pi), 100)).means()["ndcg@10"]
        if all(row[k] >= rrf_ndcg[k] for k in kinds):
            scored.append((pi, row))
    scored.sort(key=lambda r: -sum(r[1].values()))
    for pi, row in scored[:show]:
        cells = ", ".join(f"{k} {v:.3f}" for k, v in row.items())
        weights = ",".join(f"{h}:{w:g}" for h, w in pi.items())
        out.append(f"    {weights:<44} {cells}")
    return out


def _rrf(base: Baselines, qs: list[Judged], mask: np.ndarray, kind: str) -> float:
    """RRF's nDCG@10 on these queries (benchmarks/relevance.py's baseline)."""
    if kind == "similar":
        rows = [int(np.flatnonzero(m)[0]) for m in mask]
        dense = base.dense(base.embeddings[rows].copy(), exclude=rows)
        lexical = base.lexical([base.documents[r] for r in rows], exclude=rows)
    else:
        dense = base.dense(base.encoder.encode([q.query for q in qs]).numpy())
        lexical = base.lexical([q.query for q in qs])
    return score(qs, rrf(dense, lexical)).means()["ndcg@10"]


if __name__ == "__main__":
    raise SystemExit(main())
