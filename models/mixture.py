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

The dense heads' work is three operations on their keys, behind `DenseHeads`: each head's top k'
with its log-sum-exp (`top`), the raw scores of given rows (`scores`), and one chunked pass that
gives the candidates' scores and the mixture's entropy (`sweep`). `LocalDenseHeads` answers them
over keys in this process; `models.sharded.ShardedDenseHeads` asks shards that each hold some of
the rows and merges their answers exactly. `mix_topk` is the threshold loop over either.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Protocol

import torch
from torch import Tensor

from models.attention import DEFAULT_CHUNK_SIZE, Attention, attend, raw_scores


@dataclass(frozen=True)
class DenseHead:
    """Logits scale · q Kᵀ. Heads sharing the same `keys` tensor and scale run in one `attend`."""

    q: Tensor  # (B, d)
    keys: Tensor  # (N, d)
    scale: float


@dataclass(frozen=True)
class ScoredHead:
    """Logits scale · scores, for scores computed for every book (e.g. BM25); a score of −inf
    leaves the book out of this head (p = 0) without masking it from the others."""

    scores: Tensor  # (B, N) float
    scale: float


Head = DenseHead | ScoredHead
# per head: its top rows (B, k') int64, −1 padded, their weights (B, k') float64, 0 padded, and
# their exact raw scores (B, k') float64
TopLists = list[tuple[Tensor, Tensor, Tensor]]


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


class DenseHeads(Protocol):
    """A mixture's dense heads, wherever their keys are; rows are the catalog's, and the mask
    (the filters) is the implementation's to apply."""

    @property
    def scales(self) -> Sequence[float]:
        """One per dense head."""
        ...

    @property
    def size(self) -> int:
        """The catalog rows the heads cover."""
        ...

    def top(self, k: int) -> tuple[TopLists, Tensor]:
        """Each head's top k rows and their weights, and its log-sum-exp (B, Hd) float64 over
        the unmasked rows."""
        ...

    def scores(self, cand: Tensor) -> Tensor:
        """Raw scores (B, C, Hd) float64 of the candidate rows cand (B, C) (−1: padding, whose
        score is anything)."""
        ...

    def sweep(
        self, pi: Tensor, lse: Tensor, cand: Tensor, scored: Sequence[ScoredHead]
    ) -> tuple[Tensor, Tensor]:
        """One pass over every row: the candidates' raw scores (B, C, Hd) float64, and the entropy
        −Σ_i w_i log w_i (B,) float64 over the unmasked rows, w_i = Σ_h π_h exp(scale_h s_hi −
        lse_h). pi, lse (B, Hd + Hs): the dense heads' columns first, then those of `scored`,
        whose scores are aligned with the rows these heads cover."""
        ...


