"""Exact top-k of a rank fusion of attention heads: the books ordered by
f_i = Σ_h π_h c_h(i) / Z, with c_h(i) = 1 / (k₀ + rank_h(i)) for the books in head h's top
`depth`, 0 beyond it; each book weighed by the heads' attention, w_i = Σ_h π_h p_h(i).

Why order by rank and not by the mixture w (models/mixture.py): a softmax's peak follows its
head's spread, not its weight. One title head that finds a single near-identical title ("The
Glass Castle" → "Glass House", p = 0.99) outweighs every flat head however small its π. Ranks
know nothing of a head's spread, so no single head's peak decides the order: a book's place is
what each head's ordering of the catalog says of it, in proportion to π. This is reciprocal-rank
fusion (Cormack et al. 2009, k₀ = 60), weighted.

Why weigh by the mixture and not by f: f depends on the ranks alone (a book first in every head
gets the same f whatever it is), so it cannot tell a near-duplicate from a weak match. The
weight shown is attention: p_h(i) = softmax(scale_h · s_h)_i over the whole catalog, each head
exact, and w sums to 1 over the catalog. π_h p_h(i) is head h's share of it, and the shares sum
to the weight. The order is f's, so the weights of the hits need not fall down the list;
`top_weight` is the largest weight of the books the heads list (their union holds every book
that weighs more than Σ_h π_h p_h of head h's `depth`-th).

A prior over the books, log ρ(i) (B, N) or (N,), may weigh each book's fused evidence in the
order: f_i ∝ ρ(i) Σ_h π_h c_h(i), Bayes' p(i | q) ∝ p(q | i) p(i) with the fusion as the
likelihood. It only reorders the books some head lists (a book in no list still gets 0); the
weights are the heads' attention, which the prior does not enter.

Each head h is scaled dot-product attention over the whole catalog (a dense head's logits
scale_h · q_h K_hᵀ, a scored head's scale_h · s_h): its top `depth` are exact, and so are its
ranks and, from its log-sum-exp, each candidate's p_h.

One round, through the same asks as the mixture (`TopAsk`, then `ScoresAsk` for the
candidates' raw scores, or `SweepAsk` where the entropy of the weights is asked): the caller
answers them wherever the keys are (service/engine/ranking.py `run_mixture`), and every
candidate's ranks come from the lists themselves.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import torch
from torch import Tensor

from models.candidates import (
    check_heads,
    exact_in_lists,
    list_positions,
    scored_top,
    top_by_row,
    union,
    with_scored,
)
from models.heads import ScoredHead, TopLists
from models.mixture import MixSteps, Mixture, ScoresAsk, SweepAsk, TopAsk, candidate_logp

RRF_K = 60  # k₀: Cormack et al.'s constant, and the reader's own RRF's
DEPTH = 1000  # each head's list: a book past a head's 1,000th place gets nothing from it


def fuse_ranks(
    scales: Sequence[float],
    size: int,
    scored: Sequence[ScoredHead],
    pi: Tensor,
    *,
    k: int,
    mask: Tensor | None = None,
    entropy: bool = False,
    depth: int = DEPTH,
    k0: float = RRF_K,
    log_prior: Tensor | None = None,
) -> MixSteps:
    """The exact top-k books of the rank fusion above, π (B, Hd + Hs) with rows summing to 1:
    the dense heads (one scale each, over `size` rows) first, then the scored heads. A
    generator like `models.mixture.mix_topk`, and returns the same `Mixture` (its `logsumexp`
    is each head's, its weights and `entropy` the mixture's, as there), ordered by f (its
    `order`); `log_prior` (N,) or (B, N), the books' log ρ above (None: uniform)."""
    check_heads(scales, size, scored, pi)
    B, H = pi.shape
    Hd = len(scales)
    pi = pi.double().cpu()
    mask = None if mask is None else mask.to(dtype=torch.bool)
    kk = min(size, max(depth, k))
    top: TopLists = []
    lse = torch.empty(B, 0, dtype=torch.float64)
    if Hd:
        top, lse = cast(tuple[TopLists, Tensor], (yield TopAsk(kk)))
    if scored:
        top_s, lse_s = scored_top(scored, k=kk, mask=mask)
        top, lse = top + top_s, torch.cat([lse, lse_s], dim=1)
    cand = union(top)  # (B, C)
    ent = None
    if entropy:  # one pass over the rows: the candidates' scores, and the weights' entropy
        scores, ent = cast(tuple[Tensor, Tensor], (yield SweepAsk(pi, lse, cand, scored)))
        ent = ent.clamp_min(0.0)  # −ε is rounding of a weight ≈ 1 (models/mixture.py)
    elif Hd:
        scores = cast(Tensor, (yield ScoresAsk(cand)))
    else:
        scores = torch.empty(B, cand.shape[1], 0, dtype=torch.float64)
    scores = with_scored(scores, scored, cand)  # (B, C, H)
    exact_in_lists(scores, cand, top[:Hd])
    scale = [*scales, *(h.scale for h in scored)]
    probs = candidate_logp(scale, scores, cand, lse, mask).exp()  # (B, C, H) exact p_h
    shares = probs * pi[:, None, :]  # (B, C, H): π_h p_h, summing to the weight
    w = torch.where(cand >= 0, shares.sum(-1), -1.0)  # (B, C) Σ_h π_h p_h
    fused = (reciprocal_ranks(cand, top, k0) * pi[:, None, :]).sum(-1)  # (B, C)
    if log_prior is not None:
        fused = fused * prior_at(log_prior, cand)
    fused = fused / fused.sum(1, keepdim=True).clamp_min(1e-300)
    fused = torch.where(cand >= 0, fused, -1.0)
    pos = top_by_row(fused, min(k, fused.shape[1]))  # (B, k)
    found = fused.gather(1, pos) > 0
    if mask is None:
        matched = torch.full((B,), size, dtype=torch.long)
    else:
        matched = mask.cpu().sum(-1).expand(B) if mask.dim() == 1 else mask.cpu().sum(-1)
    sel = pos[:, :, None].expand(-1, -1, H)
    return Mixture(
        indices=torch.where(found, cand.gather(1, pos), -1),
        weights=torch.where(found, w.gather(1, pos), 0.0),
        shares=torch.where(found[:, :, None], shares.gather(1, sel), 0.0),
        probs=torch.where(found[:, :, None], probs.gather(1, sel), 0.0),
        scores=torch.where(found[:, :, None], scores.gather(1, sel), -torch.inf).float(),
        logsumexp=lse,
        matched=matched,
        entropy=ent,
        rounds=1,
        order=torch.where(found, fused.gather(1, pos), 0.0),
        top_weight=w.amax(1).clamp_min(0.0),
    )


