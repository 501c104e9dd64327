"""The mixture's entropy −Σ_i w_i ln w_i over every row, w_i = Σ_h π_h p_h(i), from the heads'
scores (models/local_heads.py `LocalDenseHeads.sweep`): on the CPU one C read of the kept scores
(`entropy_in_c`, models/_cpu_kernels.c `sweep_entropy`), elsewhere, or where some head's scores
were not kept, torch's passes over chunks of rows (`entropy_in_chunks`), a head of few books
(`ScoredHead.support`) read at those books alone either way (`SparseTerms`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

import torch
from torch import Tensor

from models import cpu_kernels
from models.attention import chunk_for
from models.attention_chunks import BLOCK, raw_scores
from models.heads import DenseHead, ScoredHead

# Elements of one chunk on the CPU: (B, c) float64 buffers of 1 MiB each, in the core's cache.
SWEEP_CACHED = 1 << 17


def entropy_in_chunks(
    heads: Sequence[DenseHead],
    kept: Sequence[Tensor | None],
    shift: Tensor,
    scored: Sequence[ScoredHead],
    *,
    size: int,
    mask: Tensor | None,
    chunk_size: int | None,
    gather: tuple[Tensor, Tensor] | None,
) -> Tensor:
    """The entropy (B,) over `size` rows in torch's operations, a chunk of rows at a time, each
    dense head's scores `kept` (B, N) or multiplied again from its keys; shift (B, Hd + Hs)
    log π − lse;
    `gather`: the candidates (B, C) (these rows') whose scores (B, C, Hd) it writes as it
    passes them."""
    B, N, Hd = shift.shape[0], size, len(heads)
    device = shift.device
    sparse = [SparseTerms.of(sh, shift[:, j], device) for j, sh in enumerate(scored, Hd)]
    # on the CPU, chunks whose two float64 buffers stay in the core's cache: the dozen
    # in-place passes a chunk takes then read no memory but the scores; on a GPU, an
    # eighth of attend's chunk (float64 and several arrays) keeps the same budget
    if chunk_size:
        C = chunk_size
    elif device.type == "cpu":
        C = max(BLOCK, min(N, SWEEP_CACHED // max(B, 1)))
    else:
        C = chunk_for(8 * B, N, device)
    mask = None if mask is None else mask.to(device)
    total = torch.zeros(B, dtype=torch.float64, device=device)
    # w the mixture's probabilities, s one head's scores then its term: two float64
    # buffers for every chunk, worked in place (an expression per head allocated five per
    # chunk, each a page fault per 4 KiB)
    w_buf = torch.empty(B * min(C, N), dtype=torch.float64, device=device)
    s_buf = torch.empty_like(w_buf)
    for start in range(0, N, C):
        stop = min(N, start + C)
        w = w_buf[: B * (stop - start)].view(B, stop - start)  # (B, c)
        s = s_buf[: B * (stop - start)].view(B, stop - start)  # (B, c)
        w.zero_()
        for h, head in enumerate(heads):
            if kept[h] is not None:  # from the head's attend call: no second pass over keys
                s.copy_(cast(Tensor, kept[h])[:, start:stop])  # (B, c)
            else:
                kc = head.keys[start:stop]
                s.copy_(raw_scores(head.q.to(kc.device), kc))  # (B, c)
            if gather is not None:  # the candidates in this chunk take their scores
                cand, scores = gather
                inside = (cand >= start) & (cand < stop)  # (B, C)
                at = (cand - start).clamp(0, stop - start - 1)
                scores[:, :, h] = torch.where(inside, s.gather(1, at), scores[:, :, h])
            w.add_(s.mul_(head.scale).add_(shift[:, h : h + 1]).exp_())
        for j, (sh, terms) in enumerate(zip(scored, sparse, strict=True), start=Hd):
            if terms is not None:  # the few books the head holds
                terms.add_to(w, start, stop)
                continue
            s.copy_(sh.scores[:, start:stop])
            w.add_(s.mul_(sh.scale).add_(shift[:, j : j + 1]).exp_())
        if mask is not None:
            w.mul_(mask[..., start:stop])
        # −Σ w log w over w > 0 (a fully masked row's w is inf · 0 = NaN: it adds nothing)
        # (log 0 · 0 is NaN too: w = 0 adds nothing, as it should; xlogy took twice as long)
        total -= s.copy_(w).log_().mul_(w).nansum(-1)
    return total


def entropy_in_c(
    heads: Sequence[DenseHead],
    kept: Sequence[Tensor],
    shift: Tensor,
    scored: Sequence[ScoredHead],
    *,
    size: int,
    mask: Tensor | None,
) -> Tensor | None:
    """The entropy (B,) in one read of the dense heads' kept scores (B, N) and the scored
    heads' (models/_cpu_kernels.c), a head of few books (`ScoredHead.support`) read at those
    alone, where every head's scores are float32 rows in CPU memory; None where they are
    not."""
    if not cpu_kernels.available():
        return None
    B, Hd = shift.shape[0], len(heads)
    dense = [(s, h.scale) for s, h in zip(kept, heads, strict=True)]
    sparse: list[tuple[Tensor, float, Tensor, Tensor]] = []
    dense_cols, sparse_cols = list(range(Hd)), []
    for j, sh in enumerate(scored, start=Hd):
        if sh.support is None:
            dense.append((sh.scores.cpu(), sh.scale))
            dense_cols.append(j)
            continue
        rows, cols = sh.support
        offsets = torch.searchsorted(rows.contiguous(), torch.arange(B + 1))
        sparse.append((sh.scores.cpu(), sh.scale, cols, offsets))
        sparse_cols.append(j)
    scores = [x for x, _ in dense] + [x for x, _, _, _ in sparse]
    if any(x.dtype != torch.float32 or x.shape != (B, size) or x.stride(1) != 1 for x in scores):
        return None
    columns = dense_cols + sparse_cols
    return cpu_kernels.sweep_entropy(dense, sparse, shift[:, columns], mask)


@dataclass(frozen=True)
class SparseTerms:
    """A scored head's part of the sweep's w when it holds few books (the lexical head: the
    books with a query term): exp(scale · s − lse + log π) of its finite scores only, flat
    positions b · N + i ascending."""

    where: Tensor  # (nnz,) int64 b · N + i
    terms: Tensor  # (nnz,) float64
    size: int  # N

    @classmethod
    def of(cls, head: ScoredHead, shift: Tensor, device: torch.device) -> SparseTerms | None:
        """The head's terms (shift (B,): log π − lse), or None when it holds over half of (B, N):
        then the dense pass is the cheaper."""
        if head.support is None:
            return None
        rows, cols = head.support
        N = head.scores.shape[1]
        where = rows * N + cols
        terms = (head.scores.cpu().reshape(-1)[where].double() * head.scale).to(device)
        return cls(where.to(device), terms.add_(shift[rows]).exp_(), N)

    def add_to(self, w: Tensor, start: int, stop: int) -> None:
        """Add the terms of columns [start, stop) into w (B, stop − start)."""
        B, c = w.shape
        if start == 0 and stop == self.size:  # one chunk: b · N + i is where w holds it
            w.view(-1).index_add_(0, self.where, self.terms)
            return
        rows = torch.arange(B, device=w.device)
        lo = torch.searchsorted(self.where, rows * self.size + start)  # (B,)
        hi = torch.searchsorted(self.where, rows * self.size + stop)
        counts = hi - lo  # each row's terms in the chunk: [lo, hi) of `where`, concatenated
        take = torch.repeat_interleave(lo - (counts.cumsum(0) - counts), counts)
        take += torch.arange(int(counts.sum()), device=w.device)
        where = self.where[take]
        b, i = where // self.size, where % self.size
        w.view(-1).index_add_(0, b * c + (i - start), self.terms[take])
