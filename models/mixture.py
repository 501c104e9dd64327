"""Exact top-k of a mixture of attention heads: weight_i = Σ_h π_h · softmax_h(i).

Each head h is its own softmax over the same N books: a dense head has logits scale_h · q_h K_hᵀ
(any keys, any query), a scored head has logits scale_h · s_h for scores already computed for
every book (BM25). A book's weight is additive over heads, so π_h · p_h(i) is head h's share of
it, and the shares sum to the weight.

Top-k without holding (B, N): each dense head runs `attend` (chunked) for its top k' books and
its log-sum-exp. A book outside head h's top k' has p_h ≤ t_h, that head's k'-th weight, so a
book in no head's list weighs at most Σ_h π_h t_h (Fagin's threshold algorithm). Every candidate
(the union of the lists) gets its exact p_h from its score and lse_h; when the k-th best exact
candidate weight reaches the bound, the top-k is exact. Otherwise k' is quadrupled and the
heads rerun, until k' covers the catalog. With k' = 4k this almost always ends in one round.

The dense heads' work is three operations on their keys, behind `models.heads.DenseHeads`: each
head's top k' with its log-sum-exp, the raw scores of given rows, and one chunked pass that gives
the candidates' scores and the mixture's entropy; in this process (`LocalDenseHeads`) or on a
cluster's shards (service/cluster/shards/). `mix_topk` is the threshold loop without its I/O: a
generator that yields what it needs of the dense heads (`TopAsk`, `ScoresAsk`, `SweepAsk`) and is
sent the answers, so this module never calls the code that holds the keys, wherever that is; the
caller answers each ask (service/engine/ranking.py `run_mixture`).
"""

from __future__ import annotations

import math
from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import cast

import torch
from torch import Tensor

from models.candidates import (
    check_heads,
    exact_in_lists,
    scored_top,
    top_by_row,
    union,
    with_scored,
)
from models.heads import ScoredHead, TopLists


@dataclass(frozen=True)
class Mixture:
    """Top-k of the mixture for B rows and H heads; padding: index −1, weight 0."""

    indices: Tensor  # (B, k) int64, best first
    weights: Tensor  # (B, k) float64 Σ_h π_h p_h(i)
    shares: Tensor  # (B, k, H) float64 π_h p_h(i): sums to the weight over h
    probs: Tensor  # (B, k, H) float64 p_h(i): the book's weight in head h alone
    scores: Tensor  # (B, k, H) float32 each head's raw score (q·k, or the given score)
    logsumexp: Tensor  # (B, H) float64 per head over the unmasked books
    matched: Tensor  # (B,) int64 unmasked books
    entropy: Tensor | None  # (B,) float64 −Σ w log w over every unmasked book, when asked
    rounds: int  # how many candidate rounds the threshold needed


# Weights closer than this (relative) are a tie at the cut of the top k: above float32's 6e-8,
# the precision the weights are ordered at, and the ~1e-7 a batch's products move them by.
TIE_MARGIN = 1e-6


@dataclass(frozen=True)
class TopAsk:
    """Ask the dense heads for each head's top k rows and its log-sum-exp
    (`DenseHeads.top(k)` → (TopLists, (B, Hd) float64))."""

    k: int


@dataclass(frozen=True)
class ScoresAsk:
    """Ask for the raw scores of the candidates (`DenseHeads.scores(cand)` → (B, C, Hd))."""

    cand: Tensor  # (B, C) rows, −1 padded


@dataclass(frozen=True)
class SweepAsk:
    """Ask for one pass over every row (`DenseHeads.sweep(...)` → the candidates' scores
    (B, C, Hd) and the entropy (B,))."""

    pi: Tensor  # (B, H)
    lse: Tensor  # (B, H)
    cand: Tensor  # (B, C)
    scored: Sequence[ScoredHead]


Ask = TopAsk | ScoresAsk | SweepAsk
Answer = tuple[TopLists, Tensor] | Tensor | tuple[Tensor, Tensor]
MixSteps = Generator[Ask, Answer | None, "Mixture"]  # sent None first, then each answer


