"""Exact attention over keys split across shards: each shard attends over its own keys, the
router merges the shards' answers into the one a single index gives.

Shard s holds rows [offset_s, offset_s + N_s) of the catalog. For a query its answer is

    lse_s   = log Σ_{j∈s} exp(ℓ_j)             over its unmasked keys (−inf when none)
    w_s(j)  = exp(ℓ_j − lse_s)                 its top-k keys' shard-local weights
    out_s   = Σ_{j∈s} w_s(j) · v_j             (B, d_v), when values are asked for

and the merge is exact, not an approximation:

    lse     = log Σ_s exp(lse_s)
    w(j)    = w_s(j) · exp(lse_s − lse)        = exp(ℓ_j − lse), the single-index weight
    out     = Σ_s exp(lse_s − lse) · out_s
    top-k   = the best k of the shards' top-k  (a global winner is a winner in its shard)

A fully masked shard has lse_s = −inf and contributes nothing. Log-sum-exps travel in float64:
rounded to float32 (≈ 2e-6 at lse ≈ 30) they would cost the weights their 1e-6 agreement.

A mixture of heads (models/mixture.py) merges the same way, head by head: a cluster's router
(service/cluster/shards/router.py `ShardedDenseHeads`) answers the three dense-head operations
from its shards with these merges. Each dense head's top k' and
log-sum-exp is the merge above; a candidate's score comes from the one shard holding its row; and
the entropy −Σ_i w_i log w_i splits over rows, so once every shard has the global lse_h of every
head (and π), each computes its rows' part exactly and the parts add up:

    w_i = Σ_h π_h exp(scale_h s_hi − lse_h)     lse_h global: the rows' terms are the single index's
    H   = Σ_s (−Σ_{i∈s} w_i log w_i)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise

import torch
from torch import Tensor

from models.attention import Attention
from models.heads import ScoredHead


@dataclass(frozen=True)
class ShardAnswer:
    """One shard's part of an attention call for B queries, in the catalog's global rows."""

    indices: Tensor  # (B, k) int64 global rows (offset added), best first; −1 padding
    scores: Tensor  # (B, k) raw q·k, −inf padding
    weights: Tensor  # (B, k) float32 softmax weights over this shard's unmasked keys
    logsumexp: Tensor  # (B,) float64 log Σ exp(logits) over this shard; −inf when fully masked
    matched: Tensor  # (B,) int64 unmasked keys in this shard
    output: Tensor | None  # (B, d_v) this shard's softmax-weighted values, or None

    @classmethod
    def of(cls, att: Attention, *, offset: int) -> ShardAnswer:
        """A shard's `attend` result, its rows moved to the catalog's (offset added)."""
        return cls(
            indices=torch.where(att.indices >= 0, att.indices + offset, -1),
            scores=att.scores,
            weights=att.weights,
            logsumexp=att.logsumexp.double(),
            matched=att.matched,
            output=att.output,
        )

    @classmethod
    def empty(cls, queries: int) -> ShardAnswer:
        """The answer of a shard without rows: nothing matched, log-sum-exp −inf."""
        return cls(
            indices=torch.empty(queries, 0, dtype=torch.long),
            scores=torch.empty(queries, 0),
            weights=torch.empty(queries, 0),
            logsumexp=torch.full((queries,), -math.inf, dtype=torch.float64),
            matched=torch.zeros(queries, dtype=torch.long),
            output=None,
        )

    def to(self, device: torch.device | str) -> ShardAnswer:
        """The same answer on another device (the router's), e.g. before `merge`."""
        return ShardAnswer(
            indices=self.indices.to(device),
            scores=self.scores.to(device),
            weights=self.weights.to(device),
            logsumexp=self.logsumexp.to(device),
            matched=self.matched.to(device),
            output=None if self.output is None else self.output.to(device),
        )


def merge(answers: Sequence[ShardAnswer], *, k: int) -> Attention:
    """The shards' answers as one `Attention` over the whole catalog: global top-k, weights
    renormalised by the global log-sum-exp, outputs combined."""
    if not answers:
        raise ValueError("need at least one shard's answer")
    lse_s = torch.stack([a.logsumexp.double() for a in answers], dim=1)  # (B, S)
    lse = torch.logsumexp(lse_s, dim=1)  # (B,) −inf when every shard is fully masked
    # exp(lse_s − lse), 0 for a fully masked shard (and where everything is masked)
    factor = torch.where(torch.isfinite(lse_s), torch.exp(lse_s - lse[:, None]), 0.0)  # (B, S)

    indices = torch.cat([a.indices for a in answers], dim=1)  # (B, S·k)
    scores = torch.cat([a.scores for a in answers], dim=1)
    weights = torch.cat(
        [a.weights.double() * factor[:, s, None] for s, a in enumerate(answers)], dim=1
    )  # (B, S·k) global weights
    # Best first by the weight as returned (float32); equal weights by lower row, the same for
    # any number of shards (in float64 equal keys in different shards differ in the last bits).
    # Padding sorts last (−inf), after real keys whose weight underflowed to 0.
    key = torch.where(indices >= 0, weights.float(), -math.inf)
    by_row = torch.argsort(indices, dim=1, stable=True)
    by_weight = torch.argsort(key.gather(1, by_row), dim=1, descending=True, stable=True)
    order = by_row.gather(1, by_weight)[:, : min(k, indices.shape[1])]  # (B, k)

    outputs = [a.output for a in answers if a.output is not None]
    output = None
    if len(outputs) == len(answers):
        output = torch.stack(
            [factor[:, s, None].to(o.dtype) * o for s, o in enumerate(outputs)]
        ).sum(0)  # (B, d_v)
    return Attention(
        indices=indices.gather(1, order),
        scores=scores.gather(1, order),
        weights=weights.gather(1, order).float(),
        logsumexp=lse,
        matched=torch.stack([a.matched for a in answers]).sum(0),
        output=output,
    )


def check_tiling(rows: Sequence[tuple[int, int]], size: int) -> None:
    """Raise ValueError unless the shards' rows [start, stop) cover [0, size) once each."""
    bounds = sorted(rows)
    starts, stops = [a for a, _ in bounds], [b for _, b in bounds]
    if not bounds or starts[0] != 0 or starts[1:] != stops[:-1] or stops[-1] != size:
        raise ValueError(f"the shards' rows {bounds} do not tile the catalog's {size} rows")


def shard_bounds(n: int, shards: int) -> list[tuple[int, int]]:
    """Rows [start, stop) of each of `shards` near-equal contiguous shards of n rows."""
    if shards < 1:
        raise ValueError(f"need at least one shard, got {shards}")
    bounds = [n * s // shards for s in range(shards + 1)]
    return list(pairwise(bounds))


@dataclass(frozen=True)
class SparseScores:
    """A scored head's scores on one shard's rows, for that shard's part of the sweep, sent
    sparsely rather than as the (B, N_s) slice: the lexical head's BM25 is −inf (the book is left
    out of the head) on every book without a query term, so a row is its fill value and the few
    books that hold a term. Bytes grow with the matching books, not with the shard: a dense
    float32 slice of 30M books in 4 shards would be 1.9 GB per shard for a batch of 64. Exact for
    any scores: the fill is each row's minimum, and every other value is listed."""

    scale: float
    size: int  # the shard's rows
    fill: Tensor  # (B,) each row's value where none is listed
    at: Tensor  # (2, nnz) int64: (query row, shard row) of each listed value
    values: Tensor  # (nnz,)

    @classmethod
    def of(cls, head: ScoredHead, start: int, stop: int) -> SparseScores:
        """Rows [start, stop) of `head`'s scores."""
        part = head.scores[:, start:stop].cpu()  # (B, n)
        fill = part.amin(dim=1) if stop > start else part.new_zeros(part.shape[0])  # (B,)
        at = (part != fill[:, None]).nonzero().T  # (2, nnz)
        return cls(head.scale, stop - start, fill, at, part[at[0], at[1]])

    def head(self) -> ScoredHead:
        """The slice as a (B, n) scored head over the shard's rows."""
        scores = self.fill[:, None].repeat(1, self.size)  # (B, n)
        scores[self.at[0], self.at[1]] = self.values
        return ScoredHead(scores, self.scale)
