"""A search as a mixture of attention heads over the served index.

For query q (its embedding) and text t, with head weights π (rows summing to 1):

    p_title       = softmax(scale_title · q K_titleᵀ)
    p_description = softmax(scale_description · q K_descriptionᵀ)
    p_lexical     = softmax(scale_lexical · bm25(t))   over the books with a query term
    weight        = Σ_h π_h p_h          a distribution over the books the filters keep

Every head is exact over the whole catalog: `models.mixture.mix_topk` runs `attend` per dense
head (chunked, with the filters as the mask) and recovers any candidate's p_h from its score and
the head's log-sum-exp, taking more candidates per head until the threshold bound proves the
mixture's top-k (see that module). The entropy of `weight` is a second chunked pass. The dense
heads come from the index's `KeyStore`: the keys in this process, or, on the sharded router, the
shards' answers merged exactly (service/cluster/router.py); the lexical head is computed here
either way.

A query with no term in the catalog's BM25 vocabulary among the kept books gives the lexical head
no evidence: it abstains (its π goes to 0 and the others are renormalised) rather than spreading
π_lexical uniformly over the catalog; the response lists it with weight 0 and `abstained`. A
head with π = 0 in every row of a batch is not run.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from models.heads import ScoredHead
from models.mixture import mix_topk
from service.engine.filters import Filters
from service.engine.head_weights import HEADS, LEXICAL
from service.engine.results import HeadPart
from service.engine.served_index import RANK_FIELD, ServedIndex


@dataclass(frozen=True)
class Hit:
    row: int
    score: float  # q·k with the description key (the value's key)
    weight: float  # Σ_h π_h p_h
    heads: dict[str, HeadPart]


@dataclass(frozen=True)
class Ranking:
    hits: list[Hit]  # best first
    matched: int
    head_weights: dict[str, float]  # the π used (after an abstaining lexical head)
    abstained: tuple[str, ...]  # heads asked for that had no evidence (π set to 0)
    entropy: float | None  # nats, of `weight` over every matched book (None: not computed)
    rounds: int  # candidate rounds the exact top-k needed (the batch's)


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
    top k of the heads' mixture, with every hit's per-head breakdown."""
    B = q.shape[0]
    if len(index) == 0:
        return [Ranking([], 0, dict(h), (), 0.0, 0) for h in heads]
    filters = list(filters or [Filters()] * B)
    mask = index.filters.batch_mask(filters)
    # HEADS order: the dense heads first, as mix_topk takes them
    names = [h for h in HEADS if any(w.get(h, 0) > 0 for w in heads)]
    pi = torch.tensor([[w.get(h, 0.0) for h in names] for w in heads], dtype=torch.float64)
    q = q.to(index.device)
    scored: list[ScoredHead] = []
    if LEXICAL in names:
        j = names.index(LEXICAL)
        scores = torch.from_numpy(index.lexical.scores(list(texts)))  # (B, N)
        kept = scores if mask is None else scores * mask.cpu()
        evidence = (kept > 0).any(-1)  # (B,)
        pi[:, j] *= evidence  # abstain without evidence
        # the softmax runs over the books with evidence (a query term): a book without any
        # has BM25 0 by construction, not a likelihood, so it gets p_lexical = 0; a row with
        # no evidence at all keeps every book (uniform) in case lexical is all it asked for
        no_term = (scores <= 0) & evidence[:, None]
        scored.append(ScoredHead(scores.masked_fill(no_term, -math.inf), scales[LEXICAL]))
    total = pi.sum(-1, keepdim=True)
    pi = _restore_empty_rows(pi / total.clamp_min(1e-300), heads, names)
    fields = [(name, scales[name]) for name in names if name != LEXICAL]
    dense = index.keys.dense_heads(q, fields, filters=filters, mask=mask)
    mix = mix_topk(dense, scored, pi, k=k, mask=mask, entropy=True)
    if RANK_FIELD in names:  # the description head's own scores, already exact
        desc = mix.scores[:, :, names.index(RANK_FIELD)]  # (B, k)
    else:
        desc = description_scores(index, q, mix.indices, filters=filters)
    # plain lists once: indexing tensors element by element costs more than the search
    rows, weights, descs = mix.indices.tolist(), mix.weights.tolist(), desc.tolist()
    raw, probs, shares = mix.scores.tolist(), mix.probs.tolist(), mix.shares.tolist()
    matched, head_pi = mix.matched.tolist(), pi.tolist()
    assert mix.entropy is not None
    entropy = mix.entropy.tolist()
    out = []
    for b in range(B):
        used = {h: head_pi[b][j] for j, h in enumerate(names) if head_pi[b][j] > 0}
        silent = tuple(h for h in names if h not in used and heads[b].get(h, 0) > 0)
        hits = []
        for r, row in enumerate(rows[b]):
            if row < 0:
                continue
            parts = {
                h: HeadPart(
                    score=max(0.0, raw[b][r][j]) if h == LEXICAL else raw[b][r][j],
                    probability=probs[b][r][j],
                    share=shares[b][r][j],
                )
                for j, h in enumerate(names)
                if h in used
            }
            hits.append(Hit(row, descs[b][r], weights[b][r], parts))
        out.append(Ranking(hits, int(matched[b]), used, silent, entropy[b], mix.rounds))
    return out


def _restore_empty_rows(pi: Tensor, heads: Sequence[dict[str, float]], names: list[str]) -> Tensor:
    """Rows left with no head (only an abstaining lexical head asked for) get their π back:
    the lexical head is then uniform over the matched books, which is the honest answer."""
    asked = torch.tensor([[w.get(h, 0.0) for h in names] for w in heads], dtype=torch.float64)
    empty = pi.sum(-1, keepdim=True) <= 0
    return torch.where(empty, asked, pi)


def description_scores(
    index: ServedIndex, q: Tensor, rows: Tensor, *, filters: Sequence[Filters]
) -> Tensor:
    """q·k with each hit's description key (B, k) float32, from wherever the keys are (the
    shards: one more round trip); −inf for padding. q: (B, d), or (1, B, d)."""
    dense = index.keys.dense_heads(q, [(RANK_FIELD, 1.0)], filters=filters, mask=None)
    s = dense.scores(rows)[:, :, 0].float()
    return torch.where(rows >= 0, s, -math.inf)