def mix_topk(
    scales: Sequence[float],
    size: int,
    scored: Sequence[ScoredHead],
    pi: Tensor,
    *,
    k: int,
    mask: Tensor | None = None,
    entropy: bool = False,
) -> MixSteps:
    """The exact top-k books of Σ_h π_h softmax_h, π (B, Hd + Hs) with rows summing to 1: the
    dense heads (one scale each, over `size` rows) first, then the scored heads. A generator: it
    yields what it needs of the dense heads and is sent each answer; it returns the `Mixture`.

    `mask` is the one the dense heads apply, over the whole catalog: the scored heads, the
    candidates and the matched counts need it here too.
    """
    check_heads(scales, size, scored, pi)
    B, H = pi.shape
    Hd, N = len(scales), size
    pi = pi.double().cpu()
    mask = None if mask is None else mask.to(dtype=torch.bool)
    kk = min(N, max(4 * k, k + 16))
    rounds = 0
    ent = None
    while True:
        rounds += 1
        top: TopLists = []
        lse = torch.empty(B, 0, dtype=torch.float64)
        if Hd:
            top, lse = cast(tuple[TopLists, Tensor], (yield TopAsk(kk)))
        if scored:
            top_s, lse_s = scored_top(scored, k=kk, mask=mask)
            top, lse = top + top_s, torch.cat([lse, lse_s], dim=1)
        cand = union(top)  # (B, C)
        if entropy and ent is None:
            # one more pass over the keys, which the entropy needs anyway, also yields the
            # candidates' scores: cheaper than gathering their scattered keys
            scores, ent = cast(tuple[Tensor, Tensor], (yield SweepAsk(pi, lse, cand, scored)))
            # −Σ w log w ≥ 0, but a mixture peaked on one book has w ≈ 1 + ε there, which
            # rounds it to −ε (−2e-6 seen): a negative entropy is rounding, and is 0
            ent = ent.clamp_min(0.0)
        elif Hd:
            scores = cast(Tensor, (yield ScoresAsk(cand)))
        else:
            scores = torch.empty(B, cand.shape[1], 0, dtype=torch.float64)
        scores = with_scored(scores, scored, cand)  # (B, C, H)
        exact_in_lists(scores, cand, top[:Hd])
        logp = _candidate_logp([*scales, *(h.scale for h in scored)], scores, cand, lse, mask)
        probs = logp.exp()
        w = (probs * pi[:, None, :]).sum(-1)  # (B, C)
        w = torch.where(cand >= 0, w, -1.0)
        pos = top_by_row(w, min(k, w.shape[1]))  # (B, k)
        best_w = w.gather(1, pos)  # (B, k)
        # bound on any book outside every list: Σ π_h · (k'-th weight of head h)
        # (a head whose list holds every unmasked book ends in padding of weight 0)
        tail = torch.stack([weights[:, -1] for _, weights, _ in top], dim=1)  # (B, H)
        bound = (pi * tail).sum(-1)  # (B,)
        kth = best_w.amin(-1) if best_w.shape[1] == k else torch.zeros(B, dtype=torch.float64)
        # complete when the k-th is clearly above any book outside the lists: one tied with it
        # (within TIE_MARGIN) might sort before it by row, and the lists' own tie order is
        # arbitrary, so a tie at the cut takes one more round; a bound of 0 leaves none outside
        if kk >= N or bool(((kth > bound * (1 + TIE_MARGIN)) | (bound <= 0)).all()):
            break
        kk = min(N, 4 * kk)
    found = best_w > 0
    if mask is None:
        matched = torch.full((B,), N, dtype=torch.long)
    else:
        matched = mask.cpu().sum(-1).expand(B) if mask.dim() == 1 else mask.cpu().sum(-1)
    idx = torch.where(found, cand.gather(1, pos), -1)
    sel = pos[:, :, None].expand(-1, -1, H)
    p_sel = torch.where(found[:, :, None], probs.gather(1, sel), 0.0)
    return Mixture(
        indices=idx,
        weights=torch.where(found, best_w, 0.0),
        shares=p_sel * pi[:, None, :],
        probs=p_sel,
        scores=torch.where(found[:, :, None], scores.gather(1, sel), -math.inf).float(),
        logsumexp=lse,
        matched=matched,
        entropy=ent,
        rounds=rounds,
    )


def _candidate_logp(
    scales: Sequence[float], scores: Tensor, cand: Tensor, lse: Tensor, mask: Tensor | None
) -> Tensor:
    """Exact log p_h (B, C, H) float64 of each candidate from its raw scores (B, C, H)."""
    scale = torch.tensor(scales, dtype=torch.float64)  # (H,)
    logp = scores * scale - lse[:, None, :]
    dead = cand < 0
    if mask is not None:
        m = mask.cpu()
        safe = cand.clamp_min(0)
        dead |= ~(m[safe] if m.dim() == 1 else m.gather(1, safe))
    return logp.masked_fill(dead[:, :, None], -math.inf)
