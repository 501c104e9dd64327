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
heads rerun for the queries not yet settled (a batch's others are done), until k' covers the
catalog. With k' = 4k this almost always ends in one round.

The dense heads' work is three operations on their keys, behind `models.heads.DenseHeads`: each
head's top k' with its log-sum-exp, the raw scores of given rows, and one pass that gives the
candidates' scores and the mixture's entropy, for the whole batch or (`DenseHeads.rows`) the
queries a further round is for; in this process (models/local_heads.py) or on a cluster's
shards (service/cluster/shards/). `mix_topk` is the threshold loop without its I/O: a
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
    # Where another score ordered the hits (the rank fusion, models/rank_fusion.py): its value
    # of each hit (B, k), and each query's largest weight (B,). None: the weights ordered them.
    order: Tensor | None = None
    top_weight: Tensor | None = None
    # (B, Hd) float64: each dense head's highest exact raw score over the unmasked books (the
    # first of its list; −inf where it has none), whatever k: how close the nearest book is
    best: Tensor | None = None


# Weights closer than this (relative) are a tie at the cut of the top k: above float32's 6e-8,
# the precision the weights are ordered at, and the ~1e-7 a batch's products move them by.
TIE_MARGIN = 1e-6


@dataclass(frozen=True)
class TopAsk:
    """Ask the dense heads for each head's top k rows and its log-sum-exp
    (`DenseHeads.top(k)` → (TopLists, (B, Hd) float64)), for the queries `rows` of the batch
    (None: all of them; else `DenseHeads.rows(rows)` answers)."""

    k: int
    rows: Tensor | None = None  # (R,) int64, ascending


@dataclass(frozen=True)
class ScoresAsk:
    """Ask for the raw scores of the candidates (`DenseHeads.scores(cand)` → (R, C, Hd)), for
    the queries `rows` as `TopAsk`'s."""

    cand: Tensor  # (R, C) rows, −1 padded
    rows: Tensor | None = None


@dataclass(frozen=True)
class SweepAsk:
    """Ask for one pass over every row (`DenseHeads.sweep(...)` → the candidates' scores
    (B, C, Hd) and the entropy (B,)), for the whole batch."""

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
    candidates and the matched counts need it here too. A query whose top k the first round
    proves is done: a further round asks for the other queries' rows alone, so one query of a
    batch that needs a deeper list does not make the whole batch read the catalog again.
    """
    check_heads(scales, size, scored, pi)
    B = pi.shape[0]
    Hd, N = len(scales), size
    pi = pi.double().cpu()
    mask = None if mask is None else mask.to(dtype=torch.bool)
    kk = min(N, max(4 * k, k + 16))
    out = _Rows(pi)
    rows: Tensor | None = None  # the queries this round works for (None: all)
    ent = None
    while True:
        out.rounds += 1
        pi_r = pi if rows is None else pi[rows]
        mask_r = mask if rows is None or mask is None or mask.dim() == 1 else mask[rows]
        scored_r = scored if rows is None else [h.rows(rows) for h in scored]
        Br = pi_r.shape[0]
        top: TopLists = []
        lse = torch.empty(Br, 0, dtype=torch.float64)
        if Hd:
            top, lse = cast(tuple[TopLists, Tensor], (yield TopAsk(kk, rows)))
            if rows is None:  # every query's lists: their first is each head's nearest book
                out.best = torch.stack([_first(exact) for _, _, exact in top], dim=1)
        if scored_r:
            top_s, lse_s = scored_top(scored_r, k=kk, mask=mask_r)
            top, lse = top + top_s, torch.cat([lse, lse_s], dim=1)
        cand = union(top)  # (Br, C)
        if entropy and ent is None:
            # one more pass over the rows (the heads' kept scores, else their keys), which the
            # entropy needs anyway, also yields the candidates' scores
            scores, ent = cast(tuple[Tensor, Tensor], (yield SweepAsk(pi_r, lse, cand, scored_r)))
            # −Σ w log w ≥ 0, but a mixture peaked on one book has w ≈ 1 + ε there, which
            # rounds it to −ε (−2e-6 seen): a negative entropy is rounding, and is 0
            ent = ent.clamp_min(0.0)
        elif Hd:
            scores = cast(Tensor, (yield ScoresAsk(cand, rows)))
        else:
            scores = torch.empty(Br, cand.shape[1], 0, dtype=torch.float64)
        scores = with_scored(scores, scored_r, cand)  # (Br, C, H)
        exact_in_lists(scores, cand, top[:Hd])
        logp = candidate_logp([*scales, *(h.scale for h in scored)], scores, cand, lse, mask_r)
        probs = logp.exp()
        pos, best_w, done = _settle(pi_r, probs, cand, top, k)
        if kk >= N:
            done[:] = True
        here = torch.arange(B) if rows is None else rows
        out.put(
            here[done],
            cand=cand[done],
            pos=pos[done],
            w=best_w[done],
            probs=probs[done],
            scores=scores[done],
            lse=lse[done],
        )
        if bool(done.all()):
            break
        rows = here[~done]
        kk = min(N, 4 * kk)
    if mask is None:
        matched = torch.full((B,), N, dtype=torch.long)
    else:
        matched = mask.cpu().sum(-1).expand(B) if mask.dim() == 1 else mask.cpu().sum(-1)
    return out.mixture(matched, ent)


class _Rows:
    """Each query's top k as the round that proved it found it, gathered into one `Mixture`."""

    def __init__(self, pi: Tensor):
        self.pi = pi  # (B, H)
        self.B, self.H = pi.shape
        self.rounds = 0
        self.parts: list[tuple[Tensor, ...]] = []
        self.best: Tensor | None = None  # (B, Hd) `Mixture.best`

    def put(
        self,
        rows: Tensor,
        *,
        cand: Tensor,
        pos: Tensor,
        w: Tensor,
        probs: Tensor,
        scores: Tensor,
        lse: Tensor,
    ) -> None:
        """The queries `rows` (R,): their candidates (R, C), the top k's columns among them and
        weights (R, k), every candidate's p_h and raw scores (R, C, H), and each head's
        log-sum-exp (R, H) as that round computed it."""
        found = w > 0
        sel = pos[:, :, None].expand(-1, -1, self.H)
        p_sel = torch.where(found[:, :, None], probs.gather(1, sel), 0.0)
        self.parts.append(
            (
                rows,
                torch.where(found, cand.gather(1, pos), -1),
                torch.where(found, w, 0.0),
                p_sel,
                torch.where(found[:, :, None], scores.gather(1, sel), -math.inf),
                lse,
            )
        )

    def mixture(self, matched: Tensor, entropy: Tensor | None) -> Mixture:
        """The `Mixture` of every query, at the widest round's k (narrower ones padded)."""
        width = max(p[1].shape[1] for p in self.parts)
        B, H = self.B, self.H
        idx = torch.full((B, width), -1, dtype=torch.long)
        weights = torch.zeros(B, width, dtype=torch.float64)
        probs = torch.zeros(B, width, H, dtype=torch.float64)
        scores = torch.full((B, width, H), -math.inf, dtype=torch.float64)
        lse = torch.empty(B, H, dtype=torch.float64)
        for rows, i, w, p, s, lse_r in self.parts:
            kw = i.shape[1]
            idx[rows, :kw], weights[rows, :kw], probs[rows, :kw], scores[rows, :kw] = i, w, p, s
            lse[rows] = lse_r
        return Mixture(
            indices=idx,
            weights=weights,
            shares=probs * self.pi[:, None, :],
            probs=probs,
            scores=scores.float(),
            logsumexp=lse,
            matched=matched,
            entropy=entropy,
            rounds=self.rounds,
            best=self.best,
        )


def _first(scores: Tensor) -> Tensor:
    """(B,) float64: the first of each row of a list's scores (B, k'), −inf where k' is 0."""
    if scores.shape[1] == 0:
        return torch.full((scores.shape[0],), -math.inf, dtype=torch.float64)
    return scores[:, 0].double()


def _settle(
    pi: Tensor, probs: Tensor, cand: Tensor, top: TopLists, k: int
) -> tuple[Tensor, Tensor, Tensor]:
    """One round's top k of R queries: the columns (R, k') among the candidates cand (R, C),
    their weights (R, k') Σ_h π_h p_h from probs (R, C, H), and which queries they settle (R,)
    bool: the threshold bound proves no book outside every head's list weighs more."""
    w = (probs * pi[:, None, :]).sum(-1)  # (R, C)
    w = torch.where(cand >= 0, w, -1.0)
    pos = top_by_row(w, min(k, w.shape[1]))  # (R, k')
    best_w = w.gather(1, pos)  # (R, k')
    # bound on any book outside every list: Σ π_h · (k'-th weight of head h)
    # (a head whose list holds every unmasked book ends in padding of weight 0)
    tail = torch.stack([weights[:, -1] for _, weights, _ in top], dim=1)  # (R, H)
    bound = (pi * tail).sum(-1)  # (R,)
    R = pi.shape[0]
    kth = best_w.amin(-1) if best_w.shape[1] == k else torch.zeros(R, dtype=torch.float64)
    # complete when the k-th is clearly above any book outside the lists: one tied with it
    # (within TIE_MARGIN) might sort before it by row, and the lists' own tie order is
    # arbitrary, so a tie at the cut takes one more round; a bound of 0 leaves none outside
    done = (kth > bound * (1 + TIE_MARGIN)) | (bound <= 0)  # (R,)
    return pos, best_w, done


def candidate_logp(
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