class LocalDenseHeads:
    """`DenseHeads` over keys in this process: rows [offset, offset + size) of the catalog (all
    of it unless these keys are one shard's), `mask` (N,) or (B, N) over those rows."""

    def __init__(
        self,
        heads: Sequence[DenseHead],
        *,
        size: int,
        mask: Tensor | None = None,
        chunk_size: int | None = None,
        offset: int = 0,
    ):
        if any(head.keys.shape[0] != size for head in heads):
            raise ValueError(f"dense heads' keys disagree with the size {size}")
        self.heads = list(heads)
        self.size = size
        self.mask = None if mask is None else mask.to(dtype=torch.bool)
        self.chunk_size = chunk_size
        self.offset = offset

    @property
    def scales(self) -> list[float]:
        return [head.scale for head in self.heads]

    def attend(self, k: int) -> list[Attention]:
        """Per head, `attend` over its keys (rows of these keys, not offset); heads sharing keys
        and scale run in one call over their stacked queries."""
        out: list[Attention | None] = [None] * len(self.heads)
        groups: dict[tuple[int, float], list[int]] = {}
        for h, head in enumerate(self.heads):
            groups.setdefault((id(head.keys), head.scale), []).append(h)
        mask, C = self.mask, self.chunk_size
        for members in groups.values():
            first = self.heads[members[0]]
            if len(members) == 1:
                out[members[0]] = attend(
                    first.q, first.keys, k=k, scale=first.scale, mask=mask, chunk_size=C
                )
                continue
            B = first.q.shape[0]
            q = torch.cat([self.heads[h].q for h in members])
            m = mask if mask is None or mask.dim() == 1 else mask.repeat(len(members), 1)
            att = attend(q, first.keys, k=k, scale=first.scale, mask=m, chunk_size=C)
            for j, h in enumerate(members):
                rows = slice(j * B, (j + 1) * B)
                out[h] = Attention(
                    indices=att.indices[rows],
                    scores=att.scores[rows],
                    weights=att.weights[rows],
                    logsumexp=att.logsumexp[rows],
                    matched=att.matched[rows],
                    output=None,
                )
        return [att for att in out if att is not None]

    def top(self, k: int) -> tuple[TopLists, Tensor]:
        atts = self.attend(k)
        lse = torch.empty(atts[0].indices.shape[0], len(atts), dtype=torch.float64)
        top: TopLists = []
        for h, att in enumerate(atts):
            idx = att.indices.cpu()
            if self.offset:
                idx = torch.where(idx >= 0, idx + self.offset, -1)
            top.append((idx, att.weights.double().cpu(), att.scores.double().cpu()))
            lse[:, h] = att.logsumexp.double().cpu()
        return top, lse

    def scores(self, cand: Tensor) -> Tensor:
        """From the candidates' gathered keys; rows outside these keys score 0 (a shard's part:
        the shards' parts add up to every candidate's score)."""
        B, C = cand.shape
        out = torch.zeros(B, C, len(self.heads), dtype=torch.float64)
        if not self.heads or self.size == 0:
            return out
        local = cand - self.offset
        inside = (local >= 0) & (local < self.size)  # (B, C)
        safe = torch.where(inside, local, 0)
        for h, head in enumerate(self.heads):
            kc = head.keys[safe.to(head.keys.device)].float()  # (B, C, d)
            s = torch.bmm(kc, head.q.to(kc.device).float()[:, :, None])[:, :, 0]  # (B, C) fp32
            out[:, :, h] = torch.where(inside, s.double().cpu(), 0.0)
        return out

    def sweep(
        self, pi: Tensor, lse: Tensor, cand: Tensor, scored: Sequence[ScoredHead]
    ) -> tuple[Tensor, Tensor]:
        """Over these rows only: candidates elsewhere score 0, and the entropy is these rows'
        part of the sum (the shards' parts add up to the whole)."""
        B, N, Hd = pi.shape[0], self.size, len(self.heads)
        C = self.chunk_size or DEFAULT_CHUNK_SIZE
        # the pass stays where the keys are
        device = self.heads[0].keys.device if self.heads else torch.device("cpu")
        pi, lse, cand = pi.to(device), lse.to(device), (cand - self.offset).to(device)
        mask = None if self.mask is None else self.mask.to(device)
        scores = torch.zeros(B, cand.shape[1], Hd, dtype=torch.float64, device=device)
        total = torch.zeros(B, dtype=torch.float64, device=device)
        for start in range(0, N, C):
            stop = min(N, start + C)
            inside = (cand >= start) & (cand < stop)  # (B, C) candidates in this chunk
            at = (cand - start).clamp(0, stop - start - 1)
            w = torch.zeros(B, stop - start, dtype=torch.float64, device=device)
            for h, head in enumerate(self.heads):
                kc = head.keys[start:stop]
                s = raw_scores(head.q.to(kc.device), kc).double()  # (B, c)
                scores[:, :, h] = torch.where(inside, s.gather(1, at), scores[:, :, h])
                w += pi[:, h : h + 1] * (s * head.scale - lse[:, h : h + 1]).exp()
            for j, sh in enumerate(scored, start=Hd):
                s = sh.scores[:, start:stop].to(device, torch.float64)
                w += pi[:, j : j + 1] * (s * sh.scale - lse[:, j : j + 1]).exp()
            if mask is not None:
                w = w * mask[..., start:stop]
            total -= torch.where(w > 0, w * w.clamp_min(1e-300).log(), 0.0).sum(-1)
        return scores.cpu(), total.cpu()


