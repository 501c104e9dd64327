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
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from models.attention import DEFAULT_CHUNK_SIZE, attend, raw_scores


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


def mixture_topk(
    heads: list[Head],
    pi: Tensor,
    *,
    k: int,
    mask: Tensor | None = None,
    chunk_size: int | None = None,
    entropy: bool = False,
) -> Mixture:
    """The exact top-k books of Σ_h π_h softmax_h, π (B, H) with rows summing to 1.

    `mask` (N,) or (B, N) bool: True where a book may be attended to (every head alike).
    """
    B, H = pi.shape
    N = _catalog_size(heads)
    pi = pi.double().cpu()
    mask = None if mask is None else mask.to(dtype=torch.bool)
    kk = min(N, max(4 * k, k + 16))
    rounds = 0
    ent = None
    while True:
        rounds += 1
        top, lse = _run_heads(heads, k=kk, mask=mask, chunk_size=chunk_size)
        cand = _union(top)  # (B, C)
        if entropy and ent is None:
            # one more pass over the keys, which the entropy needs anyway, also yields the
            # candidates' scores: cheaper than gathering their scattered keys
            scores, ent = _sweep(heads, pi, lse=lse, mask=mask, cand=cand, chunk_size=chunk_size)
        else:
            scores = _gathered_scores(heads, cand)
        _exact_in_lists(scores, cand, top)
        logp = _candidate_logp(heads, scores, cand, lse, mask)  # (B, C, H)
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


def _catalog_size(heads: list[Head]) -> int:
    sizes = {h.keys.shape[0] if isinstance(h, DenseHead) else h.scores.shape[1] for h in heads}
    if len(sizes) != 1:
        raise ValueError(f"heads disagree on the catalog size: {sorted(sizes)}")
    return sizes.pop()


def _run_heads(
    heads: list[Head], *, k: int, mask: Tensor | None, chunk_size: int | None
) -> tuple[list[tuple[Tensor, Tensor, Tensor]], Tensor]:
    """Per head (indices (B, k), weights (B, k), scores (B, k) float64); lse (B, H) float64."""
    B = _rows(heads[0])
    out: list[tuple[Tensor, Tensor, Tensor] | None] = [None] * len(heads)
    lse = torch.empty(B, len(heads), dtype=torch.float64)
    # dense heads that share keys and scale: one attend call over their stacked queries
    groups: dict[tuple[int, float], list[int]] = {}
    for h, head in enumerate(heads):
        if isinstance(head, DenseHead):
            groups.setdefault((id(head.keys), head.scale), []).append(h)
    for members in groups.values():
        first = heads[members[0]]
        assert isinstance(first, DenseHead)
        q = torch.cat([heads[h].q for h in members])  # type: ignore[union-attr]
        m = mask if mask is None or mask.dim() == 1 else mask.repeat(len(members), 1)
        att = attend(q, first.keys, k=k, scale=first.scale, mask=m, chunk_size=chunk_size)
        for j, h in enumerate(members):
            rows = slice(j * B, (j + 1) * B)
            out[h] = (
                att.indices[rows].cpu(),
                att.weights[rows].double().cpu(),
                att.scores[rows].double().cpu(),
            )
            lse[:, h] = att.logsumexp[rows].double().cpu()
    for h, head in enumerate(heads):
        if isinstance(head, ScoredHead):
            logits = _scored_logits(head, mask)  # (B, N)
            lse[:, h] = torch.logsumexp(logits, dim=-1)
            top_logits, top_idx = logits.topk(k, dim=-1)
            ok = torch.isfinite(top_logits)
            out[h] = (
                torch.where(ok, top_idx, -1),
                torch.where(ok, (top_logits - lse[:, h : h + 1]).exp(), 0.0),
                head.scores.double().gather(1, top_idx),
            )
    return [o for o in out if o is not None], lse


def _rows(head: Head) -> int:
    return head.q.shape[0] if isinstance(head, DenseHead) else head.scores.shape[0]


def _scored_logits(head: ScoredHead, mask: Tensor | None) -> Tensor:
    logits = head.scores.double() * head.scale  # (B, N)
    if mask is not None:
        logits = logits.masked_fill(~mask.cpu(), -math.inf)
    return logits


