"""A search as a mixture of attention heads over the served index.

For query q (its embedding) and text t, with head weights π (rows summing to 1):

    p_title       = softmax(scale_title · q K_titleᵀ)
    p_description = softmax(scale_description · q K_descriptionᵀ)
    p_lexical     = softmax(scale_lexical · bm25(t))   over the books with a query term
    p_author      = softmax(scale_author · q K_descriptionᵀ)  over the books of the author t names
    weight        = Σ_h π_h p_h          a distribution over the books the filters keep

Every head is exact over the whole catalog: `models.mixture.mix_topk` runs `attend` per dense
head (chunked, with the filters as the mask) and recovers any candidate's p_h from its score and
the head's log-sum-exp, taking more candidates per head until the threshold bound proves the
mixture's top-k (see that module). The entropy of `weight` is a second chunked pass. The dense
heads come from the index's `KeyStore`: the keys in this process, or, on the sharded router, the
shards' answers merged exactly (service/cluster/shards/router.py); the lexical head is computed here
either way.

The author head is evidence of its own: a query that names an author of the catalog ("stephen
king", "books by toni morrison", "le guin"; service/engine/catalog_names.py) attends over that
author's books alone, ranked by the description keys, so "scary stephen king novels" finds King's
horror. A query about an author ("a biography of …") is the opposite case: the author head
abstains, and the author's own books are left out of the query's softmax (as a filter would
leave them out: `matched` counts the rest), since every head would otherwise find them first by
the name in their titles and descriptions. The response names the author and the intent.

A head without evidence abstains (service/engine/mixing.py): the lexical head for a query with no
term among the kept books, the author head for a query that names no author, the series head
always (a typed query names no series); its π goes to the others, and the response lists it with
weight 0 and `abstained`. A head with π = 0 in every row of a batch is not run.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace

import torch
from torch import Tensor

from indexer.filters import Filters
from models.local_heads import rows_kept
from service.config.head_weights import AUTHOR, DENSE_HEADS, HEADS, LEXICAL, SCORED_HEADS
from service.engine.catalog_names import NamedAuthor
from service.engine.mixing import HitParts
from service.engine.ranking import Component, rank
from service.engine.results import HeadPart
from service.engine.scored_heads import lexical_head, restricted_head, uniform
from service.engine.served_index import RANK_FIELD, ServedIndex


class Parts(Mapping[str, HeadPart]):
    """A hit's part of each head, made when first read (`HitParts.parts`): a sort or facets
    rank a thousand hits a query and show a page of them."""

    def __init__(self, hits: HitParts, b: int, r: int, author_score: float | None = None):
        """`author_score`: the author head's score to show for a book of it whose score was
        shifted for joined authors (`scored_heads.shared`): the hit's q·k with its description
        key, the head's score before the shift."""
        self._of: tuple[HitParts, int, int] | None = (hits, b, r)
        self._parts: dict[str, HeadPart] = {}
        self._author_score = author_score

    def _made(self) -> dict[str, HeadPart]:
        if self._of is not None:
            hits, b, r = self._of
            self._parts, self._of = hits.parts(b, r), None
            part = self._parts.get(AUTHOR)
            if self._author_score is not None and part is not None:
                self._parts[AUTHOR] = replace(part, score=self._author_score)
        return self._parts

    def __getitem__(self, head: str) -> HeadPart:
        return self._made()[head]

    def __iter__(self) -> Iterator[str]:
        return iter(self._made())

    def __len__(self) -> int:
        return len(self._made())


@dataclass(frozen=True)
class Hit:
    row: int
    score: float  # q·k with the description key (the value's key)
    weight: float  # Σ_h π_h p_h
    heads: Mapping[str, HeadPart]
    editions: tuple[int, ...] = ()  # rows of the work's other editions ranked below it


@dataclass(frozen=True)
class Ranking:
    hits: list[Hit]  # best first
    matched: int
    head_weights: dict[str, float]  # the π used (after an abstaining lexical head)
    abstained: tuple[str, ...]  # heads asked for that had no evidence (π set to 0)
    entropy: float | None  # nats, of `weight` over every matched book (None: not computed)
    rounds: int  # candidate rounds the exact top-k needed (the batch's)
    named: NamedAuthor | None = None  # the author the query names, if it names one
    # the highest title or description cosine of any book the filters keep (None: no dense
    # head of those weighed in): how like the query the nearest book is, whatever k
    nearest: float | None = None