def mixture_topk(
    heads: Sequence[Head],
    pi: Tensor,
    *,
    k: int,
    mask: Tensor | None = None,
    chunk_size: int | None = None,
    entropy: bool = False,
) -> Mixture:
    """The exact top-k books of Σ_h π_h softmax_h, π (B, H) with rows summing to 1, every head
    in this process.

    `mask` (N,) or (B, N) bool: True where a book may be attended to (every head alike).
    """
    N = _catalog_size(heads)
    dense = [head for head in heads if isinstance(head, DenseHead)]
    scored = [head for head in heads if isinstance(head, ScoredHead)]
    local = LocalDenseHeads(dense, size=N, mask=mask, chunk_size=chunk_size)
    order = [h for h, head in enumerate(heads) if isinstance(head, DenseHead)]
    order += [h for h, head in enumerate(heads) if isinstance(head, ScoredHead)]
    if order == sorted(order):  # dense heads first already (the search's heads are)
        return mix_topk(local, scored, pi, k=k, mask=mask, entropy=entropy)
    mix = mix_topk(local, scored, pi[:, order], k=k, mask=mask, entropy=entropy)
    back = torch.argsort(torch.tensor(order))
    return replace(
        mix,
        shares=mix.shares[:, :, back],
        probs=mix.probs[:, :, back],
        scores=mix.scores[:, :, back],
        logsumexp=mix.logsumexp[:, back],
    )


def mix_topk(
    dense: DenseHeads,
    scored: Sequence[ScoredHead],
    pi: Tensor,
    *,
    k: int,
    mask: Tensor | None = None,
    entropy: bool = False,
) -> Mixture:
    """`mixture_topk` with the dense heads behind `dense` (in this process or on shards) and the
    scored heads here; π (B, Hd + Hs) and the result's heads: the dense heads first.

    `mask` is the one `dense` applies, over the whole catalog: the scored heads, the candidates
    and the matched counts need it here too.
    """
    B, H = pi.shape
    Hd = len(dense.scales)
    if Hd + len(scored) != H:
        raise ValueError(f"π has {H} columns for {Hd} dense and {len(scored)} scored heads")
    N = dense.size
    if any(head.scores.shape[1] != N for head in scored):
        sizes = sorted({N, *(head.scores.shape[1] for head in scored)})
        raise ValueError(f"heads disagree on the catalog size: {sizes}")
    pi = pi.double().cpu()
    mask = None if mask is None else mask.to(dtype=torch.bool)
    kk = min(N, max(4 * k, k + 16))
    rounds = 0
    ent = None
    while True:
        rounds += 1
        top, lse = dense.top(kk) if Hd else ([], torch.empty(B, 0, dtype=torch.float64))
        if scored:
            top_s, lse_s = _scored_top(scored, k=kk, mask=mask)
            top, lse = top + top_s, torch.cat([lse, lse_s], dim=1)
        cand = _union(top)  # (B, C)
        if entropy and ent is None:
            # one more pass over the keys, which the entropy needs anyway, also yields the
            # candidates' scores: cheaper than gathering their scattered keys
            scores, ent = dense.sweep(pi, lse, cand, scored)
        elif Hd:
            scores = dense.scores(cand)
        else:
            scores = torch.empty(B, cand.shape[1], 0, dtype=torch.float64)
        scores = _with_scored(scores, scored, cand)  # (B, C, H)
        _exact_in_lists(scores, cand, top[:Hd])
        logp = _candidate_logp([*dense.scales, *(h.scale for h in scored)], scores, cand, lse, mask)
        probs = logp.exp()
        w = (probs * pi[:, None, :]).sum(-1)  # (B, C)
        w = torch.where(cand >= 0, w, -1.0)
        best_w, pos = w.topk(min(k, w.shape[1]), dim=-1)  # (B, k)
        # bound on any book outside every list: Σ π_h · (k'-th weight of head h)
        # (a head whose list holds every unmasked book ends in padding of weight 0)
        tail = torch.stack([weights[:, -1] for _, weights, _ in top], dim=1)  # (B, H)
        bound = (pi * tail).sum(-1)  # (B,)
        kth = best_w[:, -1] if best_w.shape[1] == k else torch.zeros(B, dtype=torch.float64)
        if kk >= N or bool((kth >= bound).all()):
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