def prior_at(log_prior: Tensor, cand: Tensor) -> Tensor:
    """(B, C) float64 ρ(i) of each candidate, divided by its row's largest so it
    never overflows (the weights are normalised after); 0 at the −1 padding."""
    B = cand.shape[0]
    lp = log_prior.double().cpu().expand(B, -1)  # (B, N)
    at = lp.gather(1, cand.clamp_min(0))  # (B, C)
    at = torch.where(cand >= 0, at, -torch.inf)
    return (at - at.amax(1, keepdim=True).clamp_min(-1e300)).exp()


def reciprocal_ranks(cand: Tensor, top: TopLists, k0: float) -> Tensor:
    """(B, C, H) float64: 1 / (k₀ + rank) of each candidate in each head's list, 0 where the
    list does not hold it. cand (B, C) ascending, −1 padded (`union`'s). A list is best first;
    books of equal score share the best rank of their tie (1 + the books scored above), so the
    order a list gives its ties (a shard's merge, a batch) moves no weight."""
    B, C = cand.shape
    out = torch.zeros(B, C, len(top), dtype=torch.float64)
    for h, (idx, _, exact) in enumerate(top):
        # (B, k) 1-based competition ranks: the first place in the list with the same score
        s = torch.where(idx >= 0, -exact, torch.inf).contiguous()  # ascending
        rank = torch.searchsorted(s, s, side="left") + 1
        b, j, c = list_positions(cand, idx)
        out[b, c, h] = 1.0 / (k0 + rank[b, j].double())
    return out
