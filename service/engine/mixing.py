"""The mixture weights π of a ranking, after the heads without evidence abstain, and a ranking's
hits with their per-head parts: one rule for a typed query and for books as the query.

A mixture has components, each a head asked by a query: for a search, one per head; for
similar books and recommendations, one per (liked book, head). Component c of query b asks for
weight a[b, c]; it gets π[b, c] = a[b, c] · evidence[b, c], renormalised over the query's
components. A head **abstains** for a query when none of its components has evidence (a lexical
head with no query term among the kept books, an author head for a query that names no author,
a series head for a book of no series): its π goes to the other heads, and the response lists it
with weight 0 and `abstained`. A query left with no component at all (it asked only for heads
that abstain: `heads=author:1` for a query that names no author) is not answered: every head
it asked for is listed as abstained and it gets no results (a ranking of books in catalog
order, uniform weights, would claim evidence there is none of). Its asked weights still go
into π, so that the batch it is in runs as one.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from models.mixture import Mixture
from service.config.head_weights import HEADS, LEXICAL, SCORED_HEADS
from service.engine.results import HeadPart

# "No strong match": match strength (see `match_strength`) under this. A search is also flagged
# when no word of the query is in any book. Re-checked on benchmarks/relevance.py under the
# default heads: of 221 labelled and subject queries, one is under 0.55 (0.54) and one has no
# word in the catalog ("regicide"); of its six nonsense queries, one is under 0.55 and five have
# no word in the catalog. The strength alone does not separate them (nonsense reaches 0.71: a
# sentence embedding always finds a nearest book), the vocabulary does.
NO_STRONG_MATCH_BELOW = 0.55


def match_strength(top_weight: float, matched: int) -> float:
    """log(top_weight · matched) / log(matched), in [0, 1]: 0 when the top book weighs what a
    uniform distribution gives every book (1/matched), 1 when it has all the weight. On a log
    scale, so one threshold means the same on 180 books and on 5 million."""
    if matched <= 1:
        return 1.0 if matched == 1 else 0.0
    return max(0.0, math.log(max(top_weight * matched, 1e-300)) / math.log(matched))


@dataclass(frozen=True)
class Mixed:
    """π over a ranking's components, and what each query used of its heads."""

    components: list[str]  # the head of each column of pi that weighs in some query
    columns: list[int]  # each kept column's index among the components asked
    pi: Tensor  # (B, C) float64, rows summing to 1
    used: list[dict[str, float]]  # per query: head → its π (summed over its components)
    abstained: list[tuple[str, ...]]  # per query: heads asked for that got no π
    answered: list[bool]  # per query: whether a head it asked for has evidence

    @classmethod
    def of(cls, asked: Tensor, evidence: Tensor, heads: Sequence[str]) -> Mixed:
        """asked (B, C) the weights components ask for, evidence (B, C) bool, heads: the head of
        each component. Columns no query weighs are dropped."""
        pi = asked * evidence
        empty = pi.sum(-1, keepdim=True) <= 0  # (B, 1)
        pi = torch.where(empty, asked, pi)
        pi = pi / pi.sum(-1, keepdim=True).clamp_min(1e-300)
        columns = [c for c in range(pi.shape[1]) if bool((pi[:, c] > 0).any())]
        used: list[dict[str, float]] = []
        abstained: list[tuple[str, ...]] = []
        answered = (~empty[:, 0]).tolist()
        for row, want, ok in zip(pi.tolist(), asked.tolist(), answered, strict=True):
            got: dict[str, float] = {}
            for h, w in zip(heads, row, strict=True):
                if w > 0 and ok:
                    got[h] = got.get(h, 0.0) + w
            wanted = {h for h, w in zip(heads, want, strict=True) if w > 0}
            used.append({h: got[h] for h in HEADS if h in got})
            abstained.append(tuple(h for h in HEADS if h in wanted and h not in got))
        return cls([heads[c] for c in columns], columns, pi[:, columns], used, abstained, answered)


class HitParts:
    """A ranking's hits: per query, each hit's row and where it is in the mixture, and, asked
    for one hit at a time, its part of each head the query used (`heads`: one component per
    head; a scored head's −inf score, a book it leaves out, is shown as 0). The parts are made
    for the hits a page shows, not for every hit ranked (a sort's or facets' thousand)."""

    def __init__(self, mix: Mixture, heads: Sequence[str], used: Sequence[dict[str, float]]):
        if len(set(heads)) != len(heads):
            raise ValueError(f"one component per head, got {list(heads)}")
        self.heads, self.used = list(heads), used
        # (B, K, H) float64 on the host: a hit's parts are one row of each
        self._raw, self._probs, self._shares = (
            t.detach().cpu().double().numpy() for t in (mix.scores, mix.probs, mix.shares)
        )
        self.rows = [
            [(row, r) for r, row in enumerate(hits) if row >= 0] for hits in mix.indices.tolist()
        ]  # per query: (row, its place in the mixture's lists)

    def parts(self, b: int, r: int) -> dict[str, HeadPart]:
        """Query b's hit at place r: its part of each head the query used."""
        raw, probs = self._raw[b, r].tolist(), self._probs[b, r].tolist()
        shares = self._shares[b, r].tolist()
        return {
            h: HeadPart(shown(h, raw[j]), probs[j], shares[j])
            for j, h in enumerate(self.heads)
            if h in self.used[b]
        }


def hit_parts(
    mix: Mixture, heads: Sequence[str], used: Sequence[dict[str, float]]
) -> list[list[tuple[int, dict[str, HeadPart]]]]:
    """Per query, each hit's row and its part of each head the query used (`HitParts`, every
    hit's made)."""
    made = HitParts(mix, heads, used)
    return [[(row, made.parts(b, r)) for row, r in rows] for b, rows in enumerate(made.rows)]


def shown(head: str, score: float) -> float:
    """A head's raw score as a response shows it: a scored head's −inf (the book is not in
    it) and a lexical score's clamp are 0 (BM25 is never negative but for a dislike's shift)."""
    if head not in SCORED_HEADS:
        return score
    if head == LEXICAL:
        return max(0.0, score)
    return score if score > -math.inf else 0.0