def _catalog_size(heads: Sequence[Head]) -> int:
    sizes = {h.keys.shape[0] if isinstance(h, DenseHead) else h.scores.shape[1] for h in heads}
    if len(sizes) != 1:
        raise ValueError(f"heads disagree on the catalog size: {sorted(sizes)}")
    return sizes.pop()


def _scored_top(
    heads: Sequence[ScoredHead], *, k: int, mask: Tensor | None
) -> tuple[TopLists, Tensor]:
    """Per scored head its top k rows and weights; lse (B, Hs) float64."""
    lse = torch.empty(heads[0].scores.shape[0], len(heads), dtype=torch.float64)
    top: TopLists = []
    for j, head in enumerate(heads):
        logits = _scored_logits(head, mask)  # (B, N)
        lse[:, j] = torch.logsumexp(logits, dim=-1)
        top_logits, top_idx = logits.topk(k, dim=-1)
        ok = torch.isfinite(top_logits)
        top.append(
            (
                torch.where(ok, top_idx, -1),
                torch.where(ok, (top_logits - lse[:, j : j + 1]).exp(), 0.0),
                head.scores.double().gather(1, top_idx),
            )
        )
    return top, lse


def _scored_logits(head: ScoredHead, mask: Tensor | None) -> Tensor:
    logits = head.scores.double() * head.scale  # (B, N)
    if mask is not None:
        logits = logits.masked_fill(~mask.cpu(), -math.inf)
    return logits


def _exact_in_lists(scores: Tensor, cand: Tensor, top: TopLists) -> None:
    """Overwrite in `scores` (B, C, H) each candidate's score in the heads whose own list holds
    it with that list's exact score: the sweep's float32 products can differ in the last bit
    with the chunking or the shard (models/attention.py), and these are the terms that carry
    the weight."""
    C = cand.shape[1]
    big = torch.iinfo(torch.long).max
    ordered = torch.where(cand >= 0, cand, big)  # (B, C) ascending, padding last
    for h, (idx, _, exact) in enumerate(top):
        pos = torch.searchsorted(ordered, idx.clamp_min(0)).clamp_max(C - 1)  # (B, k)
        b, j = ((idx >= 0) & (ordered.gather(1, pos) == idx)).nonzero(as_tuple=True)
        scores[b, pos[b, j], h] = exact[b, j]  # a list's rows are distinct: no collisions


def _union(top: TopLists) -> Tensor:
    """(B, C) the distinct candidate rows of every head's list, −1 padded."""
    allidx = torch.cat([t[0] for t in top], dim=1)  # (B, H·k)
    rows = [torch.unique(r[r >= 0]) for r in allidx]
    width = max(1, *(len(r) for r in rows))
    cand = torch.full((len(rows), width), -1, dtype=torch.long)
    for b, r in enumerate(rows):
        cand[b, : len(r)] = r
    return cand


def _with_scored(scores: Tensor, scored: Sequence[ScoredHead], cand: Tensor) -> Tensor:
    """The dense heads' candidate scores (B, C, Hd) followed by the scored heads' (B, C, H)."""
    if not scored:
        return scores
    safe = cand.clamp_min(0)
    given = [head.scores.gather(1, safe.to(head.scores.device)).cpu() for head in scored]
    return torch.cat([scores, torch.stack(given, dim=-1).double()], dim=-1)


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
