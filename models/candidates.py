"""The candidates of a fusion of heads (models/mixture.py, models/rank_fusion.py): each head's
top rows, their union, the candidates' raw scores in every head, and the top k by weight."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor

from models import cpu_kernels
from models.heads import ScoredHead, TopLists, pad_right


def check_heads(
    scales: Sequence[float], size: int, scored: Sequence[ScoredHead], pi: Tensor
) -> None:
    """Raise ValueError unless π has a column per head and every scored head `size` rows."""
    Hd, H = len(scales), pi.shape[1]
    if Hd + len(scored) != H:
        raise ValueError(f"π has {H} columns for {Hd} dense and {len(scored)} scored heads")
    if any(head.scores.shape[1] != size for head in scored):
        sizes = sorted({size, *(head.scores.shape[1] for head in scored)})
        raise ValueError(f"heads disagree on the catalog size: {sizes}")


def top_by_row(w: Tensor, k: int) -> Tensor:
    """Columns (B, k) of the k largest of w (B, C), candidates in ascending row order (−1 where
    w is padding): by weight to float32's precision, ties by the lower row. A batch's float32
    products move a weight by ~1e-7 (models/attention.py), so finer differences are noise, and
    a batch must not reorder books that tie. One top-k over a distinct int64 key
    (float32 bits, then the column reversed) instead of a stable sort: 10 µs more than a plain
    top-k at (64, 300) here, where a stable sort cost 0.8 ms."""
    bits = w.float().view(torch.int32).long()  # ordered as the floats for w ≥ 0; −1 below
    key = (bits << 32) | (0xFFFFFFFF - torch.arange(w.shape[1]))  # distinct: no ties left
    return key.topk(k, dim=-1).indices


def scored_top(
    heads: Sequence[ScoredHead], *, k: int, mask: Tensor | None
) -> tuple[TopLists, Tensor]:
    """Per scored head its top k rows and weights; lse (B, Hs) float64."""
    lse = torch.empty(heads[0].scores.shape[0], len(heads), dtype=torch.float64)
    top: TopLists = []
    for j, head in enumerate(heads):
        if head.support is not None:
            idx, weights, raw, lse[:, j] = _support_top(head, k, mask)
            top.append((idx, weights, raw))
            continue
        logits = head.scores.cpu().double() * head.scale  # (B, N): −inf stays −inf
        if mask is not None:
            logits = logits.masked_fill(~mask.cpu().to(torch.bool), -math.inf)
        lse[:, j] = torch.logsumexp(logits, dim=-1)
        top_logits, at = logits.topk(min(k, logits.shape[1]), dim=-1)
        ok = torch.isfinite(top_logits)
        idx = torch.where(ok, at, -1)
        raw = head.scores.gather(1, at.to(head.scores.device)).cpu().double()
        top.append(
            (
                pad_right(idx, k, -1),
                pad_right(torch.where(ok, (top_logits - lse[:, j : j + 1]).exp(), 0.0), k, 0.0),
                pad_right(torch.where(ok, raw, -math.inf), k, -math.inf),
            )
        )
    return top, lse


def _support_top(
    head: ScoredHead, k: int, mask: Tensor | None
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """A head holding few books (`ScoredHead.support`): each query's top k (B, k) rows, weights
    and raw scores, padded, and its log-sum-exp (B,), from its own books alone, a query at a
    time (row-major support: each query's books are one slice of it), in numpy."""
    assert head.support is not None
    rows_t, cols_t = head.support
    scores = head.scores.cpu().numpy()
    B = scores.shape[0]
    rows, cols = rows_t.numpy(), cols_t.numpy()
    if mask is not None:
        m = mask.cpu().to(torch.bool).numpy()
        unmasked = m[cols] if m.ndim == 1 else m[rows, cols]
        rows, cols = rows[unmasked], cols[unmasked]
    starts = np.searchsorted(rows, np.arange(B + 1))
    fast = (
        cpu_kernels.available()
        and k <= cpu_kernels.SUPPORT_MAX_K
        and scores.dtype == np.float32
        and scores.flags.c_contiguous
    )
    tops = cpu_kernels.support_top(scores, cols, starts, k) if fast else None
    idx = np.full((B, k), -1, dtype=np.int64)
    weights = np.zeros((B, k), dtype=np.float64)
    raw = np.full((B, k), -math.inf, dtype=np.float64)
    lse = np.full(B, -math.inf, dtype=np.float64)
    for b in range(B):
        c = cols[starts[b] : starts[b + 1]]  # (n,) this query's books, ascending
        if not len(c):
            continue
        s = scores[b, c].astype(np.float64)  # (n,) raw
        x = s * head.scale
        peak = x.max()
        lse[b] = peak + math.log(float(np.exp(x - peak).sum()))
        # the best k, best first; equal scores by column, as a top-k over the row would
        if tops is not None:  # in C, one read of the row's books (models/_cpu_kernels.c)
            top = tops[b][tops[b] >= 0]
            n = len(top)
            idx[b, :n] = top
            raw[b, :n] = scores[b, top]
            weights[b, :n] = np.exp(raw[b, :n] * head.scale - lse[b])
            continue
        part = np.arange(len(c))
        if len(c) > k:  # those above the k-th score, then the lowest columns tying with it
            kth = np.partition(x, len(c) - k)[len(c) - k]
            above = np.flatnonzero(x > kth)
            part = np.concatenate([above, np.flatnonzero(x == kth)[: k - len(above)]])
        best = part[np.lexsort((c[part], -x[part]))]
        n = len(best)
        idx[b, :n] = c[best]
        weights[b, :n] = np.exp(x[best] - lse[b])
        raw[b, :n] = s[best]
    return (
        torch.from_numpy(idx),
        torch.from_numpy(weights),
        torch.from_numpy(raw),
        torch.from_numpy(lse),
    )


def exact_in_lists(scores: Tensor, cand: Tensor, top: TopLists) -> None:
    """Overwrite in `scores` (B, C, H) each candidate's score in the heads whose own list holds
    it with that list's exact score: the sweep's float32 products can differ in the last bit
    with the chunking or the shard (models/attention.py), and these are the terms that carry
    the weight."""
    for h, (idx, _, exact) in enumerate(top):
        b, j, c = list_positions(cand, idx)
        scores[b, c, h] = exact[b, j]  # a list's rows are distinct: no collisions


def list_positions(cand: Tensor, idx: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Where a head's list idx (B, k) (−1 padded) sits among the candidates cand (B, C)
    (ascending, −1 padded, `union`'s): (b, j, c) for every list entry idx[b, j] = cand[b, c]."""
    C = cand.shape[1]
    ordered = torch.where(cand >= 0, cand, torch.iinfo(torch.long).max)  # padding last
    pos = torch.searchsorted(ordered, idx.clamp_min(0)).clamp_max(C - 1)  # (B, k)
    b, j = ((idx >= 0) & (ordered.gather(1, pos) == idx)).nonzero(as_tuple=True)
    return b, j, pos[b, j]


def union(top: TopLists) -> Tensor:
    """(B, C) the distinct candidate rows of every head's list, −1 padded."""
    allidx = torch.cat([t[0] for t in top], dim=1)  # (B, H·k)
    rows = [torch.unique(r[r >= 0]) for r in allidx]
    width = max(1, *(len(r) for r in rows))
    cand = torch.full((len(rows), width), -1, dtype=torch.long)
    for b, r in enumerate(rows):
        cand[b, : len(r)] = r
    return cand


def with_scored(scores: Tensor, scored: Sequence[ScoredHead], cand: Tensor) -> Tensor:
    """The dense heads' candidate scores (B, C, Hd) followed by the scored heads' (B, C, H)."""
    if not scored:
        return scores
    safe = cand.clamp_min(0)
    given = [head.scores.gather(1, safe.to(head.scores.device)).cpu() for head in scored]
    return torch.cat([scores, torch.stack(given, dim=-1).double()], dim=-1)
