"""A mixture's heads: what each is (`DenseHead`: logits scale · q Kᵀ over keys; `ScoredHead`:
logits scale · s over scores given for every book, e.g. BM25), and the three operations the
mixture needs from its dense heads, behind `DenseHeads`:

    top(k')       each head's top k' rows, their weights and exact scores, and its log-sum-exp
    scores(cand)  the raw scores of given rows
    sweep(...)    one chunked pass: the candidates' scores and the mixture's entropy

`LocalDenseHeads` answers them over keys in this process (all of the catalog, or one shard's
rows); a cluster's router (service/cluster/shards/router.py `ShardedDenseHeads`) asks shards and
merges their answers exactly (models/shard_merge.py). The mixture (models/mixture.py) never
calls them: it yields what it needs, and the engine asks them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Protocol

import numpy as np
import torch
from torch import Tensor

from models.attention import Attention, attend, chunk_for
from models.attention_chunks import raw_scores

# A head's raw scores (B, N) are kept from its `attend` call for the entropy sweep when they take
# at most 16 MiB: the sweep then reads no keys. A search on the shared catalog, B = 1, saves two
# passes over 8 MB of keys; one query over 1M keys a whole second pass over 1.5 GB.
KEEP_SCORES = 1 << 22


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

    @cached_property
    def support(self) -> tuple[Tensor, Tensor] | None:
        """(rows, cols) of the finite scores, row-major, when at most half of (B, N) is finite,
        else None. The lexical head holds only the books with a query term (3-34% of a 1M-book
        catalog for the benchmarks' queries), and passes over those beat passes over N mostly
        −inf. numpy's: torch's isfinite and nonzero took 5 ms over (1, 1M) here, numpy's 1."""
        finite = np.isfinite(self.scores.cpu().numpy())
        if 2 * np.count_nonzero(finite) > finite.size:
            return None
        rows, cols = np.nonzero(finite)
        return torch.from_numpy(rows), torch.from_numpy(cols)


# per head: its top rows (B, k') int64, −1 padded, their weights (B, k') float64, 0 padded, and
# their exact raw scores (B, k') float64
TopLists = list[tuple[Tensor, Tensor, Tensor]]


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
        self._scores: list[Tensor | None] = [None] * len(self.heads)  # (B, N) fp32, kept

    @property
    def scales(self) -> list[float]:
        return [head.scale for head in self.heads]

    def attend_heads(self, k: int) -> list[Attention]:
        """Per head, `attend` over its keys (rows of these keys, not offset); heads sharing keys
        and scale run in one call over their stacked queries."""
        out: list[Attention | None] = [None] * len(self.heads)
        groups: dict[tuple[int, float], list[int]] = {}
        for h, head in enumerate(self.heads):
            groups.setdefault((id(head.keys), head.scale), []).append(h)
        mask, C = self.mask, self.chunk_size
        for members in groups.values():
            first = self.heads[members[0]]
            B = first.q.shape[0]
            kept = None
            if B * self.size <= KEEP_SCORES:
                kept = torch.empty(len(members) * B, self.size, device=first.keys.device)
            if len(members) == 1:
                out[members[0]] = attend(
                    first.q,
                    first.keys,
                    k=k,
                    scale=first.scale,
                    mask=mask,
                    chunk_size=C,
                    scores_out=kept,
                )
                self._scores[members[0]] = kept
                continue
            q = torch.cat([self.heads[h].q for h in members])
            m = mask if mask is None or mask.dim() == 1 else mask.repeat(len(members), 1)
            att = attend(
                q, first.keys, k=k, scale=first.scale, mask=m, chunk_size=C, scores_out=kept
            )
            for j, h in enumerate(members):
                rows = slice(j * B, (j + 1) * B)
                self._scores[h] = None if kept is None else kept[rows]
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
        atts = self.attend_heads(k)
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
        # heads over the same keys (a recommendation's liked books) gather them once
        groups: dict[int, list[int]] = {}
        for h, head in enumerate(self.heads):
            groups.setdefault(id(head.keys), []).append(h)
        for members in groups.values():
            keys = self.heads[members[0]].keys
            kc = keys[safe.to(keys.device)].float()  # (B, C, d)
            q = torch.stack([self.heads[h].q for h in members], dim=-1)  # (B, d, G)
            s = torch.bmm(kc, q.to(kc.device).float())  # (B, C, G) fp32
            out[:, :, members] = torch.where(inside[:, :, None], s.double().cpu(), 0.0)
        return out

    def sweep(
        self, pi: Tensor, lse: Tensor, cand: Tensor, scored: Sequence[ScoredHead]
    ) -> tuple[Tensor, Tensor]:
        """Over these rows only: candidates elsewhere score 0, and the entropy is these rows'
        part of the sum (the shards' parts add up to the whole)."""
        B, N, Hd = pi.shape[0], self.size, len(self.heads)
        # the pass stays where the keys are
        device = self.heads[0].keys.device if self.heads else torch.device("cpu")
        # float64 and several arrays per chunk: an eighth of attend's chunk keeps the same budget
        C = self.chunk_size or chunk_for(8 * B, N, device)
        pi, lse, cand = pi.to(device), lse.to(device), (cand - self.offset).to(device)
        mask = None if self.mask is None else self.mask.to(device)
        # log π_h − lse_h (B, H): a term is exp(scale_h s − lse_h + log π_h), one pass fewer
        shift = pi.log() - lse
        sparse = [SparseTerms.of(sh, shift[:, j], device) for j, sh in enumerate(scored, Hd)]
        scores = torch.zeros(B, cand.shape[1], Hd, dtype=torch.float64, device=device)
        total = torch.zeros(B, dtype=torch.float64, device=device)
        for start in range(0, N, C):
            stop = min(N, start + C)
            inside = (cand >= start) & (cand < stop)  # (B, C) candidates in this chunk
            at = (cand - start).clamp(0, stop - start - 1)
            # w the mixture's probabilities, s one head's scores then its term: two (B, c) float64
            # buffers worked in place, where an expression per head allocated five (each a page
            # fault per 4 KiB): at N = 1M, B = 1, the sweep of 2 dense and 3 scored heads took
            # 18-45 ms that way and 14-21 ms in place (in turns, three runs), the same bits
            w = torch.zeros(B, stop - start, dtype=torch.float64, device=device)
            s = torch.empty_like(w)
            for h, head in enumerate(self.heads):
                kept = self._scores[h]
                if kept is not None:  # from the head's attend call: no second pass over its keys
                    s.copy_(kept[:, start:stop])  # (B, c)
                else:
                    kc = head.keys[start:stop]
                    s.copy_(raw_scores(head.q.to(kc.device), kc))  # (B, c)
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
        return scores.cpu(), total.cpu()


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
