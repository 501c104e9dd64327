"""What the weights of similar books say, over the shared catalog's own books as the queries.

    .venv/bin/python -m benchmarks.similar_weights               # 600 books, the served scales
    .venv/bin/python -m benchmarks.similar_weights --books 300

Two tables. First, each field head's softmax with a book as the query (its title key, its
description key, its text as a BM25 query over the more-like-this index), at the scales
ATTEND_SIMILAR_HEAD_SCALES gives: the mean entropy over the catalog less the book, the median
and 90th-percentile peak, and the lexical scale that gives the lexical head the description
head's mean entropy (how the default was chosen: no head's peak sharper than the others' on
average, as a search's heads are calibrated). Second, `similar` as served (k = 10): the match
strength's quantiles, how many books are flagged `no_strong_match` (all, and standalone books:
no series, no other book by their principal authors), and the Spearman correlation of the
heaviest result's weight with its description cosine, the relation a reader reads the weight
by. The books are a seeded sample of the catalog; no label judges anything here.
"""

from __future__ import annotations

import argparse
import logging
import random
import statistics
import sys

import torch
from scipy.stats import spearmanr

from benchmarks._common import out
from benchmarks.relevance_books import Catalog
from benchmarks.relevance_served import serve, suite_arguments
from service.config.head_weights import LEXICAL, BookHeads
from service.engine import book_ranking
from service.engine.served_index import ServedIndex

FIELDS = ("title", "description")


def _entropy(logits: torch.Tensor) -> tuple[float, float]:
    """(entropy nats, peak) of softmax(logits) (n,)."""
    p = logits.double().softmax(-1)
    return float(-(p * p.clamp_min(1e-300).log()).sum()), float(p.max())


def head_table(index: ServedIndex, rows: list[int], scales: dict[str, float]) -> None:
    """Each field head's mean entropy and peaks over `rows` as the queries."""
    n = len(index)
    keys = {f: index.keys.key_rows(list(range(n)), [f])[0] for f in FIELDS}  # (N, d) each
    lexical = {r: torch.from_numpy(index.like_this.scores([r]))[0].double() for r in rows}
    got: dict[str, list[tuple[float, float]]] = {h: [] for h in (*FIELDS, LEXICAL)}
    for r in rows:
        others = torch.ones(n, dtype=torch.bool)
        others[r] = False
        for f in FIELDS:
            got[f].append(_entropy((keys[f] @ keys[f][r])[others] * scales[f]))
        s = lexical[r]
        got[LEXICAL].append(_entropy(s[others & (s > 0)] * scales[LEXICAL]))
    out("| head | scale | mean entropy (nats) | median peak | p90 peak |")
    out("| --- | ---: | ---: | ---: | ---: |")
    for h, v in got.items():
        peaks = sorted(p for _, p in v)
        mean = statistics.mean(e for e, _ in v)
        median, p90 = peaks[len(peaks) // 2], peaks[int(0.9 * (len(peaks) - 1))]
        out(f"| {h} | {scales[h]:g} | {mean:.2f} | {median:.3f} | {p90:.3f} |")
    target = statistics.mean(e for e, _ in got["description"])
    lo, hi = 0.01, 10.0  # the mean entropy falls as the scale rises: bisect on a log scale
    for _ in range(30):
        mid = (lo * hi) ** 0.5
        mean = statistics.mean(
            _entropy(s[(s > 0) & (torch.arange(n) != r)] * mid)[0] for r, s in lexical.items()
        )
        lo, hi = (mid, hi) if mean > target else (lo, mid)
    out(f"\nthe lexical scale at the description head's mean entropy ({target:.2f}): {lo:.2f}")


def similar_table(index: ServedIndex, catalog: Catalog, rows: list[int], heads: BookHeads) -> None:
    """The match strength of `similar` over `rows`, its flag, and the weight-cosine relation."""
    found = []
    for r in rows:
        got = book_ranking.similar(index, catalog.id(r), k=10, heads=heads)
        if got.results:
            top = max(got.results, key=lambda h: h.weight)
            found.append((r, got.match_strength, got.no_strong_match, top.weight, top.score))
    strengths = sorted(s for _, s, _, _, _ in found)
    at = [strengths[int(p * (len(strengths) - 1))] for p in (0.0, 0.1, 0.5, 0.9, 1.0)]
    alone = [f for f in found if catalog.standalone(f[0])]
    out(f"\nsimilar over {len(found)} books (k = 10):")
    out("match strength min / p10 / median / p90 / max: " + " / ".join(f"{s:.3f}" for s in at))
    out(
        f"no_strong_match: {sum(f[2] for f in found)} of {len(found)}; "
        f"standalone books {sum(f[2] for f in alone)} of {len(alone)}"
    )
    for name, sel in (("all", found), ("standalone", alone)):
        rho = spearmanr([f[4] for f in sel], [f[3] for f in sel]).statistic
        out(
            f"Spearman, the heaviest result's weight against its description cosine ({name}): "
            f"{rho:.3f}"
        )
    out("\nthe ten weakest (match strength, book → its heaviest result, description cosine):")
    for r, s, _, w, cos in sorted(found, key=lambda f: f[1])[:10]:
        out(f"  {s:.3f}  {catalog.books[r].title[:50]}  (weight {w:.4f}, cosine {cos:.2f})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    suite_arguments(parser)
    parser.add_argument("--books", type=int, default=600)
    parser.add_argument("--seed", type=int, default=5)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    served = serve(args.database_url, args.catalog)
    index, heads = served.searcher.index, served.settings.similar
    catalog = Catalog(served.books, args.subjects)
    rows = list(range(len(index)))
    random.Random(args.seed).shuffle(rows)
    rows = rows[: args.books]
    head_table(index, rows[: min(len(rows), 300)], dict(heads.scales))
    similar_table(index, catalog, rows, heads)
    served.searcher.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
