"""A learned query projection for the description head, fitted on the catalog itself, measured
against the head as it is (issue 22, item 3): is W_q worth storing with a generation?

    .venv/bin/python -m benchmarks.relevance_projection             # the table
    .venv/bin/python -m benchmarks.relevance_projection --epochs 20

The attention of the papers has learned projections (q = x W_q, k = x W_k); Attend's heads use
the encoder's embeddings as they are. Here W (d × d, from the identity) is fitted with in-batch
negatives (InfoNCE, temperature 1/20, both directions) on each book's (title key, description
key) pair, so that a short text finds the description it names: no label of the suite is used.
Then the description head alone ranks every search kind of the suite (names, subjects,
intents, authors) with q and with normalize(q W), side by side, and a held-out tenth of the
books says whether W fits titles beyond the ones it saw (title → description recall@1).
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys

import torch
import torch.nn.functional as F

from benchmarks.relevance import top
from benchmarks.relevance_authors import author_queries
from benchmarks.relevance_labels import judged_queries, score
from benchmarks.relevance_served import serve, suite_arguments

logger = logging.getLogger(__name__)
KINDS = ("names", "subjects", "intents", "authors")


def fit(t: torch.Tensor, d: torch.Tensor, *, epochs: int, seed: int = 0) -> torch.Tensor:
    """W (dim, dim) mapping title keys t (N, dim) towards their description keys d (N, dim)."""
    g = torch.Generator().manual_seed(seed)
    dim = t.shape[1]
    W = torch.eye(dim).requires_grad_(True)
    opt = torch.optim.Adam([W], lr=1e-3)
    for _ in range(epochs):
        for idx in torch.randperm(len(t), generator=g).split(256):
            q = F.normalize(t[idx] @ W, dim=-1)  # (b, dim)
            logits = 20.0 * q @ d[idx].T  # (b, b): the diagonal is the book's own description
            target = torch.arange(len(idx))
            loss = (F.cross_entropy(logits, target) + F.cross_entropy(logits.T, target)) / 2
            opt.zero_grad()
            loss.backward()
            opt.step()
    return W.detach()


def recall_at_1(
    t: torch.Tensor, d: torch.Tensor, rows: torch.Tensor, W: torch.Tensor | None
) -> float:
    """How often the title key of book `rows[i]` (t: (R, dim)) finds that book's description
    first among all of d (N, dim)."""
    q = t if W is None else F.normalize(t @ W, dim=-1)
    return float((q @ d.T).argmax(-1).eq(rows).float().mean())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    suite_arguments(parser)
    parser.add_argument("--epochs", type=int, default=10)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    served = serve(args.database_url, args.catalog)
    searcher, books = served.searcher, served.books
    index = searcher.index
    host = index.keys.key_rows(list(range(len(index))), ["title", "description"])  # (2, N, dim)
    t, d = host[0], host[1]
    queries = judged_queries(books, args.subjects) + [j for _, j in author_queries(books)]

    held = torch.randperm(len(t), generator=torch.Generator().manual_seed(1))[: len(t) // 10]
    seen = torch.ones(len(t), dtype=torch.bool)
    seen[held] = False
    W_seen = fit(t[seen], d[seen], epochs=args.epochs)
    W = fit(t, d, epochs=args.epochs)

    lines = [
        f"title → description recall@1 on {len(held)} held-out books: identity "
        f"{recall_at_1(t[held], d, held, None):.3f}, W fitted on the others "
        f"{recall_at_1(t[held], d, held, W_seen):.3f}",
        "",
        f"{'description head alone, nDCG@10':<34}" + "".join(f"{k:>10}" for k in KINDS),
    ]
    D = d.numpy()
    for name, proj in (("q (as served)", None), ("normalize(q W)", W)):
        cells = ""
        for kind in KINDS:
            qs = [q for q in queries if q.kind == kind]
            emb = searcher.encoder.encode([q.query for q in qs])  # (Q, dim)
            if proj is not None:
                emb = F.normalize(emb @ proj, dim=-1)
            ranked = top(emb.numpy() @ D.T, 100)
            cells += f"{statistics.fmean(score(qs, ranked).ndcg):>10.3f}"
        lines.append(f"{name:<34}{cells}")
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