def rank_queries(
    index: ServedIndex,
    q: Tensor,
    texts: Sequence[str],
    *,
    k: int,
    heads: Sequence[dict[str, float]],
    scales: Mapping[str, float],
    filters: Sequence[Filters] | None = None,
) -> list[Ranking]:
    """For each query (row of q (B, d), its text, its head weights and filters): the exact
    top k works of the heads' mixture (one slot a work, its best edition: `Hit.editions`
    lists the others), with every hit's per-head breakdown."""
    B = q.shape[0]
    if len(index) == 0:
        return [Ranking([], 0, dict(h), (), 0.0, 0) for h in heads]
    part = rows_kept(len(DENSE_HEADS), len(index))
    if part < B:  # in parts whose raw scores are kept: each part reads the keys once
        return [
            ranking
            for s in range(0, B, part)
            for ranking in rank_queries(
                index,
                q[s : s + part],
                texts[s : s + part],
                k=k,
                heads=heads[s : s + part],
                scales=scales,
                filters=None if filters is None else filters[s : s + part],
            )
        ]
    lexical = index.lexical
    named = [index.names.recognise(t, lexical.knows, lexical.holding) for t in texts]
    filters = [about(index, f, n) for f, n in zip(filters or [Filters()] * B, named, strict=True)]
    mask = index.filters.batch_mask(filters)
    ranked = rank(
        index,
        components(index, q, texts, named=named, heads=heads, scales=scales, mask=mask),
        k=min(len(index), 2 * k + 10),  # room for the editions that share a slot
        filters=filters,
        mask=mask,
        entropy=True,
    )
    mixed, mix = ranked.mixed, ranked.mix
    if RANK_FIELD in mixed.components:  # the description head's own scores, already exact
        desc = mix.scores[:, :, mixed.components.index(RANK_FIELD)]  # (B, k)
    else:
        desc = description_scores(index, q, mix.indices, filters=filters)
    assert mix.entropy is not None
    entropy, matched = mix.entropy.tolist(), mix.matched.tolist()
    hits = HitParts(mix, mixed.components, mixed.used)
    descs, weights = desc.tolist(), mix.weights.tolist()
    works = index.names.works
    nearest = nearest_cosines(mix.best, mixed.components, mixed.used)

    def one_slot(b: int) -> list[Hit]:
        if not mixed.answered[b]:
            return []  # every head it asked for abstained (service/engine/mixing.py)
        at = dict(hits.rows[b])
        slots = works.one_slot(row for row, _ in hits.rows[b])[:k]
        author = named[b]
        # the author head's rows, where its scores were shifted for joined authors
        shifted = set(author.attended()) if author and len(author.parts) > 1 else set()
        return [
            Hit(
                row,
                descs[b][at[row]],
                weights[b][at[row]],
                Parts(hits, b, at[row], descs[b][at[row]] if row in shifted else None),
                tuple(below),
            )
            for row, below in slots
        ]

    return [
        Ranking(
            one_slot(b),
            int(matched[b]),
            mixed.used[b],
            mixed.abstained[b],
            entropy[b],
            mix.rounds,
            named[b],
            nearest[b],
        )
        for b in range(B)
    ]


def nearest_cosines(
    best: Tensor | None, heads: Sequence[str], used: Sequence[Mapping[str, float]]
) -> list[float | None]:
    """Per query, the highest best score (`best` (B, Hd), the dense heads' columns being the
    first of `heads`) of the title and description heads it weighs (`used`: its π by head),
    None where it weighs neither or its filters keep no book. Its own heads only: a head
    another query of the batch weighs is in the batch's mixture, not in this query's answer."""
    if best is None:
        return [None] * len(used)
    dense = [(c, h) for c, h in enumerate(heads[: best.shape[1]]) if h in DENSE_HEADS]
    out: list[float | None] = []
    for row, pi in zip(best.tolist(), used, strict=True):
        top = max((row[c] for c, h in dense if pi.get(h, 0) > 0), default=-math.inf)
        out.append(top if math.isfinite(top) else None)
    return out


def components(
    index: ServedIndex,
    q: Tensor,
    texts: Sequence[str],
    *,
    named: Sequence[NamedAuthor | None],
    heads: Sequence[dict[str, float]],
    scales: Mapping[str, float],
    mask: Tensor | None,
) -> list[Component]:
    """A search batch's components: each head some query asks for, in HEADS order (the dense
    ones first); the lexical head with the query's BM25 scores, the author head over the books
    of the author a query names "by" (none: no evidence)."""
    B, N = q.shape[0], len(index)
    out = []
    for h in HEADS:
        asked = [w.get(h, 0.0) for w in heads]
        if not any(v > 0 for v in asked):
            continue
        if h not in SCORED_HEADS:
            out.append(Component(h, scales[h], asked, query=q))
            continue
        head, evidence = uniform(B, N, scales[h]), [False] * B
        if h == LEXICAL:
            scores = torch.from_numpy(index.lexical.scores(list(texts)))  # (B, N)
            head, evidence = lexical_head(scores, scales[h], mask)
        # an author's own books where they have any, else every book crediting them (a
        # foreword writer's): "scary stephen king novels" is King's horror before anthologies
        # of eighteen writers that include a King story; each author a query joins ("king or
        # koontz") holds an equal share of the head
        by = [n if n is not None and n.intent == "by" else None for n in named]
        if h == AUTHOR and any(by):
            rows = [n.attended() if n else [] for n in by]
            parts = [n.parts if n else () for n in by]
            head, evidence = restricted_head(index, q, rows, scales[h], mask, parts=parts)
        out.append(Component(h, scales[h], asked, scored=head, evidence=evidence))
    return out


def about(index: ServedIndex, filters: Filters, named: NamedAuthor | None) -> Filters:
    """A query about an author ("a biography of …") leaves the author's own books out: every
    head would otherwise find them first, by the name in their titles and descriptions."""
    if named is None or named.intent != "about":
        return filters
    own = frozenset(index.books.ids[r] for r in named.rows)
    return replace(filters, exclude=filters.exclude | own)


def description_scores(
    index: ServedIndex, q: Tensor, rows: Tensor, *, filters: Sequence[Filters]
) -> Tensor:
    """q·k with each hit's description key (B, k) float32, from wherever the keys are (the
    shards: one more round trip); −inf for padding. q: (B, d), or (1, B, d)."""
    dense = index.keys.dense_heads(q, [(RANK_FIELD, 1.0)], filters=filters, mask=None)
    s = dense.scores(rows)[:, :, 0].float()
    return torch.where(rows >= 0, s, -math.inf)