def _exact_in_lists(scores: Tensor, cand: Tensor, top: list[tuple[Tensor, Tensor, Tensor]]) -> None:
    """Overwrite in `scores` (B, C, H) each candidate's score in the heads whose own list holds
    it with that list's exact score: the sweep's float32 products can differ in the last bit
    with the chunking (models/attention.py), and these are the terms that carry the weight."""
    C = cand.shape[1]
    big = torch.iinfo(torch.long).max
    ordered = torch.where(cand >= 0, cand, big)  # (B, C) ascending, padding last
    for h, (idx, _, exact) in enumerate(top):
        pos = torch.searchsorted(ordered, idx.clamp_min(0)).clamp_max(C - 1)  # (B, k)
        b, j = ((idx >= 0) & (ordered.gather(1, pos) == idx)).nonzero(as_tuple=True)
        scores[b, pos[b, j], h] = exact[b, j]  # a list's rows are distinct: no collisions


def _union(top: list[tuple[Tensor, Tensor, Tensor]]) -> Tensor:
    """(B, C) the distinct candidate rows of every head's list, −1 padded."""
    allidx = torch.cat([t[0] for t in top], dim=1)  # (B, H·k)
    rows = [torch.unique(r[r >= 0]) for r in allidx]
    width = max(1, *(len(r) for r in rows))
    cand = torch.full((len(rows), width), -1, dtype=torch.long)
    for b, r in enumerate(rows):
        cand[b, : len(r)] = r
    return cand


def _gathered_scores(heads: list[Head], cand: Tensor) -> Tensor:
    """Raw scores (B, C, H) float64 of each candidate, from its keys."""
    B, C = cand.shape
    safe = cand.clamp_min(0)
    scores = torch.empty(B, C, len(heads), dtype=torch.float64)
    for h, head in enumerate(heads):
        if isinstance(head, DenseHead):
            kc = head.keys[safe.to(head.keys.device)].float()  # (B, C, d)
            s = torch.bmm(kc, head.q.to(kc.device).float()[:, :, None])[:, :, 0]  # (B, C) fp32
            scores[:, :, h] = s.double().cpu()
        else:
            scores[:, :, h] = head.scores.double().gather(1, safe)
    return scores


def _candidate_logp(
    heads: list[Head], scores: Tensor, cand: Tensor, lse: Tensor, mask: Tensor | None
) -> Tensor:
    """Exact log p_h (B, C, H) float64 of each candidate from its raw scores (B, C, H)."""
    scale = torch.tensor([head.scale for head in heads], dtype=torch.float64)  # (H,)
    logp = scores * scale - lse[:, None, :]
    dead = cand < 0
    if mask is not None:
        m = mask.cpu()
        safe = cand.clamp_min(0)
        dead |= ~(m[safe] if m.dim() == 1 else m.gather(1, safe))
    return logp.masked_fill(dead[:, :, None], -math.inf)


def _sweep(
    heads: list[Head],
    pi: Tensor,
    *,
    lse: Tensor,
    mask: Tensor | None,
    cand: Tensor,
    chunk_size: int | None,
) -> tuple[Tensor, Tensor]:
    """One chunked pass over every book: the candidates' raw scores (B, C, H) float64, and the
    entropy −Σ_i w_i log w_i (B,) float64 over every unmasked book."""
    B, N = pi.shape[0], _catalog_size(heads)
    C = chunk_size or DEFAULT_CHUNK_SIZE
    dense = [head.keys.device for head in heads if isinstance(head, DenseHead)]
    device = dense[0] if dense else torch.device("cpu")  # the pass stays where the keys are
    pi, lse, cand = pi.to(device), lse.to(device), cand.to(device)
    mask = None if mask is None else mask.to(device)
    scores = torch.zeros(B, cand.shape[1], len(heads), dtype=torch.float64, device=device)
    total = torch.zeros(B, dtype=torch.float64, device=device)
    for start in range(0, N, C):
        stop = min(N, start + C)
        inside = (cand >= start) & (cand < stop)  # (B, C) candidates in this chunk
        at = (cand - start).clamp(0, stop - start - 1)
        w = torch.zeros(B, stop - start, dtype=torch.float64, device=device)
        for h, head in enumerate(heads):
            if isinstance(head, DenseHead):
                kc = head.keys[start:stop]
                s = raw_scores(head.q.to(kc.device), kc).double()  # (B, c)
            else:
                s = head.scores[:, start:stop].to(device, torch.float64)
            scores[:, :, h] = torch.where(inside, s.gather(1, at), scores[:, :, h])
            w += pi[:, h : h + 1] * (s * head.scale - lse[:, h : h + 1]).exp()
        if mask is not None:
            w = w * mask[..., start:stop]
        total -= torch.where(w > 0, w * w.clamp_min(1e-300).log(), 0.0).sum(-1)
    return scores.cpu(), total.cpu()
